"""The NVLink per-link and fabric series: names, the NVML calls they come from, what their values mean.

One table for the collector (collector.nvlink), the alert rules and the dashboards. Not in
`core.catalog`: a catalogue field is one value per GPU and a history column; a GPU has up to
NVML_NVLINK_MAX_LINKS (36) links, each its own series under a `link` label, and the fabric's
clique and cluster ids are labels, not numbers (docs/decisions/0077-nvlink-links-and-fabric.md).
The per-GPU totals over all links stay in the catalogue (nvlink_*_errors).
"""

from __future__ import annotations

from collections.abc import Mapping

NAME = "nvlink"
"""This collector's name in gpuhealth_collector_success{collector}."""
PREFIX = "gpuhealth_nvlink_"
FABRIC_PREFIX = "gpuhealth_fabric_"
LINK_LABEL = "link"
"""The link's index, 0..NVML_NVLINK_MAX_LINKS-1, as nvidia-smi nvlink -s numbers them."""

LINK_UP = PREFIX + "link_up"
COUNTERS: Mapping[str, tuple[str, str]] = {
    # NVML_NVLINK_ERROR_* name -> (suffix, help); DCGM's fields 400.. (DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_L<n>).
    "NVML_NVLINK_ERROR_DL_CRC_FLIT": (
        "crc_flit_errors_total",
        "Data link flow-control digits (flits) with a CRC error.",
    ),
    "NVML_NVLINK_ERROR_DL_CRC_DATA": ("crc_data_errors_total", "Data link packets with a CRC error in their data."),
    "NVML_NVLINK_ERROR_DL_REPLAY": ("replay_errors_total", "Data link transmissions replayed after an error."),
    "NVML_NVLINK_ERROR_DL_RECOVERY": ("recovery_errors_total", "Data link recoveries (the link retrained)."),
}

FABRIC_STATE = FABRIC_PREFIX + "state"
FABRIC_STATUS = FABRIC_PREFIX + "status"
FABRIC_INFO = FABRIC_PREFIX + "info"
FABRIC_STATES: Mapping[int, str] = {
    0: "not_supported",
    1: "not_started",
    2: "in_progress",
    3: "completed",
}
"""nvmlGpuFabricState_t (NVML_GPU_FABRIC_STATE_*); a GPU answering 0 has no fabric: no series."""
FABRIC_COMPLETED = 3
NVML_SUCCESS = 0

METRICS = frozenset({LINK_UP, FABRIC_STATE, FABRIC_STATUS, FABRIC_INFO} | {PREFIX + s for s, _ in COUNTERS.values()})
"""Every series collector.nvlink can export, by its /metrics name."""


def counter(nvml_name: str) -> str:
    """The /metrics name of an NVLink error counter series (KeyError for an unknown counter)."""
    return PREFIX + COUNTERS[nvml_name][0]


def sources() -> list[tuple[str, str, str, str]]:
    """(metric with its labels, type, NVML call, help) of every series: docs/metrics.md and `gpuhealth fields`."""
    fabric = "nvmlDeviceGetGpuFabricInfoV"
    return [
        (f"{LINK_UP}{{link}}", "gauge", "nvmlDeviceGetNvLinkState", "1 if the link is active, 0 if it is down."),
        *(
            (f"{PREFIX}{s}{{link}}", "counter", f"nvmlDeviceGetNvLinkErrorCounter({n})", h)
            for n, (s, h) in COUNTERS.items()
        ),
        (FABRIC_STATE, "gauge", fabric, "Registration with the fabric: 1 not started, 2 in progress, 3 completed."),
        (FABRIC_STATUS, "gauge", fabric, "The registration's nvmlReturn_t (0 success)."),
        (f"{FABRIC_INFO}{{clique_id,cluster_uuid}}", "gauge", fabric, "1, with the GPU's clique and cluster ids."),
    ]


def doc_lines() -> list[str]:
    """A section on the per-link and fabric series, for docs/metrics.md."""
    return [
        "## NVLink links and the fabric",
        "",
        "Read through NVML at each scrape by `gpuhealth collect` with the nvml backend (`collector/nvlink.py`),",
        "labelled `gpu`, `UUID`, `Hostname` and, per link, `link`. A link NVML does not know (NotSupported,",
        "InvalidArgument) has no series; a GPU without NVLink, or without a fabric, has none at all.",
        "",
        "| metric | type | NVML call | help |",
        "|---|---|---|---|",
        *(f"| `{name}` | {kind} | `{call}` | {text} |" for name, kind, call, text in sources()),
        "",
    ]
