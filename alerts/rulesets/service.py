"""The gpuhealth service's own health: scraped, its database, its buffer, scoring and pulling on time."""

from __future__ import annotations

from alerts import config as c
from alerts.model import Alert, Case, series, service_target
from alerts.rulesets.common import GROUP_COLLECTOR, INSTANCE, VALUE

_SERVICE = service_target()
_IT = f"The gpuhealth service at {INSTANCE}"

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuHealthServiceDown",
        group=GROUP_COLLECTOR,
        expr=f"up{{{c.SERVICE_SELECTOR}}} == 0",
        for_="5m",
        severity="warning",
        action="watch",
        summary=f"gpuhealth service down ({INSTANCE})",
        description=f"Prometheus cannot scrape the gpuhealth service at {INSTANCE} for 5m: no risk scores, "
        "decisions or webhook.",
        case=Case.single("up", _SERVICE, "1x5 0x10", quiet_at="8m", fire_at="12m", value=0),
        meaning="`gpuhealth serve` is down or unreachable; decisions stop updating and Alertmanager's webhook "
        "deliveries fail.",
        check=("`systemctl status gpuhealth-serve`; `curl -s http://<instance>/healthz`.",),
        act=("Restart the service; check its database (GpuHealthStoreDown).",),
    ),
    Alert(
        name="GpuHealthStoreDown",
        group=GROUP_COLLECTOR,
        expr="gpuhealth_store_up == 0",
        for_="5m",
        severity="warning",
        action="watch",
        summary=f"gpuhealth cannot reach its database ({INSTANCE})",
        description=f"{_IT} has had no database for 5m; samples are buffered in memory and dropped when the "
        "buffer fills.",
        case=Case.single("gpuhealth_store_up", _SERVICE, "1x5 0x10", quiet_at="8m", fire_at="12m", value=0),
        meaning="SQLite/PostgreSQL is unreachable or failing.",
        check=("The service log; `pg_isready -h <db host>` for PostgreSQL; free disk space for SQLite.",),
        act=("Restore the database; the service reconnects by itself.",),
    ),
    Alert(
        name="GpuHealthDroppingSamples",
        group=GROUP_COLLECTOR,
        expr="increase(gpuhealth_buffer_dropped_samples_total[10m]) > 0",
        for_="0m",
        severity="warning",
        action="watch",
        summary=f"gpuhealth drops samples ({INSTANCE})",
        description=f"{_IT} dropped {VALUE} samples in 10m: its buffer is full while the database is down.",
        case=Case.single(
            "gpuhealth_buffer_dropped_samples_total",
            _SERVICE,
            "0x10 100+100x10",
            quiet_at="9m",
            fire_at="20m",
            value=1000,
        ),
        meaning="History is being lost: the scores will miss these samples.",
        check=("GpuHealthStoreDown; the `buffer_samples` setting.",),
        act=("Restore the database; raise GPUHEALTH_BUFFER_SAMPLES if outages are expected to be long.",),
    ),
    Alert(
        name="GpuHealthScoringStale",
        group=GROUP_COLLECTOR,
        expr=f"time() - gpuhealth_score_last_run_timestamp_seconds > {c.SCORE_STALE_S}",
        for_="10m",
        severity="warning",
        action="watch",
        summary=f"gpuhealth has not scored GPUs for a while ({INSTANCE})",
        description=f"{_IT} last scored {VALUE} s ago (more than {c.SCORE_STALE_S} s): risks and decisions are stale.",
        case=Case.single(
            "gpuhealth_score_last_run_timestamp_seconds", _SERVICE, "0x200", quiet_at="30m", fire_at="1h", value=3600
        ),
        meaning="The scoring loop stopped or keeps failing (no data, model file missing, database down).",
        check=("The service log (search for `score`); `curl -s http://127.0.0.1:8080/v1/gpus | head`.",),
        act=("Fix the cause in the log and restart the service.",),
    ),
    Alert(
        name="GpuHealthPullFailing",
        group=GROUP_COLLECTOR,
        expr="increase(gpuhealth_pull_failures_total[15m]) > 0 and increase(gpuhealth_pull_runs_total[15m]) == 0",
        for_="0m",
        severity="warning",
        action="watch",
        summary=f"gpuhealth cannot pull the fleet from Prometheus ({INSTANCE})",
        description=f"{_IT} (`serve --source prometheus`) has failed {VALUE} pulls in 15m and none succeeded: "
        "no new samples are stored or scored.",
        case=Case(
            series=(
                (series("gpuhealth_pull_failures_total", _SERVICE), "0x10 1+1x20"),
                (series("gpuhealth_pull_runs_total", _SERVICE), "0+1x10 10x20"),
            ),
            quiet_at="20m",
            fire_at="28m",
            value=15,
            labels=(_SERVICE,),
        ),
        meaning="Fleet mode is blind: Prometheus is unreachable or refuses the queries, or the database is down. "
        "Nothing is lost yet: the next successful pull catches up, as far back as `--backfill`.",
        check=(
            "The service log (search for `pull from Prometheus failed`); "
            "`curl -s http://127.0.0.1:8080/healthz`; `curl -s <prometheus>/-/ready`.",
            "GpuHealthStoreDown, if the database is the cause.",
        ),
        act=("Restore Prometheus or the database; the service pulls again by itself.",),
    ),
    Alert(
        name="GpuHealthActuatorBreakerOpen",
        group=GROUP_COLLECTOR,
        expr="gpuhealth_actuator_breaker_open == 1",
        for_="0m",
        severity="critical",
        action="watch",
        summary=f"gpuhealth stopped acting on the cluster: its breaker is open ({INSTANCE})",
        description=f"{_IT} would have demoted or drained more nodes within its window than the breaker allows "
        "(default 10 % of the nodes and at most 5 per hour); it acts on no node until a person resets it.",
        case=Case.single(
            "gpuhealth_actuator_breaker_open", _SERVICE, "0x10 1x10", quiet_at="9m", fire_at="12m", value=1
        ),
        meaning="Either many nodes really failed at once (a rack, a power or cooling event, a bad driver) or "
        "the model or a rule went wrong and wanted to drain healthy nodes. The actuator stopped before it "
        "could drain the fleet; nodes already demoted or drained stay so, nothing is undone.",
        check=(
            "Why it opened: `curl -s http://127.0.0.1:8080/v1/actuator` (`reason`).",
            "What it wanted: `curl -s 'http://127.0.0.1:8080/v1/actions?result=blocked'`; are those GPUs "
            "really failing (each action names the GPU and why), or is it one node-wide cause or a new model "
            "(`GET /v1/model`)?",
        ),
        act=(
            "A real incident: fix its cause; drain by hand what must be drained, or reset and let the actuator "
            "act (it re-reads every node; queued intentions are never replayed).",
            "A bad model or rule: roll it back (`gpuhealth model promote <previous version>`), or put the "
            "actuator in dry-run, then reset.",
            'Reset: `curl -s -X POST -H "Authorization: Bearer $GPUHEALTH_TOKEN" -H \'Content-Type: '
            'application/json\' -d \'{"by": "<you>"}\' http://127.0.0.1:8080/v1/actuator/reset`.',
        ),
    ),
)
