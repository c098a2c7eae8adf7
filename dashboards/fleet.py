"""Fleet overview: how many GPUs are in which state, which are riskiest and why, what is firing."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.common import (
    COLLECTOR_SELECTOR,
    HOST,
    P,
    dashboard,
    heatmap,
    m,
    query_var,
    stat,
    steps,
    t,
    table,
    timeseries,
)

H = f'{HOST}=~"$Hostname"'


def build() -> Dashboard:
    """The fleet overview dashboard."""
    decision = [
        P(
            stat(
                f"GPUs: {d}",
                f"GPUs whose current gpuhealth decision is `{d}` ({what}).",
                [t(f'sum(gpuhealth_decision{{decision="{d}", {H}}})', d, instant=True)],
                thresholds=steps(("green", None)) if d == "ok" else steps(("green", None), (colour, 1)),
                text_mode="value",
            ),
            w=4,
            h=4,
        )
        for d, what, colour in (
            ("ok", "nothing to do", "green"),
            ("watch", "risk above the watch threshold", "yellow"),
            ("demote", "interruptible work only", "orange"),
            ("drain", "take off work now", "red"),
            ("rma", "return to the vendor", "purple"),
        )
    ]
    items = [
        *decision,
        P(
            stat(
                "GPUs lost",
                "GPUs that fell off the bus (gpuhealth_gpu_lost = 1): their other metrics are gone.",
                [t(f"sum(gpuhealth_gpu_lost{{{H}}})", "lost", instant=True)],
                thresholds=steps(("green", None), ("red", 1)),
                text_mode="value",
            ),
            w=4,
            h=4,
        ),
        P(
            timeseries(
                "GPUs by decision",
                "Number of GPUs in each decision over time (ok, watch, demote, drain, rma), stacked: a growing "
                "watch/demote band is a fleet trend worth a look before it becomes drains.",
                [t(f"sum by (decision) (gpuhealth_decision{{{H}}})", "{{decision}}")],
                stacked=True,
                min0=True,
            ),
            w=12,
        ),
        P(
            timeseries(
                "Alerts firing",
                'gpuhealth alerts firing in Prometheus, by alert name and action (ALERTS{alertstate="firing"}).',
                [
                    t(
                        f'sum by (alertname, action) (ALERTS{{alertstate="firing", {H}}})',
                        "{{alertname}} ({{action}})",
                    )
                ],
                stacked=True,
                min0=True,
            ),
            w=12,
        ),
        P(
            table(
                "Top-risk GPUs",
                "The 20 GPUs with the highest predicted failure risk, with their decision and the reasons "
                "gpuhealth gives for it (what drives the risk, e.g. SBE rate rising, remaps pending).",
                [
                    t(f'topk(20, gpuhealth_risk{{mode="overall", {H}}})', instant=True, table=True),
                    t(
                        f"gpuhealth_decision_reasons_info{{{H}}}\n"
                        f'and on (UUID) topk(20, gpuhealth_risk{{mode="overall", {H}}})',
                        instant=True,
                        table=True,
                    ),
                ],
                hide=("mode", "Value #B"),
                rename={"Value #A": "risk"},
                sort_by="risk",
            ),
            w=24,
            h=10,
        ),
        P(
            heatmap(
                "Risk by node",
                "The highest overall risk among each node's GPUs over time, one row per node (green 0, red 1): "
                "rows turning red together point at a rack or cooling problem rather than one GPU.",
                [t(f'max by ({HOST}) (gpuhealth_risk{{mode="overall", {H}}})', "{{Hostname}}")],
            ),
            w=24,
            h=10,
        ),
        P(
            timeseries(
                "Failures and RMAs recorded",
                "Failures and RMAs recorded in gpuhealth per hour, by failure mode (ecc, thermal, pcie, other) "
                "and kind (failure or rma): the ground truth the model is judged on.",
                [
                    t(
                        "sum by (kind, mode) (increase(gpuhealth_failures_recorded_total[1h]))",
                        "{{kind}} {{mode}}",
                    )
                ],
                bars=True,
                stacked=True,
                min0=True,
            ),
            w=12,
        ),
        P(
            timeseries(
                "XID events by code",
                "XID errors across the fleet in 5-minute windows, by code (gpu:xid_errors:increase5m): spikes of "
                "one code on many GPUs suggest a driver or firmware problem rather than hardware.",
                [t(f"sum by (xid) (gpu:xid_errors:increase5m{{{H}}})", "XID {{xid}}")],
                bars=True,
                stacked=True,
                min0=True,
            ),
            w=12,
        ),
        P(
            timeseries(
                "Hottest GPU per node",
                "The highest GPU core temperature on each node; the dashed line is the 85 °C maximum operating "
                "temperature of the product brief.",
                [t(f"max by ({HOST}) ({m('gpu_temp_c')}{{{H}}})", "{{Hostname}}")],
                unit="celsius",
                thresholds=steps(("green", None), ("red", 85)),
            ),
            w=12,
        ),
        P(
            timeseries(
                "Collector health",
                "Exporters Prometheus cannot scrape (up == 0), collectors failing, and the oldest sample any "
                "exporter serves (seconds): watched GPUs need working collectors.",
                [
                    t(f"count(up{{{COLLECTOR_SELECTOR}}} == 0) or vector(0)", "exporters down"),
                    t("count(gpuhealth_collector_success == 0) or vector(0)", "collectors failing"),
                    t("max(gpuhealth_sample_age_seconds)", "oldest sample (s)"),
                ],
                min0=True,
            ),
            w=12,
        ),
    ]
    variables = [query_var("Hostname", "gpuhealth_gpu_lost", HOST, multi=True)]
    return dashboard(
        "gpuhealth-fleet",
        "gpuhealth / Fleet overview",
        "Decisions, risk and alerts across the fleet (generated by `gpuhealth dashboards build`).",
        variables,
        items,
    )
