"""NVML backend: reads every catalogue signal NVML offers, and XID events, via nvidia-ml-py.

pynvml is imported only here, inside the constructor, so the rest of gpuhealth
(and its tests) never needs the NVIDIA driver.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collector.backends.base import (
    BackendError,
    BackendUnavailable,
    CommonOptions,
    GpuInfo,
    GpuLostError,
    GpuReading,
    MigReading,
    ProbeRunner,
    XidEvent,
)
from collector.backends.nvml_common import (
    absent_codes,
    address,
    codes,
    link_absent_codes,
    one_line,
    text,
    value_members,
)
from collector.backends.nvml_derived import derived_readers, memory_reader
from collector.backends.nvml_links import LinkFields
from collector.backends.nvml_mig import MIG_FIELDS, mig_devices
from collector.probes import SubprocessProbeRunner

log = logging.getLogger(__name__)

XID_WAIT_MS = 500
"""How long one nvmlEventSetWait blocks; close() waits up to four of these for the watcher."""
XID_ERROR_BACKOFF_S = 0.5
"""Pause after a failed event wait, so a broken event set does not spin a core."""
XID_QUEUE_MAX = 10_000
"""Events kept between two drains; a storm beyond this is dropped (and logged) rather than
growing memory without bound if nothing drains."""

_MIB = 1024 * 1024


@dataclass(frozen=True)
class NvmlOptions:
    """The `nvml` backend's options."""

    watch_xid: bool = True
    """Watch the driver's XID events on a background thread."""


Reader = Callable[["_GpuCalls"], float | None]
"""Reads one catalogue field for one GPU; None means the GPU has no such value."""


@dataclass
class _Gpu:
    """What the backend knows and remembers about one GPU."""

    info: GpuInfo
    handle: Any
    lost: bool = False
    error: str | None = None
    nvlink_links: dict[int, list[int]] = field(default_factory=dict)
    """Per NVLink error counter, the links that answered when first probed."""
    has_mig: bool = True
    """False once NVML said the GPU has no MIG (pre-Ampere): not asked again."""


class _GpuCalls:
    """NVML calls on one GPU within one read; a result (or error) is shared by every field."""

    def __init__(self, nvml: Any, gpu: _Gpu, handle: Any = None) -> None:
        self.nvml = nvml
        self.gpu = gpu
        self.handle = gpu.handle if handle is None else handle
        """The GPU's handle, or one of its MIG devices' (per-instance fields)."""
        self._memo: dict[tuple[object, ...], object] = {}
        self._members = value_members(nvml)

    def __call__(self, fn: str, *args: object) -> Any:
        """Call pynvml `fn(handle, *args)` once per read (memory info feeds three fields)."""
        key = (fn, *args)
        if key in self._memo:
            hit = self._memo[key]
            if isinstance(hit, BaseException):
                raise hit
            return hit
        try:
            result = getattr(self.nvml, fn)(self.handle, *args)
        except self.nvml.NVMLError as err:
            self._memo[key] = err
            raise
        self._memo[key] = result
        return result

    def field_value(self, field_id: int) -> float:
        """One nvmlDeviceGetFieldValues entry; its own nvmlReturn is raised as NVMLError."""
        # One field per call: an id the driver does not know must not hide the others.
        (value,) = self("nvmlDeviceGetFieldValues", (field_id,))
        if value.nvmlReturn != self.nvml.NVML_SUCCESS:
            raise self.nvml.NVMLError(value.nvmlReturn)
        member = self._members.get(value.valueType)
        if member is None:
            raise BackendError(f"NVML field {field_id} has unknown value type {value.valueType}")
        return float(getattr(value.value, member))

    def nvlink_total(self, counter: int) -> float | None:
        """An NVLink error counter summed over the GPU's links; None without NVLink."""
        links = self.gpu.nvlink_links.get(counter)
        candidates = range(self.nvml.NVML_NVLINK_MAX_LINKS) if links is None else links
        total = 0
        answered: list[int] = []
        for link in candidates:
            try:
                total += int(self("nvmlDeviceGetNvLinkErrorCounter", link, counter))
            except self.nvml.NVMLError as err:
                # Links past the GPU's count answer InvalidArgument, absent ones NotSupported.
                if err.value in link_absent_codes(self.nvml):
                    continue
                raise
            answered.append(link)
        if links is None:
            # NVLink topology is fixed while the driver is loaded: probe 0..MAX once, not
            # 36 failing calls per counter on every read of a PCIe-only GPU.
            self.gpu.nvlink_links[counter] = answered
        return float(total) if answered else None


