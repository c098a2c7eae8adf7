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

LINK_METRICS = frozenset(
    {LINK_UP, FABRIC_STATE, FABRIC_STATUS, FABRIC_INFO} | {PREFIX + s for s, _ in COUNTERS.values()}
)
"""Every series collector.nvlink can export, by its /metrics name."""

# --- NVSwitches (DCGM's switch entities; collector.nvswitch) ----------------------------------------------
SWITCH_NAME = "nvswitch"
"""The NVSwitch collector's name in gpuhealth_collector_success{collector}."""
SWITCH_LABEL = "nvswitch"
"""The switch's DCGM entity id, as dcgm-exporter's --switch-devices series label it."""
SWITCH_FIELDS: Mapping[str, int] = {
    # dcgm-exporter's name (dcgm_fields.h keeps it as an alias) -> DCGM field id (dcgm_fields.h).
    "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS": 856,  # DCGM_FI_DEV_SXID_FATAL_ERROR
    "DCGM_FI_DEV_NVSWITCH_NON_FATAL_ERRORS": 857,  # DCGM_FI_DEV_SXID_NON_FATAL_ERROR
    "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT": 858,  # DCGM_FI_DEV_NVSWITCH_TEMP_CELSIUS
}
SWITCH_HELP: Mapping[str, str] = {
    "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS": "The last fatal SXID DCGM saw on the switch (absent or 0 before one).",
    "DCGM_FI_DEV_NVSWITCH_NON_FATAL_ERRORS": "The last non-fatal SXID DCGM saw on the switch (absent or 0 before one).",
    "DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT": "The switch's temperature, degrees C.",
}
SWITCH_LINK_UP = "gpuhealth_nvswitch_link_up"
SWITCH_FATAL = "DCGM_FI_DEV_NVSWITCH_FATAL_ERRORS"
SWITCH_NON_FATAL = "DCGM_FI_DEV_NVSWITCH_NON_FATAL_ERRORS"
SWITCH_METRICS = frozenset({*SWITCH_FIELDS, SWITCH_LINK_UP})
"""Every series collector.nvswitch can export."""

METRICS = LINK_METRICS | SWITCH_METRICS
"""Every series of this table (collector.nvlink and collector.nvswitch), by its /metrics name."""


def counter(nvml_name: str) -> str:
    """The /metrics name of an NVLink error counter series (KeyError for an unknown counter)."""
    return PREFIX + COUNTERS[nvml_name][0]


_DCGM_COUNTER = {
    "NVML_NVLINK_ERROR_DL_CRC_FLIT": "CRC_FLIT",
    "NVML_NVLINK_ERROR_DL_CRC_DATA": "CRC_DATA",
    "NVML_NVLINK_ERROR_DL_REPLAY": "REPLAY",
    "NVML_NVLINK_ERROR_DL_RECOVERY": "RECOVERY",
}


def sources() -> list[tuple[str, str, str, str]]:
    """(metric with its labels, type, NVML call / DCGM source, help) of every series: docs/metrics.md and
    `gpuhealth fields`."""
    fabric = "nvmlDeviceGetGpuFabricInfoV; DCGM_FI_DEV_FABRIC_*"
    state = "nvmlDeviceGetNvLinkState; dcgmGetNvLinkLinkStatus"
    return [
        (f"{LINK_UP}{{link}}", "gauge", state, "1 if the link is active, 0 if it is down."),
        *(
            (
                f"{PREFIX}{s}{{link}}",
                "counter",
                f"nvmlDeviceGetNvLinkErrorCounter({n}); DCGM_FI_DEV_NVLINK_{_DCGM_COUNTER[n]}_ERROR_COUNT_L<n>",
                h,
            )
            for n, (s, h) in COUNTERS.items()
        ),
        (FABRIC_STATE, "gauge", fabric, "Registration with the fabric: 1 not started, 2 in progress, 3 completed."),
        (FABRIC_STATUS, "gauge", fabric, "The registration's nvmlReturn_t (0 success); DCGM's dcgmReturn_t on dcgm."),
        (f"{FABRIC_INFO}{{clique_id,cluster_uuid}}", "gauge", fabric, "1, with the GPU's clique and cluster ids."),
        *((f"{n}{{nvswitch}}", "gauge", f"DCGM field {i}", SWITCH_HELP[n]) for n, i in SWITCH_FIELDS.items()),
        (
            f"{SWITCH_LINK_UP}{{nvswitch,link}}",
            "gauge",
            "dcgmGetNvLinkLinkStatus (switches)",
            "1 if the switch port's link is up, 0 if down; ports not in use have none.",
        ),
    ]


def doc_lines() -> list[str]:
    """A section on the per-link and fabric series, for docs/metrics.md."""
    return [
        "## NVLink links and the fabric",
        "",
        "Read at each scrape by `gpuhealth collect` (`collector/nvlink.py`): through NVML on the nvml backend,",
        "through DCGM on the dcgm backend (per-link fields L0-L17, `dcgmGetNvLinkLinkStatus`, the Fabric Manager",
        "fields 170-173), labelled `gpu`, `UUID`, `Hostname` and, per link, `link`. A link the backend does not",
        "know (NotSupported, InvalidArgument, DCGM's NotSupported or Disabled) has no series; a GPU without",
        "NVLink, or without a fabric, has none at all. NVSwitches (`collector/nvswitch.py`): on the dcgm",
        "backend only, one series per switch DCGM lists, labelled `nvswitch` (DCGM's entity id) and `Hostname`.",
        "",
        "| metric | type | NVML call / DCGM source | help |",
        "|---|---|---|---|",
        *(f"| `{name}` | {kind} | `{call}` | {text} |" for name, kind, call, text in sources()),
        "",
    ]
