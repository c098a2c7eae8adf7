"""The metric catalogue: every signal gpuhealth knows, listed once.

The exporter, the history-frame columns, the dashboards, the alert rules and
docs/metrics.md are all derived from this list. Adding a signal is one entry.
DCGM field names and ids are those of dcgm_fields.h; NVML sources name the
call (and its argument) that nvidia-ml-py exposes for the same value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from core import infiniband, kernel_log, nvlink


class Category(StrEnum):
    """What part of GPU health a signal speaks to."""

    THERMAL = "thermal"
    POWER = "power"
    CLOCKS = "clocks"
    UTIL = "util"
    ECC = "ecc"
    PCIE = "pcie"
    NVLINK = "nvlink"
    XID = "xid"
    PROBE = "probe"
    CONFIG = "config"


Kind = Literal["gauge", "counter"]


class CatalogError(ValueError):
    """The catalogue is inconsistent (raised on load, so a bad entry never ships)."""


@dataclass(frozen=True)
class Field:
    """One signal: its names in every system, its unit and meaning."""

    name: str
    """Short name; also the history-frame column."""
    dcgm_name: str | None
    dcgm_id: int | None
    nvml: str | None
    """NVML call that yields the value, or None where NVML has no equivalent."""
    unit: str
    kind: Kind
    category: Category
    help: str
    default: bool = True

    @property
    def metric_name(self) -> str:
        """Name on /metrics: the DCGM name where one exists (dcgm-exporter compatible)."""
        if self.dcgm_name:
            return self.dcgm_name
        suffix = "_total" if self.kind == "counter" else ""
        return f"gpuhealth_{self.name}{suffix}"


def _f(
    name: str,
    dcgm: tuple[str, int] | None,
    nvml: str | None,
    unit: str,
    kind: Kind,
    category: Category,
    help: str,
    default: bool = True,
) -> Field:
    dcgm_name, dcgm_id = dcgm if dcgm else (None, None)
    return Field(name, dcgm_name, dcgm_id, nvml, unit, kind, category, help, default)


C = Category
# fmt: off
FIELDS: tuple[Field, ...] = (
    # thermal
    _f("gpu_temp_c", ("DCGM_FI_DEV_GPU_TEMP", 150), "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
       "C", "gauge", C.THERMAL, "GPU core temperature in degrees C."),
    _f("memory_temp_c", ("DCGM_FI_DEV_MEMORY_TEMP", 140), "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)",
       "C", "gauge", C.THERMAL, "GPU memory (HBM) temperature in degrees C."),
    _f("slowdown_temp_c", ("DCGM_FI_DEV_SLOWDOWN_TEMP", 158),
       "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)",
       "C", "gauge", C.THERMAL, "Temperature at which the GPU slows its clocks, in degrees C."),
    _f("shutdown_temp_c", ("DCGM_FI_DEV_SHUTDOWN_TEMP", 159),
       "nvmlDeviceGetTemperatureThreshold(NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)",
       "C", "gauge", C.THERMAL, "Temperature at which the GPU shuts down, in degrees C."),
    # power
    _f("power_w", ("DCGM_FI_DEV_POWER_USAGE", 155), "nvmlDeviceGetPowerUsage",
       "W", "gauge", C.POWER, "Power draw in watts."),
    _f("power_limit_w", ("DCGM_FI_DEV_POWER_MGMT_LIMIT", 160), "nvmlDeviceGetPowerManagementLimit",
       "W", "gauge", C.POWER, "Power management limit in watts."),
    _f("energy_mj", ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 156), "nvmlDeviceGetTotalEnergyConsumption",
       "mJ", "counter", C.POWER, "Total energy consumed since the driver was loaded, in millijoules."),
    # clocks and throttling
    _f("sm_clock_mhz", ("DCGM_FI_DEV_SM_CLOCK", 100), "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
       "MHz", "gauge", C.CLOCKS, "SM clock frequency in MHz."),
    _f("mem_clock_mhz", ("DCGM_FI_DEV_MEM_CLOCK", 101), "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
       "MHz", "gauge", C.CLOCKS, "Memory clock frequency in MHz."),
    _f("clocks_event_reasons", ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 112),
       "nvmlDeviceGetCurrentClocksEventReasons",
       "bitmask", "gauge", C.CLOCKS,
       "Reasons clocks are held down (0x4 sw power cap, 0x8 hw slowdown, 0x20 sw thermal, "
       "0x40 hw thermal, 0x80 power brake)."),
    _f("thermal_violation_us", ("DCGM_FI_DEV_THERMAL_VIOLATION", 241),
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_THERMAL)",
       "us", "counter", C.CLOCKS, "Cumulative time clocks were held down by thermal limits, in us."),
    _f("power_violation_us", ("DCGM_FI_DEV_POWER_VIOLATION", 240),
       "nvmlDeviceGetViolationStatus(NVML_PERF_POLICY_POWER)",
       "us", "counter", C.CLOCKS, "Cumulative time clocks were held down by power limits, in us."),
    # utilisation and memory
    _f("gpu_util_pct", ("DCGM_FI_DEV_GPU_UTIL", 203), "nvmlDeviceGetUtilizationRates.gpu",
       "%", "gauge", C.UTIL, "GPU utilisation in percent."),
    _f("mem_copy_util_pct", ("DCGM_FI_DEV_MEM_COPY_UTIL", 204), "nvmlDeviceGetUtilizationRates.memory",
       "%", "gauge", C.UTIL, "Memory copy utilisation in percent."),
    _f("enc_util_pct", ("DCGM_FI_DEV_ENC_UTIL", 206), "nvmlDeviceGetEncoderUtilization",
       "%", "gauge", C.UTIL, "Video encoder utilisation in percent."),
    _f("dec_util_pct", ("DCGM_FI_DEV_DEC_UTIL", 207), "nvmlDeviceGetDecoderUtilization",
       "%", "gauge", C.UTIL, "Video decoder utilisation in percent."),
    _f("fb_free_mib", ("DCGM_FI_DEV_FB_FREE", 251), "nvmlDeviceGetMemoryInfo.free",
       "MiB", "gauge", C.UTIL, "Framebuffer memory free in MiB."),
    _f("fb_used_mib", ("DCGM_FI_DEV_FB_USED", 252), "nvmlDeviceGetMemoryInfo.used",
       "MiB", "gauge", C.UTIL, "Framebuffer memory used in MiB."),
    _f("fb_total_mib", ("DCGM_FI_DEV_FB_TOTAL", 250), "nvmlDeviceGetMemoryInfo.total",
       "MiB", "gauge", C.UTIL, "Framebuffer memory total in MiB.", default=False),
    _f("prof_gr_engine_active", ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1001), None,
       "ratio", "gauge", C.UTIL, "Ratio of time the graphics engine is active (DCGM profiling)."),
    _f("prof_sm_active", ("DCGM_FI_PROF_SM_ACTIVE", 1002), None,
       "ratio", "gauge", C.UTIL, "Ratio of cycles an SM has at least one warp assigned (DCGM profiling)."),
    _f("prof_pipe_tensor_active", ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004), None,
       "ratio", "gauge", C.UTIL, "Ratio of cycles the tensor pipe is active (DCGM profiling)."),
    _f("prof_dram_active", ("DCGM_FI_PROF_DRAM_ACTIVE", 1005), None,
       "ratio", "gauge", C.UTIL, "Ratio of cycles the device memory interface is active (DCGM profiling)."),
    # ECC, page retirement, row remapping
    _f("ecc_sbe_volatile", ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 310),
       "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)",
       "errors", "counter", C.ECC, "Single-bit (corrected) ECC errors since the driver was loaded."),
    _f("ecc_dbe_volatile", ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 311),
       "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)",
       "errors", "counter", C.ECC, "Double-bit (uncorrected) ECC errors since the driver was loaded."),
    _f("ecc_sbe_aggregate", ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", 312),
       "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC)",
       "errors", "counter", C.ECC, "Single-bit (corrected) ECC errors over the GPU's lifetime."),
    _f("ecc_dbe_aggregate", ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", 313),
       "nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)",
       "errors", "counter", C.ECC, "Double-bit (uncorrected) ECC errors over the GPU's lifetime."),
    _f("retired_pages_sbe", ("DCGM_FI_DEV_RETIRED_SBE", 390),
       "nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)",
       "pages", "counter", C.ECC, "Pages retired for repeated single-bit errors (pre-Ampere)."),
    _f("retired_pages_dbe", ("DCGM_FI_DEV_RETIRED_DBE", 391),
       "nvmlDeviceGetRetiredPages(NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)",
       "pages", "counter", C.ECC, "Pages retired for double-bit errors (pre-Ampere)."),
    _f("retired_pages_pending", ("DCGM_FI_DEV_RETIRED_PENDING", 392),
       "nvmlDeviceGetRetiredPagesPendingStatus",
       "bool", "gauge", C.ECC, "1 when a page retirement waits for a GPU reset (pre-Ampere)."),
    _f("remapped_rows_uncorrectable", ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 393),
       "nvmlDeviceGetRemappedRows.uncorrRows",
       "rows", "counter", C.ECC, "Rows remapped for uncorrectable errors (Ampere and later)."),
    _f("remapped_rows_correctable", ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 394),
       "nvmlDeviceGetRemappedRows.corrRows",
       "rows", "counter", C.ECC, "Rows remapped for correctable errors (Ampere and later)."),
    _f("row_remap_failure", ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 395),
       "nvmlDeviceGetRemappedRows.isFailureOccurred",
       "bool", "gauge", C.ECC, "1 when a row remap failed: the GPU is an RMA candidate."),
    _f("row_remap_pending", ("DCGM_FI_DEV_ROW_REMAP_PENDING", 396), "nvmlDeviceGetRemappedRows.isPending",
       "bool", "gauge", C.ECC, "1 when a row remap waits for a GPU reset."),
    # PCIe
    _f("pcie_replay_count", ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 202), "nvmlDeviceGetPcieReplayCounter",
       "replays", "counter", C.PCIE, "PCIe replays (link-level retransmissions)."),
    _f("pcie_link_gen", ("DCGM_FI_DEV_PCIE_LINK_GEN", 237), "nvmlDeviceGetCurrPcieLinkGeneration",
       "gen", "gauge", C.PCIE, "Current PCIe link generation."),
    _f("pcie_link_gen_max", ("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", 235), "nvmlDeviceGetMaxPcieLinkGeneration",
       "gen", "gauge", C.PCIE, "Maximum PCIe link generation of GPU and system."),
    _f("pcie_link_width", ("DCGM_FI_DEV_PCIE_LINK_WIDTH", 238), "nvmlDeviceGetCurrPcieLinkWidth",
       "lanes", "gauge", C.PCIE, "Current PCIe link width in lanes (x16 -> x8 is downtraining)."),
    _f("pcie_link_width_max", ("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", 236), "nvmlDeviceGetMaxPcieLinkWidth",
       "lanes", "gauge", C.PCIE, "Maximum PCIe link width in lanes."),
    _f("pcie_tx_kbps", ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", 200),
       "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES)",
       "KB/s", "gauge", C.PCIE, "PCIe transmit throughput in KB/s."),
    _f("pcie_rx_kbps", ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", 201),
       "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES)",
       "KB/s", "gauge", C.PCIE, "PCIe receive throughput in KB/s."),
    # NVLink (summed over links)
    _f("nvlink_crc_flit_errors", ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 409),
       "nvmlDeviceGetNvLinkErrorCounter(NVML_NVLINK_ERROR_DL_CRC_FLIT)",
       "errors", "counter", C.NVLINK, "NVLink flow-control CRC errors, all links."),
    _f("nvlink_crc_data_errors", ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", 419),
       "nvmlDeviceGetNvLinkErrorCounter(NVML_NVLINK_ERROR_DL_CRC_DATA)",
       "errors", "counter", C.NVLINK, "NVLink data CRC errors, all links."),
    _f("nvlink_replay_errors", ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 429),
       "nvmlDeviceGetNvLinkErrorCounter(NVML_NVLINK_ERROR_DL_REPLAY)",
       "errors", "counter", C.NVLINK, "NVLink replay errors, all links."),
    _f("nvlink_recovery_errors", ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", 439),
       "nvmlDeviceGetNvLinkErrorCounter(NVML_NVLINK_ERROR_DL_RECOVERY)",
       "errors", "counter", C.NVLINK, "NVLink recovery errors, all links."),
    # XID and recovery
    _f("xid", ("DCGM_FI_DEV_XID_ERRORS", 230),
       "nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError) + nvmlEventSetWait_v2",
       "code", "gauge", C.XID,
       "Last XID error code seen (0 for none). gpuhealth_xid_errors_total counts each code."),
    _f("recovery_action", ("DCGM_FI_DEV_GPU_RECOVERY_ACTION", 1523),
       "nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)",
       "enum", "gauge", C.XID,
       "Recovery the driver asks for: 0 none, 1 reset, 2 reboot, 3 drain P2P, 4 drain and reset."),
    # dcgm-exporter's default-counters.csv (4.5.3-4.8.2), the rest of it (issue 17). Appended, not
    # filed under their categories above: sample columns follow this order (migration 0008 adds them).
    _f("fb_reserved_mib", ("DCGM_FI_DEV_FB_RESERVED", 253), "nvmlDeviceGetMemoryInfo_v2.reserved",
       "MiB", "gauge", C.UTIL,
       "Framebuffer memory reserved for the driver and firmware in MiB (left out of used and free)."),
    _f("nvlink_bandwidth_mbps", ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", 449),
       "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX + _TX, all links), per second",
       "MB/s", "counter", C.NVLINK,
       "NVLink data throughput, all links, both directions, in MB/s as DCGM computes it (KiB/s / 1000). "
       "A rate between two reads, though typed counter as dcgm-exporter does."),
    _f("pcie_tx_bytes_per_s", ("DCGM_FI_PROF_PCIE_TX_BYTES", 1009),
       "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES) x 1024",
       "B/s", "gauge", C.PCIE, "PCIe transmit rate (headers and payload) in bytes per second."),
    _f("pcie_rx_bytes_per_s", ("DCGM_FI_PROF_PCIE_RX_BYTES", 1010),
       "nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES) x 1024",
       "B/s", "gauge", C.PCIE, "PCIe receive rate (headers and payload) in bytes per second."),
    _f("vgpu_license_status", ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", 526),
       "nvmlDeviceGetGridLicensableFeatures (the vGPU feature's state)",
       "bool", "gauge", C.CONFIG, "1 when the vGPU is licensed, 0 when not or without vGPU licensing."),
    # The NVLink fabric and the GPU's InfiniBand rail, one number per GPU for the history and the node
    # findings (issue 58, predictor.fabric; migration 0014 adds them). The per-link and per-port series
    # are core.nvlink's and core.infiniband's. No one DCGM field: the dcgm backend derives the two from
    # dcgmGetNvLinkLinkStatus and DCGM_FI_DEV_FABRIC_MANAGER_STATUS (collector.backends.dcgm_links).
    _f("nvlink_links_down", None,
       "nvmlDeviceGetNvLinkState (links NVML knows that are not enabled); DCGM: dcgmGetNvLinkLinkStatus (Down)",
       "links", "gauge", C.NVLINK, "NVLink links of the GPU that are down; absent without NVLink."),
    _f("gpu_fabric_state", None,
       "nvmlDeviceGetGpuFabricInfoV (state, status); DCGM: DCGM_FI_DEV_FABRIC_MANAGER_STATUS (170)",
       "enum", "gauge", C.NVLINK,
       "Registration with the NVLink fabric: 1 not started, 2 in progress, 3 completed, 4 completed with "
       "an error status; absent without a fabric."),
    _f("ib_rail_link_downed", None, None,
       "flaps", "counter", C.NVLINK,
       "Link downs (flaps) of the InfiniBand/RoCE ports on the GPU's rail; absent without one."),
)
# fmt: on


NOT_NVML: dict[str, str] = {
    "ib_rail_link_downed": "sysfs `counters/link_downed` of the ports tied to the GPU (collector.infiniband), summed",
}
"""Sources of the fields read from neither NVML nor DCGM (docs/metrics.md's source column)."""


@dataclass(frozen=True)
class LabelField:
    """A value dcgm-exporter puts on every series of a GPU as a label (type `label` in its counters
    CSV) rather than exporting it as a sample."""

    name: str
    """Short name; also the `GpuInfo` attribute (collector/backends/base.py) that holds the value."""
    dcgm_name: str
    """The DCGM field name, which is also the label's name (dcgm-exporter uses it as it is)."""
    dcgm_id: int
    source: str
    """Where the backends read it (NVML call, or DCGM's field)."""
    help: str
    default: bool = True


LABELS: tuple[LabelField, ...] = (
    # dcgm-exporter reads it with the GPU's fields and adds it to every series of the GPU, unless blank.
    LabelField("driver_version", "DCGM_FI_DRIVER_VERSION", 1, "nvmlSystemGetDriverVersion",
               "NVIDIA driver version, e.g. 570.124.06."),
)  # fmt: skip
"""Label fields: dcgm-exporter's default `DCGM_FI_DRIVER_VERSION, label` row."""

IDENTITY_COLUMNS: tuple[str, ...] = ("timestamp", "hostname", "gpu_uuid", "gpu_index", "model_name")
"""Identity columns of the history frame (fixed by docs/architecture.md)."""

HISTORY_COLUMNS: tuple[str, ...] = (
    "gpu_temp_c", "memory_temp_c", "power_w", "gpu_util_pct", "mem_copy_util_pct",
    "sm_clock_mhz", "mem_clock_mhz", "fb_used_mib", "fb_free_mib",
    "ecc_sbe_volatile", "ecc_dbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_aggregate",
    "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending",
    "row_remap_failure", "pcie_replay_count", "pcie_link_gen", "pcie_link_gen_max",
    "pcie_link_width", "pcie_link_width_max", "clocks_event_reasons",
    "thermal_violation_us", "power_violation_us", "xid",
)  # fmt: skip
"""Metric columns other tools write under these exact names (docs/architecture.md)."""

NODE_FINDING_COLUMNS: tuple[str, ...] = ("nvlink_links_down", "gpu_fabric_state", "ib_rail_link_downed")
"""Columns the node findings of the fabric, NVLink links and IB rails read (predictor.fabric): the
service stores them beside the history columns (docs/history-format.md)."""

_SHORT = re.compile(r"^[a-z][a-z0-9_]*$")
_DCGM = re.compile(r"^DCGM_FI_[A-Z0-9_]+$")
MIN_FIELDS = 35


def validate(fields: Sequence[Field]) -> None:
    """Raise CatalogError naming the first inconsistent entry."""
    if len(fields) < MIN_FIELDS:
        raise CatalogError(f"catalogue has {len(fields)} fields, expected at least {MIN_FIELDS}")
    seen: dict[object, str] = {}
    for f in fields:
        where = f"catalogue field {f.name!r}"
        _check_names(f, where)
        _check_description(f, where)
        _check_unique(f, where, seen)
    names = {f.name for f in fields}
    missing = [c for c in (*HISTORY_COLUMNS, *NODE_FINDING_COLUMNS) if c not in names]
    if missing:
        raise CatalogError(f"catalogue lacks history columns: {', '.join(missing)}")


def _check_names(f: Field, where: str) -> None:
    """The short name and the DCGM name and id of one field are well formed."""
    if not _SHORT.match(f.name):
        raise CatalogError(f"{where}: short name must be snake_case")
    if f.name in IDENTITY_COLUMNS:
        raise CatalogError(f"{where}: clashes with an identity column")
    if (f.dcgm_name is None) != (f.dcgm_id is None):
        raise CatalogError(f"{where}: DCGM name and id must be given together")
    if f.dcgm_name is not None and not _DCGM.match(f.dcgm_name):
        raise CatalogError(f"{where}: DCGM name {f.dcgm_name!r} is not DCGM_FI_*")
    if f.dcgm_id is not None and f.dcgm_id <= 0:
        raise CatalogError(f"{where}: DCGM id must be positive")


def _check_description(f: Field, where: str) -> None:
    """Kind, category, help and unit of one field are given and known."""
    if f.kind not in ("gauge", "counter"):
        raise CatalogError(f"{where}: kind {f.kind!r} is neither gauge nor counter")
    if not isinstance(f.category, Category):
        raise CatalogError(f"{where}: unknown category {f.category!r}")
    if not f.help.strip() or not f.unit.strip():
        raise CatalogError(f"{where}: help and unit are required")


def _check_unique(f: Field, where: str, seen: dict[object, str]) -> None:
    """No earlier field (recorded in `seen`) used this field's name, DCGM name, id or metric name."""
    for key in (("name", f.name), ("dcgm", f.dcgm_name), ("id", f.dcgm_id),
                ("metric", f.metric_name)):  # fmt: skip
        if key[1] is None:
            continue
        if key in seen:
            raise CatalogError(f"{where}: {key[0]} {key[1]!r} already used by {seen[key]!r}")
        seen[key] = f.name


def validate_labels(labels: Sequence[LabelField], fields: Sequence[Field]) -> None:
    """Raise CatalogError naming the first label field that is malformed or clashes with a field."""
    taken: dict[object, str] = {}
    for f in fields:
        taken.update({("name", f.name): f.name, ("dcgm", f.dcgm_name): f.name, ("id", f.dcgm_id): f.name})
    for lf in labels:
        where = f"catalogue label {lf.name!r}"
        if not _SHORT.match(lf.name) or not _DCGM.match(lf.dcgm_name) or lf.dcgm_id <= 0:
            raise CatalogError(f"{where}: needs a snake_case name, a DCGM_FI_* name and a positive id")
        if not lf.help.strip() or not lf.source.strip():
            raise CatalogError(f"{where}: help and source are required")
        for key in (("name", lf.name), ("dcgm", lf.dcgm_name), ("id", lf.dcgm_id)):
            if key in taken:
                raise CatalogError(f"{where}: {key[0]} {key[1]!r} already used by {taken[key]!r}")
            taken[key] = lf.name


validate(FIELDS)
validate_labels(LABELS, FIELDS)
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
BY_DCGM_NAME: dict[str, Field | LabelField] = {
    **{f.dcgm_name: f for f in FIELDS if f.dcgm_name},
    **{lf.dcgm_name: lf for lf in LABELS},
}
"""Every field and label field by its DCGM name (what dcgm-exporter's counters CSV lists)."""


def select(spec: str | Iterable[str] | None = None) -> tuple[Field, ...]:
    """Fields chosen by a spec: None/"default" (catalogue defaults), "all", or names."""
    if spec is None or spec == "default":
        return tuple(f for f in FIELDS if f.default)
    if spec == "all":
        return FIELDS
    names = [n.strip() for n in spec.split(",")] if isinstance(spec, str) else list(spec)
    unknown = [n for n in names if n and n not in BY_NAME]
    if unknown:
        raise CatalogError(f"unknown field(s): {', '.join(unknown)} (see docs/metrics.md for the catalogue)")
    return tuple(BY_NAME[n] for n in names if n)


def default_labels() -> tuple[LabelField, ...]:
    """The label fields on by default (dcgm-exporter's default counters CSV lists them)."""
    return tuple(lf for lf in LABELS if lf.default)


def metrics_markdown(fields: Sequence[Field] = FIELDS) -> str:
    """docs/metrics.md, generated from the catalogue."""
    lines = [
        "# Metrics",
        "",
        "Generated from `core/catalog.py` by `gpuhealth docs metrics`; do not edit by hand.",
        "",
        "Each signal is exported under its DCGM name where it has one (as dcgm-exporter does),",
        "else as `gpuhealth_<name>`; the short name is its history-frame column. Labels on",
        "every per-GPU series: `gpu`, `UUID`, `device`, `modelName`, `pci_bus_id`, `Hostname`",
        "(`hostname` with `--hostname-label hostname`), and the [label fields](#labels) such as",
        "`DCGM_FI_DRIVER_VERSION` unless their value is blank, as dcgm-exporter adds them.",
        "",
        "| short name | metric | DCGM id | NVML source | unit | type | category | default | help |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in fields:
        lines.append(
            f"| `{f.name}` | `{f.metric_name}` | {f.dcgm_id or ''} | "
            f"{_source(f)} | {f.unit} | {f.kind} | "
            f"{f.category} | {'on' if f.default else 'off'} | {f.help} |"
        )
    lines += [
        "",
        "## Also exported",
        "",
        "| metric | type | help |",
        "|---|---|---|",
        "| `gpuhealth_xid_errors_total{xid}` | counter | XID errors seen, one series per code. |",
        "| `gpuhealth_gpu_lost` | gauge | 1 when the GPU stopped answering (fell off the bus). |",
        "| `gpuhealth_gpus` | gauge | GPUs visible and answering. |",
        "| `gpuhealth_collector_success{collector}` | gauge | 1 if the last run of a collector succeeded. |",
        "| `gpuhealth_collector_duration_seconds{collector}` | gauge | Duration of its last run. |",
        "| `gpuhealth_sample_age_seconds` | gauge | Age of the snapshot a scrape renders. |",
        "",
        *infiniband.doc_lines(),
        *nvlink.doc_lines(),
        *kernel_log.doc_lines(),
        "## Labels",
        "",
        "Values dcgm-exporter puts on every series of a GPU (type `label` in its counters CSV).",
        "",
        "| short name | label | DCGM id | source | default | help |",
        "|---|---|---|---|---|---|",
        *(
            f"| `{lf.name}` | `{lf.dcgm_name}` | {lf.dcgm_id} | `{lf.source}` | {'on' if lf.default else 'off'} "
            f"| {lf.help} |"
            for lf in LABELS
        ),
        "",
        *_COMPATIBILITY,
    ]
    return "\n".join(lines)


def _source(f: Field) -> str:
    """A field's source column in docs/metrics.md: its NVML call, another source, or DCGM alone."""
    if f.nvml:
        return f"`{f.nvml}`"
    return NOT_NVML.get(f.name, "(DCGM only)")


_COMPATIBILITY = (
    "## dcgm-exporter compatibility",
    "",
    "- **Field selection.** `--fields` takes `default`, `all` or short names. `--collectors FILE`",
    "  (`GPUHEALTH_COLLECTORS`) takes a dcgm-exporter counters CSV unchanged (`#` comments, blank lines,",
    "  `DCGM_FI_..., gauge|counter|label, help`): every DCGM name the catalogue knows is exported (its",
    "  `label` rows become labels), names it does not know are listed in one warning and skipped, a",
    "  malformed line is an error naming its number. Type and help are the catalogue's (a type that",
    "  differs is named in a warning). With both, the file's fields plus those `--fields` names; the labels",
    "  are the file's. dcgm-exporter's own `etc/default-counters.csv` (4.5.3-4.8.2) selects 25 fields",
    "  and `DCGM_FI_DRIVER_VERSION`, all on by default here (`tests/collector/test_dcgm_parity.py`).",
    "- **gzip.** `/metrics` answers `Content-Encoding: gzip` when the request has",
    "  `Accept-Encoding: gzip` (Prometheus always sends it), plain text otherwise. One simulated node",
    "  (8 H100, `gpuhealth collect --backend sim`, probes on), measured 2026-12-01:",
    "",
    "  | `/metrics` of one node | plain | gzip |",
    "  |---|---|---|",
    "  | before (issue 17) | 120,875 B | not offered (6,283 B with `gzip -6`) |",
    "  | now: dcgm-exporter's remaining defaults, driver label | 146,953 B | 7,110 B |",
    "",
    "  Level 6 takes about 0.6 ms per scrape on 2 shared cores, level 1 under half that for 13 % more bytes.",
    "  It is not cached per snapshot: a snapshot is taken every 10 s and Prometheus scrapes every 15 s",
    "  or more, so each is compressed about once anyway, and the scrape-health series change per scrape.",
    "- **TLS and basic auth.** `--web-config-file` reads the exporter-toolkit web config that",
    "  dcgm-exporter reads (`docs/security.md`).",
    "",
)