def build_readers(nvml: Any) -> dict[str, Reader]:
    """Catalogue short name -> reader, with units converted to the catalogue's.

    Every pynvml constant is looked up here, not in the readers, so a too-old
    nvidia-ml-py fails at start (AttributeError) rather than on each read.
    """
    n = nvml

    def call(fn: str, *args: int) -> Reader:
        return lambda c: c(fn, *args)

    def field_value(field_id: int) -> Reader:
        return lambda c: c.field_value(field_id)

    def violation_us(policy: int) -> Reader:
        # Violation time is in nanoseconds; DCGM (and the catalogue) use microseconds.
        return lambda c: c("nvmlDeviceGetViolationStatus", policy).violationTime / 1000.0

    def retired(cause: int) -> Reader:
        return lambda c: len(c("nvmlDeviceGetRetiredPages", cause))

    def nvlink(counter: int) -> Reader:
        return lambda c: c.nvlink_total(counter)

    memory = memory_reader(n)
    ecc = "nvmlDeviceGetTotalEccErrors"
    corrected, uncorrected = n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    readers: dict[str, Reader] = {
        "gpu_temp_c": call("nvmlDeviceGetTemperature", n.NVML_TEMPERATURE_GPU),
        "memory_temp_c": field_value(n.NVML_FI_DEV_MEMORY_TEMP),
        "slowdown_temp_c": call("nvmlDeviceGetTemperatureThreshold", n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "shutdown_temp_c": call("nvmlDeviceGetTemperatureThreshold", n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        # NVML reports power in milliwatts.
        "power_w": lambda c: c("nvmlDeviceGetPowerUsage") / 1000.0,
        "power_limit_w": lambda c: c("nvmlDeviceGetPowerManagementLimit") / 1000.0,
        "energy_mj": call("nvmlDeviceGetTotalEnergyConsumption"),
        "sm_clock_mhz": call("nvmlDeviceGetClockInfo", n.NVML_CLOCK_SM),
        "mem_clock_mhz": call("nvmlDeviceGetClockInfo", n.NVML_CLOCK_MEM),
        "clocks_event_reasons": call("nvmlDeviceGetCurrentClocksEventReasons"),
        "thermal_violation_us": violation_us(n.NVML_PERF_POLICY_THERMAL),
        "power_violation_us": violation_us(n.NVML_PERF_POLICY_POWER),
        "gpu_util_pct": lambda c: c("nvmlDeviceGetUtilizationRates").gpu,
        "mem_copy_util_pct": lambda c: c("nvmlDeviceGetUtilizationRates").memory,
        # [utilisation, sampling period in us]
        "enc_util_pct": lambda c: c("nvmlDeviceGetEncoderUtilization")[0],
        "dec_util_pct": lambda c: c("nvmlDeviceGetDecoderUtilization")[0],
        # Memory info is in bytes; DCGM's FB_* fields are MiB. v2 where the driver has it, as DCGM.
        "fb_free_mib": lambda c: memory(c).free / _MIB,
        "fb_used_mib": lambda c: memory(c).used / _MIB,
        "fb_total_mib": lambda c: memory(c).total / _MIB,
        "ecc_sbe_volatile": call(ecc, corrected, n.NVML_VOLATILE_ECC),
        "ecc_dbe_volatile": call(ecc, uncorrected, n.NVML_VOLATILE_ECC),
        "ecc_sbe_aggregate": call(ecc, corrected, n.NVML_AGGREGATE_ECC),
        "ecc_dbe_aggregate": call(ecc, uncorrected, n.NVML_AGGREGATE_ECC),
        "retired_pages_sbe": retired(n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        "retired_pages_dbe": retired(n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
        "retired_pages_pending": call("nvmlDeviceGetRetiredPagesPendingStatus"),
        # nvmlDeviceGetRemappedRows -> (corrRows, uncRows, isPending, failureOccurred)
        "remapped_rows_correctable": lambda c: c("nvmlDeviceGetRemappedRows")[0],
        "remapped_rows_uncorrectable": lambda c: c("nvmlDeviceGetRemappedRows")[1],
        "row_remap_pending": lambda c: c("nvmlDeviceGetRemappedRows")[2],
        "row_remap_failure": lambda c: c("nvmlDeviceGetRemappedRows")[3],
        "pcie_replay_count": call("nvmlDeviceGetPcieReplayCounter"),
        "pcie_link_gen": call("nvmlDeviceGetCurrPcieLinkGeneration"),
        "pcie_link_gen_max": call("nvmlDeviceGetMaxPcieLinkGeneration"),
        "pcie_link_width": call("nvmlDeviceGetCurrPcieLinkWidth"),
        "pcie_link_width_max": call("nvmlDeviceGetMaxPcieLinkWidth"),
        # Already KB/s, as DCGM's PCIE_TX/RX_THROUGHPUT.
        "pcie_tx_kbps": call("nvmlDeviceGetPcieThroughput", n.NVML_PCIE_UTIL_TX_BYTES),
        "pcie_rx_kbps": call("nvmlDeviceGetPcieThroughput", n.NVML_PCIE_UTIL_RX_BYTES),
        "nvlink_crc_flit_errors": nvlink(n.NVML_NVLINK_ERROR_DL_CRC_FLIT),
        "nvlink_crc_data_errors": nvlink(n.NVML_NVLINK_ERROR_DL_CRC_DATA),
        "nvlink_replay_errors": nvlink(n.NVML_NVLINK_ERROR_DL_REPLAY),
        "nvlink_recovery_errors": nvlink(n.NVML_NVLINK_ERROR_DL_RECOVERY),
    }
    # Recovery action needs nvidia-ml-py 12.560+ (and a 560+ driver); older ones lack the id.
    recovery_id = getattr(n, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if recovery_id is not None:
        readers["recovery_action"] = field_value(recovery_id)
    readers.update(derived_readers(n))  # computed as DCGM computes them (nvml_derived.py)
    readers.update(LinkFields(n).readers())  # links down, fabric state (nvml_links.py)
    # NVLink sums need the link count at read time: fail now if it is missing.
    _ = n.NVML_NVLINK_MAX_LINKS
    return readers


EVENT_FIELDS = frozenset({"xid"})
"""Catalogue fields NVML delivers as events, not reads (the sampler fills them in)."""


class NvmlBackend:
    """GPU telemetry from NVML: one reading per GPU per call, XID events from a watcher thread."""

    name = "nvml"

    def __init__(
        self,
        hostname: str,
        nvml: types.ModuleType | None = None,
        watch_xid: bool = True,
    ) -> None:
        if nvml is None:
            try:
                import pynvml
            except ImportError as err:
                raise BackendUnavailable(
                    "nvidia-ml-py is not installed (pip install nvidia-ml-py); "
                    "use --backend sim to try a simulated fleet"
                ) from err
            nvml = pynvml
        self.hostname = hostname
        self._nvml: Any = nvml
        self._absent = absent_codes(nvml)
        self._lost = codes(nvml, "NVML_ERROR_GPU_IS_LOST")
        self._reported: set[tuple[int, str]] = set()
        self._events: collections.deque[XidEvent] = collections.deque()
        self._events_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._event_set: Any = None
        self._closed = False
        self._init()
        try:
            self._readers = build_readers(nvml)
        except AttributeError as err:  # a constant this nvidia-ml-py predates
            self._shutdown_quietly()
            raise BackendUnavailable(
                f"nvidia-ml-py lacks {err.name}: upgrade it (pip install -U nvidia-ml-py)"
            ) from err
        try:
            self._gpus = self._discover()
        except BaseException:
            self._shutdown_quietly()
            raise
        self._uuid_by_address = {
            addr: g.info.uuid for g in self._gpus if g.handle is not None and (addr := address(g.handle)) is not None
        }
        if watch_xid:
            self._start_xid_watch()

    # --- start-up ---------------------------------------------------------------------------

    def _init(self) -> None:
        n = self._nvml
        try:
            n.nvmlInit()
        except n.NVMLError as err:
            hints = {
                "NVML_ERROR_LIBRARY_NOT_FOUND": "is the NVIDIA driver installed?",
                "NVML_ERROR_DRIVER_NOT_LOADED": "is the nvidia kernel module loaded?",
                "NVML_ERROR_LIB_RM_VERSION_MISMATCH": (
                    "the driver was updated without reloading its kernel module: reboot the node."
                ),
                "NVML_ERROR_NO_PERMISSION": "run as a user allowed to open /dev/nvidia*.",
            }
            hint = next(
                (h for name, h in hints.items() if getattr(n, name, None) == err.value),
                "does nvidia-smi work on this node?",
            )
            raise BackendUnavailable(
                f"NVML could not be loaded ({one_line(err)}): {hint} use --backend sim to try a simulated fleet"
            ) from err

    def _discover(self) -> list[_Gpu]:
        n = self._nvml
        try:
            count = int(n.nvmlDeviceGetCount())
        except n.NVMLError as err:
            raise BackendError(f"counting GPUs with NVML: {one_line(err)}") from err
        try:
            driver = text(n.nvmlSystemGetDriverVersion())
        except n.NVMLError as err:
            log.warning("reading the NVIDIA driver version failed: %s", one_line(err))
            driver = ""
        gpus = [self._discover_one(index, driver) for index in range(count)]
        if not gpus:
            log.warning("NVML found no GPUs on %s", self.hostname)
        return gpus

    def _discover_one(self, index: int, driver: str) -> _Gpu:
        """Identify GPU `index`; one NVML cannot address is listed as lost, not dropped."""
        n = self._nvml
        try:
            handle = n.nvmlDeviceGetHandleByIndex(index)
            uuid = text(n.nvmlDeviceGetUUID(handle))
        except n.NVMLError as err:
            reason = f"GPU {index} cannot be addressed by NVML: {one_line(err)}"
            log.error("%s", reason)
            info = GpuInfo(index, f"GPU-unknown-{index}", "", self.hostname, driver_version=driver)
            return _Gpu(info, None, lost=True, error=reason)
        extra: dict[str, str] = {}
        lost: str | None = None
        getters: dict[str, Callable[[], object]] = {
            "model_name": lambda: n.nvmlDeviceGetName(handle),
            "pci_bus_id": lambda: n.nvmlDeviceGetPciInfo(handle).busId,
            "serial": lambda: n.nvmlDeviceGetSerial(handle),
        }
        for key, get in getters.items():
            if lost:
                break
            try:
                extra[key] = text(get())
            except n.NVMLError as err:
                if err.value in self._lost:
                    lost = f"GPU {index} ({uuid}) is lost: {one_line(err)}"
                    log.error("%s", lost)
                elif err.value not in self._absent:
                    log.warning("reading %s of GPU %d failed: %s", key, index, one_line(err))
        info = GpuInfo(
            index=index,
            uuid=uuid,
            model_name=extra.get("model_name", ""),
            hostname=self.hostname,
            pci_bus_id=extra.get("pci_bus_id", ""),
            serial=extra.get("serial", ""),
            driver_version=driver,
        )
        return _Gpu(info, handle, lost=lost is not None, error=lost)

    # --- reading ----------------------------------------------------------------------------

    def gpus(self) -> list[GpuInfo]:
        """The GPUs found at start (lost ones included)."""
        return [g.info for g in self._gpus]

    def read(self) -> list[GpuReading]:
        """One reading per GPU; a lost GPU gives lost=True, the others keep reporting."""
        return [self._read_gpu(g) for g in self._gpus]

    def data_time(self) -> None:
        """None: live readings are as of the wall clock."""
        return None

    def _read_gpu(self, gpu: _Gpu) -> GpuReading:
        if gpu.lost:
            # A lost GPU stays lost until the driver is reloaded: don't call into it again.
            return GpuReading(gpu.info, lost=True, error=gpu.error)
        calls = _GpuCalls(self._nvml, gpu)
        values: dict[str, float] = {}
        for name, reader in self._readers.items():
            try:
                value = reader(calls)
            except self._nvml.NVMLError as err:
                if err.value in self._lost:
                    return self._mark_lost(gpu, err, name)
                if err.value in self._absent:
                    self._once(gpu, name, logging.DEBUG, "not available: %s", one_line(err))
                else:
                    self._once(gpu, name, logging.WARNING, "read failed: %s", one_line(err))
                continue
            except Exception as err:  # one odd value must not cost the other fields
                self._once(gpu, name, logging.WARNING, "read failed: %r", err)
                continue
            if value is None:
                self._once(gpu, name, logging.DEBUG, "not available on this GPU")
                continue
            values[name] = float(value)
        try:
            mig = self._read_mig(gpu)
        except self._nvml.NVMLError as err:  # only a lost GPU gets here
            return self._mark_lost(gpu, err, "its MIG instances")
        return GpuReading(gpu.info, values, mig=mig)

    def _mark_lost(self, gpu: _Gpu, err: BaseException, reading: str) -> GpuReading:
        gpu.lost = True
        gpu.error = f"GPU {gpu.info.index} ({gpu.info.uuid}) is lost: {one_line(err)}"
        log.error("%s (while reading %s)", gpu.error, reading)
        return GpuReading(gpu.info, lost=True, error=gpu.error)

    def _read_mig(self, gpu: _Gpu) -> list[MigReading]:
        """Its MIG instances with their memory; [] without MIG or on trouble (logged once). Raises NVMLError
        only for a lost GPU."""
        if not gpu.has_mig:
            return []
        try:
            devices = mig_devices(self._nvml, gpu.handle)
        except self._nvml.NVMLError as err:
            if err.value in self._lost:
                raise
            self._once(gpu, "MIG instances", logging.WARNING, "listing failed: %s", one_line(err))
            return []
        if devices is None:
            gpu.has_mig = False
            return []
        readings = []
        for d in devices:
            calls = _GpuCalls(self._nvml, gpu, d.handle)
            values: dict[str, float] = {}
            for name in MIG_FIELDS:
                try:
                    value = self._readers[name](calls)
                except self._nvml.NVMLError as err:
                    if err.value in self._lost:
                        raise
                    level = logging.DEBUG if err.value in self._absent else logging.WARNING
                    self._once(gpu, f"{name} of MIG instance {d.instance.gpu_instance_id}", level, "%s", one_line(err))
                    continue
                if value is not None:
                    values[name] = float(value)
            readings.append(MigReading(d.instance, values))
        return readings

    def _once(self, gpu: _Gpu, name: str, level: int, msg: str, *args: object) -> None:
        """Log a field's trouble once per GPU: it will be the same on every read."""
        key = (gpu.info.index, name)
        if key in self._reported:
            return
        self._reported.add(key)
        log.log(level, "GPU %d field %s: " + msg, gpu.info.index, name, *args)

    def device(self, index: int) -> tuple[Any, Any]:
        """(the pynvml module, the handle) of GPU `index`, for nvml_reset; GpuLostError when it is lost."""
        gpu = next((g for g in self._gpus if g.info.index == index), None)
        if gpu is None or gpu.lost or gpu.handle is None:
            raise GpuLostError(gpu.error if gpu is not None and gpu.error else f"GPU {index} is lost or unknown")
        return self._nvml, gpu.handle

    # --- probing: the runner and the idle check --------------------------------------------

    def probe_runner(self) -> ProbeRunner:
        """The CUDA kernels in a child process per GPU."""
        return SubprocessProbeRunner()

    def busy_reason(self, uuid: str, util_threshold_pct: float = 5.0) -> str | None:
        """Why GPU `uuid` is not idle (compute processes, utilisation), or None when it is.

        A GPU whose state cannot be read counts as busy: a probe must never land on a job.
        """
        gpu = next((g for g in self._gpus if g.info.uuid == uuid), None)
        if gpu is None or gpu.lost or gpu.handle is None:
            return f"GPU {uuid} is lost or unknown"
        n = self._nvml
        try:
            procs = n.nvmlDeviceGetComputeRunningProcesses(gpu.handle)
            if procs:
                pids = ", ".join(str(getattr(p, "pid", "?")) for p in list(procs)[:5])
                return f"{len(procs)} compute process(es) running (pid {pids})"
            util = float(n.nvmlDeviceGetUtilizationRates(gpu.handle).gpu)
        except n.NVMLError as err:
            return f"cannot tell whether GPU {gpu.info.index} is idle: {one_line(err)}"
        if util >= util_threshold_pct:
            return f"utilisation {util:g}% >= {util_threshold_pct:g}%"
        return None

    # --- XID events -------------------------------------------------------------------------

    def _start_xid_watch(self) -> None:
        n = self._nvml
        try:
            event_set = n.nvmlEventSetCreate()
        except n.NVMLError as err:
            log.warning("XID events unavailable: nvmlEventSetCreate failed: %s", one_line(err))
            return
        registered = 0
        for gpu in self._gpus:
            if gpu.lost or gpu.handle is None:
                continue
            try:
                n.nvmlDeviceRegisterEvents(gpu.handle, n.nvmlEventTypeXidCriticalError, event_set)
                registered += 1
            except n.NVMLError as err:
                level = logging.DEBUG if err.value in self._absent else logging.WARNING
                log.log(level, "no XID events from GPU %d: %s", gpu.info.index, one_line(err))
        if not registered:
            self._free_event_set(event_set)
            return
        self._event_set = event_set
        self._thread = threading.Thread(
            target=self._watch_xid, args=(event_set,), name="gpuhealth-nvml-xid", daemon=True
        )
        self._thread.start()

    def _watch_xid(self, event_set: object) -> None:
        n = self._nvml
        # nvmlEventSetWait_v2 exists since driver 418; older bindings name it without _v2.
        wait = getattr(n, "nvmlEventSetWait_v2", None) or n.nvmlEventSetWait
        timeout = getattr(n, "NVML_ERROR_TIMEOUT", None)
        warned: set[int] = set()
        while not self._stop.is_set():
            try:
                data = wait(event_set, XID_WAIT_MS)
            except n.NVMLError as err:
                if err.value == timeout:
                    continue
                # GpuIsLost here names no GPU; read() finds out which. Keep listening for
                # the other GPUs, slowly.
                if err.value not in warned:
                    warned.add(err.value)
                    log.warning("waiting for XID events failed: %s", one_line(err))
                self._stop.wait(XID_ERROR_BACKOFF_S)
                continue
            except Exception:  # a bug here must not silently end XID collection
                log.exception("XID watcher error")
                self._stop.wait(XID_ERROR_BACKOFF_S)
                continue
            if data.eventType & n.nvmlEventTypeXidCriticalError:
                self._queue(XidEvent(self._uuid_of(data.device), int(data.eventData), time.time()))

    def _uuid_of(self, device: object) -> str:
        addr = address(device)
        if addr is not None and addr in self._uuid_by_address:
            return self._uuid_by_address[addr]
        try:
            return text(self._nvml.nvmlDeviceGetUUID(device))
        except self._nvml.NVMLError:
            return "GPU-unknown"

    def _queue(self, event: XidEvent) -> None:
        log.info("XID %d on GPU %s", event.xid, event.gpu_uuid)
        with self._events_lock:
            if len(self._events) >= XID_QUEUE_MAX:
                log.warning("XID queue full (%d): dropping XID %d", XID_QUEUE_MAX, event.xid)
                return
            self._events.append(event)

    def drain_xid_events(self) -> list[XidEvent]:
        """XID events seen since the last call, oldest first."""
        with self._events_lock:
            events = list(self._events)
            self._events.clear()
        return events

    # --- shutdown ---------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the XID watcher, free the event set and shut NVML down (errors ignored)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=4 * XID_WAIT_MS / 1000)
            if self._thread.is_alive():
                # Freeing an event set a thread still waits on is undefined behaviour in NVML.
                log.warning("XID watcher did not stop; leaving NVML initialised")
                return
            self._thread = None
        if self._event_set is not None:
            self._free_event_set(self._event_set)
            self._event_set = None
        self._shutdown_quietly()

    def _free_event_set(self, event_set: object) -> None:
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except self._nvml.NVMLError as err:
            log.debug("nvmlEventSetFree failed: %s", one_line(err))

    def _shutdown_quietly(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as err:
            log.debug("nvmlShutdown failed: %s", one_line(err))


def open_nvml(options: NvmlOptions, common: CommonOptions) -> NvmlBackend:
    """The NVML backend for this host's GPUs (BackendUnavailable without nvidia-ml-py)."""
    return NvmlBackend(hostname=common.hostname, watch_xid=options.watch_xid)
