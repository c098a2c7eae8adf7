"""End to end on loopback: gpuhealth → Prometheus (our rules) → Alertmanager (our routes) → gpuhealth's webhook.

The processes, all real and started once for the module:

- `gpuhealth serve --backend sim`: 3 simulated H100 nodes × 8 GPUs, ten simulated minutes per
  second, the last node a spare pool that the probe scheduler probes every 10 s, faults injected
  (see FAULTS), scoring every 5 s, each node's kernel log written and read (`--sim-kernel-log`), the
  spare node on an NVLink fabric (its per-link and fabric series). It is scraped as job
  `gpuhealth-service`, as docs/alerts.md says.
- `gpuhealth collect --backend sim`: a per-node collector (job `gpuhealth`) of one simulated node with
  an NVLink fabric whose Fabric Manager stops (GpuFabricNotReady's count) and a kernel log, in which
  one GPU logs XID 120, which NVML's events never deliver (COLLECTOR_FAULTS): the rules on the
  per-link, fabric and kernel-log series select the collectors' job. Its node is named sim-node-00
  too, so Prometheus renames it at scrape (SIM_COLLECTOR_HOST), as each real node's collector has its
  own hostname.
- `gpuhealth collect --backend replay`: a per-node collector (job `gpuhealth`) replaying a small
  history of an older node (REPLAY_GPUS): a V100 (pre-Ampere, so it reports retired pages, which
  no simulated model does) and an A100 (so the per-model temperature branches all see data), with
  XIDs the simulator never raises on demand (64, and 13 three times).
- `gpuhealth serve --source prometheus` (fleet mode, also job `gpuhealth-service`): no collector
  of its own; it pulls all of the above back out of Prometheus every 2 s, so the rules about
  pulling from Prometheus see real series.
- Prometheus (Debian package) with `alerts/generated/gpuhealth-rules.yml` as it is, scraping and
  evaluating every second and sending to:
- Alertmanager (Debian package) with `alerts/alertmanager.example.yml`'s routes, receivers and
  inhibitions; only the webhook URL (this service), the token file and the group timers (1 s,
  so a test does not wait 30 s) are changed.

Asserted:

1. Alerts whose `for` fits in the test (0 or 1 m; the promtool unit tests cover every alert's
   firing) fire in Prometheus, are active in Alertmanager and come back through the webhook:
   `GET /v1/alerts` lists each with the faulty GPU's UUID (taken from `GET /v1/gpus`). A drain or
   RMA alert inhibits GpuXidErrors (action watch) of the same GPU in Alertmanager.
2. Every PromQL expression of every generated rule and dashboard returns data from that
   Prometheus, and every metric selector in it does too (a misspelled metric hides behind
   `or vector(0)` or inside an `and`). For an alert, whose full expression is a condition that is
   rightly empty on a healthy fleet, the expression is split generically (`split_condition`):
   `or` branches and `and` operands separately, and a comparison replaced by its value side
   (`X > 10` → `X`); each part must return data. So every branch of e.g. GpuTemperatureHigh
   (A100, H100/H200, other models) is shown to match real series. Dashboard variables are resolved
   with the faulty spare-node GPU's Hostname, gpu and UUID (a GPU with XIDs, probes, a firing
   alert and a failure record, so every GPU panel has data); targets of retired-page fields,
   which only pre-Ampere GPUs have (PRE_AMPERE_ONLY), with the replayed V100's. An expression
   Prometheus cannot parse fails the test. The replaying collector also reads a fake sysfs with
   two InfiniBand/RoCE ports (tests/collector/sysfs_ib.py): their panels are checked with its node.
   ALLOWED_EMPTY lists what may stay empty here, with the reason (the ports' ties to GPUs, which
   a replayed history without PCI bus ids cannot give).

Parts of the form `x unless x offset 5m` ("series newer than 5 minutes", the rules' way of
counting a counter's first increase) have data only while Prometheus is younger than that
window, which it always is in this test.
"""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

