"""GPU detail: everything about one GPU, from temperatures to risk, to answer "what is wrong with it"."""

from __future__ import annotations

from grafanalib.core import Dashboard

from dashboards.common import HOST, P, dashboard, m, query_var, stat, steps, t, table, timeseries

S = 'UUID="$UUID"'
THROTTLE_BITS = (
    (4, "sw power cap"),
    (8, "hw slowdown"),
    (32, "sw thermal"),
    (64, "hw thermal"),
    (128, "power brake"),
)
"""Clock event reason bits (REFERENCE.md, NVML clocks event reasons)."""


def build() -> Dashboard:
    """The GPU detail dashboard, templated by Hostname, gpu and UUID."""
    reasons = m("clocks_event_reasons")
    items = [
        P(
            stat(
                "Decision",
                "gpuhealth's current decision for this GPU (ok, watch, demote, drain, rma).",
                [t(f"gpuhealth_decision{{{S}}} == 1", "{{decision}}", instant=True)],
                text_mode="name",
            ),
            w=4,
            h=4,
        ),
        P(
            stat(
                "Overall risk",
                "Predicted probability of a failure within 7 days (watch from 0.3, demote from 0.7).",
                [t(f'gpuhealth_risk{{mode="overall", {S}}}', "risk", instant=True)],
                unit="percentunit",
                thresholds=steps(("green", None), ("yellow", 0.3), ("red", 0.7)),
                text_mode="value",
                decimals=2,
            ),
            w=4,
            h=4,
        ),
        P(
            stat(
                "Lost",
                "1 when the GPU fell off the bus (its other panels then stop).",
                [t(f"gpuhealth_gpu_lost{{{S}}}", "lost", instant=True)],
                thresholds=steps(("green", None), ("red", 1)),
                text_mode="value",
            ),
            w=4,
            h=4,
        ),
        P(
            table(
                "Decision reasons",
                "Why gpuhealth decided what it did: the reasons a human can read.",
                [t(f"gpuhealth_decision_reasons_info{{{S}}}", instant=True, table=True)],
                hide=("Value", "UUID", "Hostname", "gpu"),
            ),
            w=12,
            h=4,
        ),
        P(
            timeseries(
                "Risk per mode",
                "Predicted failure risk over time, overall and per failure mode (ECC/HBM, thermal, PCIe); the "
                "dashed lines are the watch (0.3) and demote (0.7) thresholds.",
                [t(f"gpuhealth_risk{{{S}}}", "{{mode}}")],
                unit="percentunit",
                thresholds=steps(("green", None), ("yellow", 0.3), ("red", 0.7)),
                min0=True,
            ),
            w=24,
        ),
        P(
            timeseries(
                "Temperatures",
                "Core and memory (HBM) temperature with the GPU's own slowdown and shutdown temperatures; the "
                "dashed lines mark 85 °C (maximum operating, A100) and 95 °C (HBM maximum).",
                [
                    t(f"{m('gpu_temp_c')}{{{S}}}", "core"),
                    t(f"{m('memory_temp_c')}{{{S}}}", "memory"),
                    t(f"{m('slowdown_temp_c')}{{{S}}}", "slowdown"),
                    t(f"{m('shutdown_temp_c')}{{{S}}}", "shutdown"),
                ],
                unit="celsius",
                thresholds=steps(("green", None), ("orange", 85), ("red", 95)),
            ),
        ),
        P(
            timeseries(
                "Power",
                "Power draw against the power management limit.",
                [t(f"{m('power_w')}{{{S}}}", "draw"), t(f"{m('power_limit_w')}{{{S}}}", "limit")],
                unit="watt",
                min0=True,
            ),
        ),
        P(
            timeseries(
                "Clocks",
                "SM and memory clocks: SM clocks below their usual level under load mean throttling.",
                [t(f"{m('sm_clock_mhz')}{{{S}}}", "SM"), t(f"{m('mem_clock_mhz')}{{{S}}}", "memory")],
                unit="MHz",
                min0=True,
            ),
        ),
        P(
            timeseries(
                "Throttle reasons",
                "Which clock event reasons are active (1 = active), decoded from the bitmask, and the share "
                "of time clocks were held down by thermal and power limits.",
                [
                    *(t(f"floor({reasons}{{{S}}} / {bit}) % 2", name) for bit, name in THROTTLE_BITS),
                    t(f"rate({m('thermal_violation_us')}{{{S}}}[$__rate_interval]) / 1e6", "thermal-limited time"),
                    t(f"rate({m('power_violation_us')}{{{S}}}[$__rate_interval]) / 1e6", "power-limited time"),
                ],
                min0=True,
            ),
        ),
        P(
            timeseries(
                "Utilisation and memory",
                "GPU and memory-copy utilisation (%) and the share of framebuffer memory used "
                "(gpu:fb_used:ratio, shown as %).",
                [
                    t(f"{m('gpu_util_pct')}{{{S}}}", "GPU util"),
                    t(f"{m('mem_copy_util_pct')}{{{S}}}", "memory copy util"),
                    t(f"100 * gpu:fb_used:ratio{{{S}}}", "framebuffer used"),
                ],
                unit="percent",
                min0=True,
            ),
        ),
        P(
            timeseries(
                "ECC errors",
                "Single-bit (corrected) errors per day over the last hour (10/day is the product brief's "
                "warning level), and uncorrectable errors per hour.",
                [
                    t(f"86400 * gpu:ecc_sbe_errors:rate1h{{{S}}}", "SBE per day (1h rate)"),
                    t(f"increase({m('ecc_dbe_volatile')}{{{S}}}[1h])", "DBE per hour"),
                ],
                thresholds=steps(("green", None), ("orange", 10)),
                min0=True,
            ),
        ),
        P(
            timeseries(
                "Remapped rows and retired pages",
                "Row remapping (Ampere and later: correctable/uncorrectable remapped rows, pending, failure) "
                "and page retirement (earlier GPUs: SBE/DBE retired pages, pending). DCGM fails a GPU at 63 "
                "retired pages; a remap failure makes it an RMA candidate.",
                [
                    t(f"{m('remapped_rows_correctable')}{{{S}}}", "remapped rows (correctable)"),
                    t(f"{m('remapped_rows_uncorrectable')}{{{S}}}", "remapped rows (uncorrectable)"),
                    t(f"{m('row_remap_pending')}{{{S}}}", "remap pending"),
                    t(f"{m('row_remap_failure')}{{{S}}}", "remap failure"),
                    t(f"{m('retired_pages_sbe')}{{{S}}} + {m('retired_pages_dbe')}{{{S}}}", "retired pages"),
                    t(f"{m('retired_pages_pending')}{{{S}}}", "retirement pending"),
                ],
                min0=True,
            ),
        ),
        P(
            timeseries(
                "PCIe replays",
                "PCIe replays (retransmissions) per minute; DCGM's health thresholds are about 16/min on Gen4 "
                "and 31/min on Gen5 (dashed).",
                [t(f"60 * gpu:pcie_replays:rate5m{{{S}}}", "replays/min")],
                thresholds=steps(("green", None), ("orange", 16), ("red", 31)),
                min0=True,
            ),
        ),
        P(
            timeseries(
                "PCIe link width and generation",
                "Current link width and generation against their maxima: width below maximum is downtraining "
                "(x16 -> x8); a lower generation is normal at idle, not under load.",
                [
                    t(f"{m('pcie_link_width')}{{{S}}}", "width"),
                    t(f"{m('pcie_link_width_max')}{{{S}}}", "max width"),
                    t(f"{m('pcie_link_gen')}{{{S}}}", "generation"),
                    t(f"{m('pcie_link_gen_max')}{{{S}}}", "max generation"),
                ],
                min0=True,
            ),
        ),
        P(
            timeseries(
                "PCIe throughput",
                "Host link traffic in each direction.",
                [t(f"{m('pcie_tx_kbps')}{{{S}}}", "TX"), t(f"{m('pcie_rx_kbps')}{{{S}}}", "RX")],
                unit="KBs",
                min0=True,
            ),
        ),
        P(
            timeseries(
                "NVLink CRC errors",
                "NVLink CRC errors per second over all links; DCGM flags 100/s.",
                [t(f"gpu:nvlink_crc_errors:rate5m{{{S}}}", "CRC errors/s")],
                thresholds=steps(("green", None), ("red", 100)),
                min0=True,
            ),
        ),
        P(
            timeseries(
                "XID events",
                "XID errors in 5-minute windows by code (from gpuhealth's per-code counter), and the last code "
                "seen (dcgm-exporter's gauge, 0 for none).",
                [
                    t(f"gpu:xid_errors:increase5m{{{S}}}", "XID {{xid}}"),
                    t(f"{m('xid')}{{{S}}}", "last code"),
                ],
                bars=True,
                min0=True,
            ),
        ),
        P(
            table(
                "Probe results",
                "The latest active health probe per test (gemm, memtest, bandwidth, pcie): passed, measured / "
                "expected ratio, errors found, duration and how long ago it ran.",
                [
                    t(f"gpuhealth_probe_passed{{{S}}}", instant=True, table=True),
                    t(f"gpuhealth_probe_ratio{{{S}}}", instant=True, table=True),
                    t(f"gpuhealth_probe_errors{{{S}}}", instant=True, table=True),
                    t(f"gpuhealth_probe_duration_seconds{{{S}}}", instant=True, table=True),
                    t(f"time() - gpuhealth_probe_last_run_timestamp_seconds{{{S}}}", instant=True, table=True),
                ],
                hide=("UUID", HOST, "gpu", "modelName"),
                rename={
                    "Value #A": "passed",
                    "Value #B": "ratio",
                    "Value #C": "errors",
                    "Value #D": "duration (s)",
                    "Value #E": "age (s)",
                },
            ),
        ),
        P(
            timeseries(
                "Probe measurements",
                "What each probe measured, as a ratio to the model's expectation (1 = as fast as it should be), "
                "and whether the GPU was flagged slow.",
                [
                    t(f"gpuhealth_probe_ratio{{{S}}}", "{{test}} ratio"),
                    t(f"gpuhealth_probe_slow{{{S}}}", "slow"),
                    t(f"sum by (status) (increase(gpuhealth_probe_runs_total{{{S}}}[1d]))", "runs/day {{status}}"),
                ],
                min0=True,
            ),
        ),
        P(
            timeseries(
                "Probe values",
                "The raw measurement of each probe in its own unit (e.g. TFLOP/s, GB/s).",
                [t(f"gpuhealth_probe_value{{{S}}}", "{{test}} ({{unit}})")],
                min0=True,
            ),
        ),
        P(
            table(
                "Alerts firing for this GPU",
                "gpuhealth alerts currently firing for this GPU, with severity and action.",
                [t(f'ALERTS{{alertstate="firing", {S}}}', instant=True, table=True)],
                hide=("Value", "alertstate", "UUID", HOST, "gpu", "modelName"),
            ),
            w=24,
            h=6,
        ),
    ]
    gpu_metric = "gpuhealth_gpu_lost"  # listed for every GPU, lost ones too
    variables = [
        query_var(HOST, gpu_metric, HOST),
        query_var("gpu", f'{gpu_metric}{{{HOST}="${HOST}"}}', "gpu"),
        query_var("UUID", f'{gpu_metric}{{{HOST}="${HOST}", gpu="$gpu"}}', "UUID"),
    ]
    return dashboard(
        "gpuhealth-gpu",
        "gpuhealth / GPU detail",
        "One GPU: thermals, power, clocks, memory errors, PCIe, XIDs, probes and risk "
        "(generated by `gpuhealth dashboards build`).",
        variables,
        items,
    )
