"""The kernel log's XID and SXID series: names, labels, where each value comes from.

One table for the collector (collector.kernel_log), the alert rules, the dashboards, docs/metrics.md
and `gpuhealth fields`. Not in `core.catalog`: a catalogue field is one value per GPU and a history
column; these are counters per code (and per NVSwitch), as dcgm-exporter's XID series are
(docs/decisions/0073-xids-from-the-kernel-log.md, 0081-the-kernel-log-through-the-journal.md).
"""

from __future__ import annotations

XID = "gpuhealth_kernel_xid_errors_total"
SXID = "gpuhealth_kernel_sxid_errors_total"
READABLE = "gpuhealth_kernel_log_readable"
OVERRUNS = "gpuhealth_kernel_log_overruns_total"

SOURCES = ("kmsg", "journal", "nvml")
"""The `source` label of the XID counter: /dev/kmsg, the systemd journal, or NVML's events when neither
can be read."""
SXID_LABELS = ("switch", "nvswitch", "switch_uuid", "pci_bus_id")
"""An SXID's switch: its kernel name (nvidia-nvswitch3) and PCI id from the line; the backend's id and
UUID of the switch where the backend lists switches (DCGM), else absent."""
SXID_FATAL = "fatal"
"""The `severity` of an SXID the driver calls Fatal (the other words: non-fatal, or "" when none)."""

METRICS = frozenset({XID, SXID, READABLE, OVERRUNS})
"""Every series collector.kernel_log can export, by its /metrics name."""


def family(metric: str) -> str:
    """A counter's name as prometheus_client's CounterMetricFamily takes it (without `_total`)."""
    return metric.removesuffix("_total")


def sources() -> list[tuple[str, str, str, str]]:
    """(metric with its labels, type, source, help) of every series: docs/metrics.md and `gpuhealth fields`."""
    log = "/dev/kmsg or journalctl -k"
    return [
        (
            f"{XID}{{err_code,err_msg,source}}",
            "counter",
            f"{log}; NVML events when unreadable",
            "XIDs per GPU and code (`NVRM: Xid (PCI:…): 79, …`), source kmsg, journal or nvml.",
        ),
        (
            f"{SXID}{{{','.join(SXID_LABELS)},err_code,severity}}",
            "counter",
            log,
            "NVSwitch SXIDs per switch and code (`nvidia-nvswitchN: SXid (PCI:…): 12028, Non-fatal, …`).",
        ),
        (READABLE, "gauge", log, "1 while the kernel log is read, 0 when it cannot be (XIDs from NVML)."),
        (OVERRUNS, "counter", "/dev/kmsg", "Times the kernel's ring buffer overtook the reader (records lost)."),
    ]


def doc_lines() -> list[str]:
    """A section on the kernel log's series, for docs/metrics.md."""
    return [
        "## XIDs and SXIDs from the kernel log",
        "",
        "Counted by `gpuhealth collect` with the nvml and dcgm backends (`collector/kernel_log.py`) from",
        "/dev/kmsg or the systemd journal (`GPUHEALTH_KERNEL_LOG_SOURCE`), with a cursor kept on disk so a",
        "restart neither loses nor doubles one. The XID counter carries the GPU's labels (only `pci_bus_id`",
        "for a PCI id no GPU has) and dcgm-exporter's `err_code` and `err_msg`; the SXID counter the switch.",
        "",
        "| metric | type | source | help |",
        "|---|---|---|---|",
        *(f"| `{name}` | {kind} | {src} | {text} |" for name, kind, src, text in sources()),
        "",
    ]