import alerts
import dashboards
from alerts import config as alert_config
from core.infiniband import PREFIX
from tests.collector import sysfs_ib
from tests.integration.conftest import (
    REPO_ROOT,
    PromClient,
    Service,
    free_port,
    http_get,
    poll,
    start_alertmanager,
    start_prometheus,
    start_service,
)
from tests.integration.promql_parts import selectors, split_condition

pytestmark = pytest.mark.integration

RULES = REPO_ROOT / "alerts/generated/gpuhealth-rules.yml"
AM_EXAMPLE = REPO_ROOT / "alerts/alertmanager.example.yml"
SERVICE_JOB = re.search(r'job="([^"]+)"', alert_config.SERVICE_SELECTOR).group(1)  # type: ignore[union-attr]
COLLECTOR_JOB = re.search(r'job="([^"]+)"', alert_config.COLLECTOR_SELECTOR).group(1)  # type: ignore[union-attr]
TOKEN = "e2e-alerts-token"

NODES, GPUS_PER_NODE, SEED = 3, 8, 7
SPARE_NODE = NODES - 1
"""`--sim-spare-nodes 1`: the last node stays idle, so the probe scheduler probes its GPUs."""
OFFBUS_GPU = 5
"""sim-node-00 GPU 5 falls off the bus (XID 79) one simulated hour (6 s) after the start: GpuLost, GpuXidFatal."""
ECC_GPU = 19
"""sim-node-02 (the spare node) GPU 3: HBM wear-out failing after 3 simulated hours (18 s): SBEs, remaps,
XID 63/92, then a row-remap failure (it keeps answering): GpuRowRemapFailure, decision rma. Being on the
spare node it is probed too, so it is the GPU the dashboards are resolved with."""
SPARE_THERMAL_GPU = 21
"""sim-node-02 GPU 5: a cooling fault, slow under the probes' load (gpuhealth_probe_slow)."""
FAULTS = (
    f"{OFFBUS_GPU}:offbus:1",
    "3:ecc:4",  # a busy GPU with rising SBEs
    "10:thermal:5",  # a busy GPU overheating, throttling, then shutting down
    "12:pcie:8",  # replays rising, link downtrained to x8
    f"{ECC_GPU}:ecc:3",
    f"{SPARE_THERMAL_GPU}:thermal:10",
    f"{ECC_GPU}:fabric:10000",  # the spare node has a fabric, registered and all links up, for the whole test
)

COLLECTOR_FAULTS = (
    "0:fabric:1",  # the node's fabric, registered and all links up, until Fabric Manager stops at 6 s
    "6:log-xid:0.5",  # XID 120 in the kernel log only, three seconds in: GpuKernelXidResetRequired
)
SIM_COLLECTOR_HOST = "sim-collector-00"
"""The per-node simulated collector's node, renamed from sim-node-00 by the collectors' job's relabelling."""

REPLAY_HOST = "replay-node-00"
V100_UUID = "GPU-5e1f0c2a-0001-4d5b-9a0e-0000000000a0"
A100_UUID = "GPU-5e1f0c2a-0002-4d5b-9a0e-0000000000a1"
REPLAY_ROWS = 40
"""Seconds of replayed history (looped). On the V100: XID 64 at row 10, XID 13 at rows 15, 18, 21 (its third
makes GpuXidApplicationRepeated fire, by then long after GpuRetiredPagesLimit, which inhibits it)."""

STARTUP_S = 60.0
"""Until the scenario is ripe: the model scores after 6 simulated hours of history (36 s here)."""
FIRE_S = 120.0
"""For a `for: 1m` alert to fire and be delivered; twice what it takes on an idle machine."""

