"""Node view: the GPUs of one node side by side, to tell a bad GPU from a bad node (cooling, power, PCIe)."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.common import HOST, P, dashboard, m, query_var, stat, steps, t, table, timeseries

N = f'{HOST}="$Hostname"'
G = "GPU {{gpu}}"


def build() -> Dashboard:
    """The node dashboard, templated by Hostname."""
    items = [
        P(
            stat(
                "GPUs reporting",
                "GPUs of this node that report telemetry now.",
                [t(f"count({m('gpu_temp_c')}{{{N}}})", "GPUs", instant=True)],
                text_mode="value",
            ),
            w=4,
            h=4,
        ),
        P(
            stat(
                "GPUs lost",
                "GPUs of this node that fell off the bus.",
                [t(f"sum(gpuhealth_gpu_lost{{{N}}})", "lost", instant=True)],
                thresholds=steps(("green", None), ("red", 1)),
                text_mode="value",
            ),
            w=4,
            h=4,
        ),
        P(
            stat(
                "Collector sample age",
                "Age of the newest sample this node's collector serves, in seconds (stalled sampling grows it).",
                [
                    t(
                        # No job selector: the exporter serving this node's GPUs is a per-node
                        # collector or `gpuhealth serve`'s own (scraped as another job).
                        f"max(gpuhealth_sample_age_seconds\nand on (instance) gpuhealth_gpu_lost{{{N}}})",
                        "age",
                        instant=True,
                    )
                ],
                unit="s",
                thresholds=steps(("green", None), ("orange", 60), ("red", 120)),
                text_mode="value",
            ),
            w=4,
            h=4,
        ),
        P(
            stat(
                "Core temperature spread",
                "Hottest minus coolest GPU core of the node: ~14 °C between slots is usual under load; much "
                "more points at one GPU's cooling.",
                [t(f"max({m('gpu_temp_c')}{{{N}}}) - min({m('gpu_temp_c')}{{{N}}})", "spread", instant=True)],
                unit="celsius",
                thresholds=steps(("green", None), ("orange", 15), ("red", 25)),
                text_mode="value",
            ),
            w=4,
            h=4,
        ),
        P(
            stat(
                "Alerts firing",
                "gpuhealth alerts firing for this node's GPUs.",
                [t(f'count(ALERTS{{alertstate="firing", {N}}}) or vector(0)', "alerts", instant=True)],
                thresholds=steps(("green", None), ("red", 1)),
                text_mode="value",
            ),
            w=4,
            h=4,
        ),
        P(
            table(
                "GPUs of this node",
                "Each GPU's decision, overall risk and reasons.",
                [
                    t(f"gpuhealth_decision{{{N}}} == 1", instant=True, table=True),
                    t(f'gpuhealth_risk{{mode="overall", {N}}}', instant=True, table=True),
                    t(f"gpuhealth_decision_reasons_info{{{N}}}", instant=True, table=True),
                ],
                hide=("Value #A", "Value #C", "mode", HOST),
                rename={"Value #B": "risk"},
                sort_by="risk",
            ),
            w=24,
            h=9,
        ),
        P(
            timeseries(
                "Risk per GPU",
                "Overall predicted failure risk of each GPU (watch 0.3, demote 0.7 dashed).",
                [t(f'gpuhealth_risk{{mode="overall", {N}}}', G)],
                unit="percentunit",
                thresholds=steps(("green", None), ("yellow", 0.3), ("red", 0.7)),
                min0=True,
            ),
        ),
        P(
            timeseries(
                "Core temperature per GPU",
                "GPU core temperatures side by side: all high = node cooling; one high = that GPU.",
                [t(f"{m('gpu_temp_c')}{{{N}}}", G)],
                unit="celsius",
                thresholds=steps(("green", None), ("red", 85)),
            ),
        ),
        P(
            timeseries(
                "Memory temperature per GPU",
                "HBM temperatures (95 °C maximum dashed).",
                [t(f"{m('memory_temp_c')}{{{N}}}", G)],
                unit="celsius",
                thresholds=steps(("green", None), ("red", 95)),
            ),
        ),
        P(
            timeseries(
                "Power per GPU",
                "Power draw per GPU: a GPU drawing far less than its peers on the same job is throttled or idle.",
                [t(f"{m('power_w')}{{{N}}}", G)],
                unit="watt",
                min0=True,
            ),
        ),
        P(
            timeseries(
                "Utilisation per GPU",
                "GPU utilisation per GPU.",
                [t(f"{m('gpu_util_pct')}{{{N}}}", G)],
                unit="percent",
                min0=True,
            ),
        ),
        P(
            timeseries(
                "SBE per day per GPU",
                "Single-bit ECC errors per day (1 h rate) per GPU; 10/day dashed.",
                [t(f"86400 * gpu:ecc_sbe_errors:rate1h{{{N}}}", G)],
                thresholds=steps(("green", None), ("orange", 10)),
                min0=True,
            ),
        ),
        P(
            timeseries(
                "PCIe replays per GPU",
                "PCIe replays per minute per GPU (DCGM thresholds 16 Gen4, 31 Gen5): several GPUs behind one "
                "switch replaying together point at the switch or riser.",
                [t(f"60 * gpu:pcie_replays:rate5m{{{N}}}", G)],
                thresholds=steps(("green", None), ("orange", 16), ("red", 31)),
                min0=True,
            ),
        ),
        P(
            timeseries(
                "PCIe link width per GPU",
                "Current PCIe link width per GPU (downtrained links drop below 16).",
                [t(f"{m('pcie_link_width')}{{{N}}}", G)],
                min0=True,
            ),
        ),
        P(
            timeseries(
                "XID events per GPU",
                "XID errors per GPU and code in 5-minute windows.",
                [t(f"gpu:xid_errors:increase5m{{{N}}}", "GPU {{gpu}} XID {{xid}}")],
                bars=True,
                min0=True,
            ),
        ),
    ]
    return dashboard(
        "gpuhealth-node",
        "gpuhealth / Node",
        "The GPUs of one node side by side (generated by `gpuhealth dashboards build`).",
        [query_var(HOST, "gpuhealth_gpu_lost", HOST)],
        items,
    )