EXPECTED: dict[str, tuple[str, str]] = {
    # alertname: (which GPU, why it fires quickly)
    "GpuLost": ("offbus", "gpuhealth_gpu_lost == 1 for 1m"),
    "GpuXidFatal": ("offbus", "XID 79"),
    "GpuDecisionDrain": ("offbus", "gpuhealth decides drain for a lost GPU, for 1m"),
    "GpuRowRemapFailure": ("ecc", "the ECC fault ends in a remap failure"),
    "GpuXidHighSbeRate": ("ecc", "XID 92 while the SBE rate is high"),
    "GpuDecisionRma": ("ecc", "the RMA rules match the remap failure, for 1m"),
    "GpuRetiredPagesLimit": ("v100", "the replayed V100 has 66+ retired pages"),
    "GpuXidRmaCandidate": ("v100", "XID 64 replayed"),
    "GpuXidApplicationRepeated": ("v100", "XID 13 replayed three times a lap"),
}
INHIBITED = ("GpuXidApplicationRepeated", "v100")
"""Action watch, on a GPU that already has rma alerts (GpuRetiredPagesLimit from the first evaluation):
Alertmanager must hold it back (inhibit_rules), so it never reaches the webhook."""

PRE_AMPERE_ONLY = re.compile(r"\bDCGM_FI_DEV_RETIRED_")
"""Fields an Ampere or later GPU never reports (NVML: not supported); dashboards are checked with the V100 for them."""

ON_REPLAYED_NODE = re.compile(rf"\b{PREFIX}")
"""InfiniBand ports: the replaying collector reads a fake sysfs (tests/collector/sysfs_ib.py); checked with its node."""
_NO_TIES = (
    "the replayed history has no PCI bus ids, so no port is tied to a GPU here "
    "(tests/collector/test_infiniband.py covers the ties)"
)

_NO_REMEDIATION = (
    "the remediation series (api/metrics.py) have values once the loop has ended or holds a remediation, which "
    "the scenario's minutes need not bring (tests/alerts/test_remediation_rules.py covers the rules)"
)
_REMEDIATION_WHERE = (
    *(f"alert:{a} {p}" for a in ("GpuRemediationStuck", "GpuRemediationRmaRateHigh") for p in ("part", "selector")),
    *(f"record:service:remediations:increase1d{part}" for part in ("", " part", " selector")),
    *(
        f"gpuhealth-fleet/{title}/{ref}{part}"
        for title, refs in (
            ("Remediations stuck", "A"), ("Remediations open by stage", "A"),
            ("Remediations ended: returned vs rma", "A"), ("Time to return to service", "AB"),
        )
        for ref in refs
        for part in ("", " selector")
    ),
)  # fmt: skip

_NO_SXID = (
    "a simulated or replayed node has no NVSwitch, so its kernel log has no SXID "
    "(tests/collector/test_kmsg.py, test_journal.py and tests/alerts/test_kernel_log_rules.py cover them)"
)
_SXID_WHERE = (
    *(f"alert:GpuNvswitchFatalSxid {p}" for p in ("part", "selector")),
    *(f"gpuhealth-node/Kernel log: XIDs and SXIDs (1 h)/B{p}" for p in ("", " selector")),
)
_NO_XID_94 = (
    "the simulator logs XID 94 only with a double-bit error, which its ECC fault brings hours after this "
    "test's minutes, if at all (tests/alerts/test_kernel_log_rules.py covers the rule)"
)

_NO_DCGM = "NVSwitches are listed by the dcgm backend only (tests/collector/backends/test_dcgm_links.py covers it)"
_DCGM_WHERE = (
    *(f"alert:GpuNvswitchFatalDcgm {p}" for p in ("part", "selector")),
    *(f"gpuhealth-node/NVSwitch ports up (DCGM)/A{p}" for p in ("", " selector")),
    *(f"gpuhealth-node/NVSwitch last SXID (DCGM)/{ref}{p}" for ref in "AB" for p in ("", " selector")),
)

ALLOWED_EMPTY: dict[str, str] = {
    **{where: _NO_REMEDIATION for where in _REMEDIATION_WHERE},
    **{where: _NO_SXID for where in _SXID_WHERE},
    **{f"alert:GpuKernelXidContainedEcc {p}": _NO_XID_94 for p in ("part", "selector")},
    **{where: _NO_DCGM for where in _DCGM_WHERE},
    # where: why it may return no data in this scenario. Keep this short; prefer a richer scenario.
    "alert:GpuInfinibandPortDown part": _NO_TIES,
    "alert:GpuInfinibandPortDown selector": _NO_TIES,
    "gpuhealth-node/Rails and their GPUs/A": _NO_TIES,
    "gpuhealth-node/Rails and their GPUs/A selector": _NO_TIES,
}


# --- the scenario -------------------------------------------------------------------------------


def replay_history(path: Path) -> Path:
    """A CSV history of the replayed node: a V100 with retired pages and XIDs, an idle-ish A100."""
    cols = [
        "timestamp", "hostname", "gpu_uuid", "gpu_index", "model_name", "gpu_temp_c", "memory_temp_c",
        "power_w", "gpu_util_pct", "fb_used_mib", "fb_free_mib", "ecc_sbe_volatile", "ecc_dbe_volatile",
        "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending", "remapped_rows_correctable",
        "remapped_rows_uncorrectable", "row_remap_pending", "row_remap_failure", "xid",
    ]  # fmt: skip
    xids = {10: 64, 15: 13, 18: 13, 21: 13}
    lines = [",".join(cols)]
    for row in range(REPLAY_ROWS):
        ts = f"2026-01-01T00:00:{row:02d}Z"
        v100 = [ts, REPLAY_HOST, V100_UUID, 0, "Tesla V100-SXM2-32GB", 62, 71, 250, 95, 30000, 2500,
                3 * row, 0, 50, 16 + row // 10, 1, "", "", "", "", xids.get(row, 0)]  # fmt: skip
        a100 = [ts, REPLAY_HOST, A100_UUID, 1, "NVIDIA A100-SXM4-80GB", 66, 74, 320, 90, 60000, 21920,
                0, 0, "", "", "", 0, 0, 0, 0, 0]  # fmt: skip
        lines += [",".join(map(str, v100)), ",".join(map(str, a100))]
    path.write_text("\n".join(lines) + "\n")
    return path


def alertmanager_config(webhook_url: str, token_file: Path) -> str:
    """alerts/alertmanager.example.yml with this test's webhook, token file and 1 s group timers."""
    cfg = yaml.safe_load(AM_EXAMPLE.read_text())  # anchors resolve into copies

    def shorten(route: dict[str, Any]) -> None:
        for key in ("group_wait", "group_interval"):
            if key in route or route is cfg["route"]:
                route[key] = "1s"
        for sub in route.get("routes", []):
            shorten(sub)

    shorten(cfg["route"])
    hooks = 0
    for receiver in cfg["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = webhook_url
            hook["http_config"]["authorization"]["credentials_file"] = str(token_file)
            hooks += 1
    assert hooks, "the example Alertmanager config has no webhook receiver"
    return yaml.safe_dump(cfg, sort_keys=False)


@dataclass
class Stack:
    serve: Service
    collector: Service
    alertmanager: Service
    prometheus: Service
    prom: PromClient
    token_file: Path
    fleet: Service
    """`gpuhealth serve --source prometheus`, pulling the others back out of Prometheus."""
    sim_collector: Service
    """`gpuhealth collect --backend sim`: one simulated node with a fabric and a kernel log."""

    def services(self) -> list[Service]:
        return [self.serve, self.collector, self.alertmanager, self.prometheus, self.fleet, self.sim_collector]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("e2e-alerts")
    token_file = tmp / "token"
    token_file.write_text(TOKEN + "\n")
    started: list[Service] = []
    try:
        port = free_port()
        serve_cmd = [
            sys.executable, "-m", "gpuhealth.cli", "serve", "--backend", "sim",
            "--sim-nodes", str(NODES), "--sim-gpus", str(GPUS_PER_NODE), "--sim-spare-nodes", "1",
            "--seed", str(SEED), "--interval", "1s", "--sim-speed", "600", "--score-interval", "5s",
            "--fields", "all", "--db", f"sqlite:///{tmp / 'gpuhealth.db'}", "--listen", f"127.0.0.1:{port}",
            "--token-file", str(token_file), "--log-level", "INFO", "--actuate", "dry-run", "--actuate-target", "sim",
            "--sim-kernel-log", str(tmp / "serve-kmsg"), *[a for f in FAULTS for a in ("--sim-fault", f)],
        ]  # fmt: skip
        serve = start_service(
            "gpuhealth serve", serve_cmd, f"http://127.0.0.1:{port}", "/readyz", tmp / "serve.log",
            env={"GPUHEALTH_PROBE_EVERY": "10s"},
        )  # fmt: skip
        started.append(serve)
        cport = free_port()
        collect_cmd = [
            sys.executable, "-m", "gpuhealth.cli", "collect", "--backend", "replay",
            "--history", str(replay_history(tmp / "replay.csv")), "--speed", "1", "--loop",
            "--interval", "1s", "--fields", "all", "--listen", f"127.0.0.1:{cport}",
            "--sysfs-root", str(sysfs_ib.build(tmp / "sys")),
        ]  # fmt: skip
        collector = start_service(
            "gpuhealth collect", collect_cmd, f"http://127.0.0.1:{cport}", "/healthz", tmp / "collect.log"
        )
        started.append(collector)
        sport = free_port()
        sim_collect_cmd = [
            sys.executable, "-m", "gpuhealth.cli", "collect", "--backend", "sim", "--sim-nodes", "1",
            "--sim-gpus", str(GPUS_PER_NODE), "--seed", str(SEED + 1), "--sim-speed", "600", "--interval", "1s",
            "--sim-kernel-log", str(tmp / "collect-kmsg"), "--listen", f"127.0.0.1:{sport}",
            *[a for f in COLLECTOR_FAULTS for a in ("--sim-fault", f)],
        ]  # fmt: skip
        sim_collector = start_service(
            "gpuhealth collect --backend sim", sim_collect_cmd, f"http://127.0.0.1:{sport}", "/healthz",
            tmp / "collect-sim.log",
        )  # fmt: skip
        started.append(sim_collector)
        am = start_alertmanager(tmp / "alertmanager", alertmanager_config(f"{serve.url}/v1/alertmanager", token_file))
        started.append(am)
        fleet_port = free_port()  # the fleet-mode service needs Prometheus's address, Prometheus needs its
        prometheus = start_prometheus(
            tmp / "prometheus",
            {SERVICE_JOB: [serve.url.removeprefix("http://"), f"127.0.0.1:{fleet_port}"],
             COLLECTOR_JOB: [collector.url.removeprefix("http://"), sim_collector.url.removeprefix("http://")]},
            rule_files=[RULES],
            alertmanagers=[am.url.removeprefix("http://")],
            scrape={COLLECTOR_JOB: {"metric_relabel_configs": [{
                "source_labels": ["Hostname"], "regex": "sim-node-00", "target_label": "Hostname",
                "replacement": SIM_COLLECTOR_HOST,
            }]}},
        )  # fmt: skip
        started.append(prometheus)
        fleet_cmd = [
            sys.executable, "-m", "gpuhealth.cli", "serve", "--source", "prometheus", "--prometheus", prometheus.url,
            "--pull-every", "2s", "--pull-step", "2s", "--backfill", "10m", "--score-interval", "30s",
            "--db", f"sqlite:///{tmp / 'fleet.db'}", "--listen", f"127.0.0.1:{fleet_port}",
        ]  # fmt: skip
        fleet = start_service(
            "gpuhealth serve --source prometheus", fleet_cmd, f"http://127.0.0.1:{fleet_port}", "/readyz",
            tmp / "fleet.log",
        )  # fmt: skip
        started.append(fleet)
        yield Stack(serve, collector, am, prometheus, PromClient(prometheus.url), token_file, fleet, sim_collector)
        for svc in started:
            svc.assert_alive()
    finally:
        for svc in reversed(started):
            svc.stop()


@pytest.fixture(scope="module")
def gpus(stack: Stack) -> dict[str, dict[str, Any]]:
    """The GPUs of the scenario by role ("offbus", "ecc", "v100", ...): uuid, hostname, gpu index."""
    items = poll(
        "every simulated GPU listed by GET /v1/gpus",
        lambda: json.loads(stack.serve.get("/v1/gpus?limit=1000"))["items"],
        lambda got: len(got) >= NODES * GPUS_PER_NODE,
    )
    by_index = {(g["hostname"], g["gpu_index"]): g for g in items}

    def sim(i: int) -> dict[str, Any]:
        key = (f"sim-node-{i // GPUS_PER_NODE:02d}", i % GPUS_PER_NODE)
        assert key in by_index, f"GET /v1/gpus has no GPU {key}; it lists {sorted(by_index)}"
        g = by_index[key]
        return {"uuid": g["uuid"], "hostname": g["hostname"], "gpu": str(g["gpu_index"])}

    return {
        "offbus": sim(OFFBUS_GPU),
        "ecc": sim(ECC_GPU),
        "v100": {"uuid": V100_UUID, "hostname": REPLAY_HOST, "gpu": "0"},
        "a100": {"uuid": A100_UUID, "hostname": REPLAY_HOST, "gpu": "1"},
    }


@pytest.fixture(scope="module")
def ripe(stack: Stack, gpus: dict[str, dict[str, Any]]) -> Stack:
    """Wait until the scenario has what every expression needs, and record a failure and an RMA."""
    prom, ecc = stack.prom, gpus["ecc"]["uuid"]
    for what, expr in [
        ("the model scored the fleet", 'gpuhealth_risk{mode="overall"}'),
        ("the spare node's faulty GPU was probed", f'gpuhealth_probe_ratio{{UUID="{ecc}"}}'),
        ("XIDs on the spare node's faulty GPU", f'gpu:xid_errors:increase5m{{UUID="{ecc}"}}'),
        ("an alert firing for it", f'ALERTS{{alertstate="firing", UUID="{ecc}"}}'),
        ("the V100's XID 13 counted", 'gpuhealth_xid_errors_total{xid="13"}'),
        ("the simulated node's log-only XID", f'gpuhealth_kernel_xid_errors_total{{Hostname="{SIM_COLLECTOR_HOST}"}}'),
        ("the simulated node's fabric not ready", f'gpuhealth_fabric_state{{Hostname="{SIM_COLLECTOR_HOST}"}} == 1'),
    ]:
        poll(what, lambda e=expr: prom.query(e), bool, deadline_s=STARTUP_S)  # type: ignore[misc]
    now = datetime.now(UTC).isoformat()
    for body in (
        {"gpu_uuid": gpus["offbus"]["uuid"], "failed_at": now, "mode": "other", "kind": "failure", "xid": 79},
        {"gpu_uuid": ecc, "failed_at": now, "mode": "ecc", "kind": "rma", "note": "e2e test"},
    ):
        req = urllib.request.Request(
            f"{stack.serve.url}/v1/failures",
            data=json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 201, resp.read()
    prom.wait_for(
        "sum by (kind) (increase(gpuhealth_failures_recorded_total[1h])) > 0",
        lambda r: {s["metric"]["kind"] for s in r} == {"failure", "rma"},
        deadline_s=STARTUP_S,
    )
    return stack


# --- tests --------------------------------------------------------------------------------------


def query(url: str, expr: str) -> tuple[list[dict[str, Any]] | None, str]:
    """(result, "") of an instant query, or (None, error) when Prometheus rejects it."""
    status, body = http_get(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10.0)
    try:
        answer = json.loads(body)
    except ValueError:
        return None, f"HTTP {status}: {body[:200]!r}"
    if answer.get("status") != "success":
        return None, f"{answer.get('errorType')}: {answer.get('error')}"
    data = answer["data"]
    return (data["result"] if data["resultType"] == "vector" else [data["result"]]), ""


def check_all(url: str, checks: list[tuple[str, str]]) -> list[str]:
    """Problems with (where, expr) checks: an error, or no data (unless ALLOWED_EMPTY says why)."""
    problems, seen = [], set()
    for where, expr in checks:
        if (where, expr) in seen:
            continue
        seen.add((where, expr))
        result, error = query(url, expr)
        if error:
            problems.append(f"{where}: {expr!r}: {error}")
        elif not result and where not in ALLOWED_EMPTY:
            problems.append(f"{where}: {expr!r} returned no data")
    return problems


def test_split_condition_examples() -> None:
    assert split_condition('(a{x="1"} > 85) or (b < c and d == 1)') == ['a{x="1"}', "b", "c", "d"]
    assert split_condition("x or on (Hostname, UUID) (y != 0 and changes(y[5m]) > 0)") == [
        "x", "y", "changes(y[5m])",
    ]  # fmt: skip
    assert split_condition("(x unless x offset 1h) >= 3") == ["x unless x offset 1h"]
    assert split_condition("time() - t > 1800") == ["time() - t"]
    assert selectors('sum by (a) (rate(m_total{a=~"x|y"}[5m])) and on (a) n') == ['m_total{a=~"x|y"}', "n"]


def test_alerts_fire_reach_alertmanager_and_come_back_through_the_webhook(
    ripe: Stack, gpus: dict[str, dict[str, Any]]
) -> None:
    stack = ripe
    want = {(name, gpus[who]["uuid"]) for name, (who, _) in EXPECTED.items()}

    def firing() -> set[tuple[str, str]]:
        return {(s["metric"]["alertname"], s["metric"].get("UUID", "")) for s in stack.prom.query("ALERTS")
                if s["metric"]["alertstate"] == "firing"}  # fmt: skip

    poll("alerts firing in Prometheus", firing, lambda f: want <= f, deadline_s=FIRE_S)

    def in_alertmanager() -> list[dict[str, Any]]:
        status, body = http_get(f"{stack.alertmanager.url}/api/v2/alerts")
        assert status == 200, body
        return list(json.loads(body))

    def am_keys(alerts_: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(a["labels"]["alertname"], a["labels"].get("UUID", "")) for a in alerts_}

    am = poll("alerts active in Alertmanager", in_alertmanager, lambda a: want <= am_keys(a), deadline_s=30)
    for a in am:
        assert a["labels"].get("action") in ("watch", "demote", "drain", "rma"), a["labels"]

    # The expected drain and rma alerts are on GPUs with no graver alert, so nothing inhibits them and each
    # must come back; a watch alert comes back only if it reached Alertmanager before a graver one of its GPU.
    action = {(a["labels"]["alertname"], a["labels"].get("UUID", "")): a["labels"]["action"] for a in am}
    must = {k for k in want if action[k] in ("drain", "rma")}
    assert len(must) >= 6, action

    def delivered() -> dict[tuple[str, str], dict[str, Any]]:
        items = json.loads(stack.serve.get("/v1/alerts?status=firing&limit=1000"))["items"]
        return {(a["alertname"], a["gpu_uuid"] or ""): a for a in items}

    got = poll("drain and rma alerts delivered to GET /v1/alerts", delivered, lambda d: must <= d.keys(), deadline_s=30)
    row = got[("GpuRowRemapFailure", gpus["ecc"]["uuid"])]
    assert row["action"] == "rma" and row["severity"] == "critical", row
    assert row["hostname"] == gpus["ecc"]["hostname"], row
    assert row["annotations"]["runbook_url"].endswith("/GpuRowRemapFailure.md"), row
    assert row["labels"]["Hostname"] == gpus["ecc"]["hostname"], row

    # Inhibition: a watch alert of a GPU with rma alerts fires in Prometheus, but Alertmanager holds it back.
    name, who = INHIBITED
    key = (name, gpus[who]["uuid"])
    assert key in firing()
    held = [a for a in in_alertmanager() if (a["labels"]["alertname"], a["labels"].get("UUID", "")) == key]
    assert held and held[0]["status"]["state"] == "suppressed" and held[0]["status"]["inhibitedBy"], held
    assert key not in delivered(), f"{key} reached the webhook although an rma alert of its GPU inhibits it"


def test_fleet_mode_sees_every_gpu_and_every_lost_one(ripe: Stack) -> None:
    def states(svc: Service) -> dict[str, str]:
        return {g["uuid"]: g["state"] for g in json.loads(svc.get("/v1/gpus?limit=1000"))["items"]}

    # Every GPU Prometheus has had series of (a GPU lost before the first scrape never reached it).
    seen = {r["metric"]["UUID"] for r in ripe.prom.query("last_over_time(DCGM_FI_DEV_GPU_TEMP[1h])")}
    local = states(ripe.serve)
    lost = {u for u, st in local.items() if st == "lost"} & seen
    assert lost, "the scenario's thermal and PCIe faults leave GPUs lost after Prometheus saw them"
    fleet = poll(
        "the fleet-mode service listing every GPU Prometheus saw, the lost ones as lost",
        lambda: states(ripe.fleet), lambda f: f.keys() == seen and all(f[u] == "lost" for u in lost), deadline_s=30,
    )  # fmt: skip
    wrongly = {u for u, st in fleet.items() if st == "lost" and local.get(u) == "active"}
    assert not wrongly, f"lost in fleet mode only: {wrongly}"

    # Each GPU's PCI bus id, its slot's (decision 0089): fleet mode reads it from its series' label and keeps
    # what the local service's collector recorded (both stores beside their logs; the replayed GPUs have none).
    def buses(svc: Service) -> dict[str, str | None]:
        with sqlite3.connect(svc.log_path.parent / ("fleet.db" if svc is ripe.fleet else "gpuhealth.db")) as db:
            return dict(db.execute("SELECT uuid, pci_bus_id FROM gpus").fetchall())

    sim = {u: bus for u, bus in buses(ripe.serve).items() if u in seen}
    assert sim and all(sim.values())
    pulled = poll("the fleet-mode store keeping each GPU's PCI bus id", lambda: buses(ripe.fleet),
                  lambda f: all(f.get(u) for u in sim), deadline_s=30)  # fmt: skip
    assert {u: pulled[u] for u in sim} == sim


def test_every_rule_expression_returns_data(ripe: Stack) -> None:
    checks: list[tuple[str, str]] = []
    for where, expr in alerts.all_expressions():
        if where.startswith("record:"):
            checks.append((where, expr))
        checks += [(f"{where} part", part) for part in split_condition(expr)]
        checks += [(f"{where} selector", sel) for sel in selectors(expr)]
    problems = check_all(ripe.prom.url, checks)
    # Every alert's full expression must at least parse (an empty result is fine: a condition).
    for where, expr in alerts.all_expressions():
        _, error = query(ripe.prom.url, expr)
        if error:
            problems.append(f"{where}: {expr!r}: {error}")
    assert not problems, f"{len(problems)} rule expression(s) without data:\n" + "\n".join(problems)


def test_every_dashboard_expression_returns_data(ripe: Stack, gpus: dict[str, dict[str, Any]]) -> None:
    def values(who: str) -> dict[str, str]:
        g = gpus[who]
        return {"Hostname": g["hostname"], "gpu": g["gpu"], "UUID": g["uuid"]}

    checks: list[tuple[str, str]] = []
    for where, expr in dashboards.all_expressions():
        # Page retirement exists before Ampere only (later GPUs remap rows): those targets show the V100.
        who = "v100" if PRE_AMPERE_ONLY.search(expr) or ON_REPLAYED_NODE.search(expr) else "ecc"
        resolved = dashboards.resolve(expr, values(who))
        checks.append((where, resolved))
        checks += [(f"{where} selector", sel) for sel in selectors(resolved)]
    problems = check_all(ripe.prom.url, checks)
    assert not problems, f"{len(problems)} dashboard expression(s) without data:\n" + "\n".join(problems)
