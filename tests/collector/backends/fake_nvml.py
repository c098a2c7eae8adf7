"""A pynvml test double: the calls NvmlBackend makes, backed by per-GPU raw NVML values.

It stays honest by borrowing from the real nvidia-ml-py wherever it can: constants,
exception classes (``pynvml.NVMLError(code)`` gives the real ``NVMLError_*`` subclass)
and the ctypes structures the real calls return (``c_nvmlMemory_t``, ``nvmlPciInfo_t``,
``c_nvmlFieldValue_t`` arrays, ``c_nvmlEventData_t``), with device handles that are
real ``c_nvmlDevice_t`` pointers. Values are configured in NVML's own units (mW, ns,
bytes) so the backend's conversions are what the tests check.
"""

from __future__ import annotations

import ctypes
import inspect
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import pynvml

MIB = 1024 * 1024
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
MAX_MIG_DEVICES = 7
"""nvmlDeviceGetMaxMigDeviceCount of an A100/H100: seven 1g instances at most."""

_VALUE_MEMBER = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def h100_values() -> dict[tuple[Any, ...], Any]:
    """Raw NVML answers of a healthy H100, keyed by (call, *arguments after the handle)."""
    p = pynvml
    return {
        ("nvmlDeviceGetTemperature", p.NVML_TEMPERATURE_GPU): 41,
        ("nvmlDeviceGetTemperatureThreshold", p.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN): 87,
        ("nvmlDeviceGetTemperatureThreshold", p.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN): 92,
        ("nvmlDeviceGetPowerUsage",): 312_456,  # mW
        ("nvmlDeviceGetPowerManagementLimit",): 700_000,  # mW
        ("nvmlDeviceGetTotalEnergyConsumption",): 123_456_789,  # mJ
        ("nvmlDeviceGetClockInfo", p.NVML_CLOCK_SM): 1980,
        ("nvmlDeviceGetClockInfo", p.NVML_CLOCK_MEM): 2619,
        ("nvmlDeviceGetCurrentClocksEventReasons",): 0x4,
        ("nvmlDeviceGetViolationStatus", p.NVML_PERF_POLICY_THERMAL): 5_000_000,  # ns
        ("nvmlDeviceGetViolationStatus", p.NVML_PERF_POLICY_POWER): 12_345_678,  # ns
        ("nvmlDeviceGetUtilizationRates",): (87, 40),  # (gpu, memory) %
        ("nvmlDeviceGetEncoderUtilization",): 0,
        ("nvmlDeviceGetDecoderUtilization",): 3,
        ("nvmlDeviceGetMemoryInfo",): (81559 * MIB, 41559 * MIB, 40000 * MIB),  # total, free, used
        # nvmlDeviceGetMemoryInfo_v2 (driver r510+): total, reserved, free, used; v1's used includes reserved.
        ("nvmlDeviceGetMemoryInfo_v2",): (81559 * MIB, 529 * MIB, 41559 * MIB, 39471 * MIB),
        (
            "nvmlDeviceGetTotalEccErrors",
            p.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            p.NVML_VOLATILE_ECC,
        ): 3,
        (
            "nvmlDeviceGetTotalEccErrors",
            p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            p.NVML_VOLATILE_ECC,
        ): 0,
        (
            "nvmlDeviceGetTotalEccErrors",
            p.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            p.NVML_AGGREGATE_ECC,
        ): 17,
        (
            "nvmlDeviceGetTotalEccErrors",
            p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            p.NVML_AGGREGATE_ECC,
        ): 1,
        (
            "nvmlDeviceGetRetiredPages",
            p.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        ): [0x1000, 0x2000],
        ("nvmlDeviceGetRetiredPages", p.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR): [0x3000],
        ("nvmlDeviceGetRetiredPagesPendingStatus",): 0,
        ("nvmlDeviceGetRemappedRows",): (2, 1, 0, 0),  # corr, unc, pending, failure
        ("nvmlDeviceGetPcieReplayCounter",): 5,
        ("nvmlDeviceGetCurrPcieLinkGeneration",): 5,
        ("nvmlDeviceGetMaxPcieLinkGeneration",): 5,
        ("nvmlDeviceGetCurrPcieLinkWidth",): 8,
        ("nvmlDeviceGetMaxPcieLinkWidth",): 16,
        ("nvmlDeviceGetPcieThroughput", p.NVML_PCIE_UTIL_TX_BYTES): 1234,  # KB/s
        ("nvmlDeviceGetPcieThroughput", p.NVML_PCIE_UTIL_RX_BYTES): 5678,
        # NVLink: one count per link (18 links on an H100 SXM); None = link not present.
        ("nvlink", p.NVML_NVLINK_ERROR_DL_CRC_FLIT): [0, 0, 0, 4] + [0] * 14,
        ("nvlink", p.NVML_NVLINK_ERROR_DL_CRC_DATA): [2] + [0] * 17,
        ("nvlink", p.NVML_NVLINK_ERROR_DL_REPLAY): [1] * 18,
        ("nvlink", p.NVML_NVLINK_ERROR_DL_RECOVERY): [0] * 18,
        # nvmlDeviceGetFieldValues: field id -> (value type, value) or ("error", NVML code)
        ("field", p.NVML_FI_DEV_MEMORY_TEMP): (p.NVML_VALUE_TYPE_UNSIGNED_INT, 52),
        ("field", p.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): (p.NVML_VALUE_TYPE_UNSIGNED_INT, 0),
        # NVLink data throughput counters in KiB, asked for all links at once (scope 0xFFFFFFFF).
        ("field", p.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX): (p.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 10_000_000),
        ("field", p.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX): (p.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 12_000_000),
        # nvmlDeviceGetGridLicensableFeatures: (isGridLicenseSupported, [(featureCode, featureState), ...]);
        # a bare-metal GPU answers, without vGPU licensing.
        ("nvmlDeviceGetGridLicensableFeatures",): (0, []),
        # Before a reset (tests/collector/backends/fake_reset.py): no processes, a Hopper on 18 NVSwitch links.
        ("nvmlDeviceGetComputeRunningProcesses",): [],
        ("nvmlDeviceGetGraphicsRunningProcesses",): [],
        ("nvmlDeviceGetArchitecture",): p.NVML_DEVICE_ARCH_HOPPER,
        ("nvmlDeviceGetNvLinkState",): [p.NVML_FEATURE_ENABLED] * 18,
        ("nvmlDeviceGetNvLinkRemoteDeviceType",): [p.NVML_NVLINK_DEVICE_TYPE_SWITCH] * 18,
    }


@dataclass
class FakeMig:
    """One MIG device (a compute instance) of a FakeGpu, in NVML's units."""

    uuid: str
    gpu_instance_id: int
    profile: str = "1g.10gb"
    """As in the device's name: "<GPU name> MIG <profile>"."""
    memory: tuple[int, int, int] = (9856 * MIB, 9000 * MIB, 856 * MIB)
    """nvmlDeviceGetMemoryInfo on its handle: total, free, used (bytes)."""
    errors: dict[str, int] = field(default_factory=dict)
    """Call name -> NVML error code that call on this MIG device raises."""


@dataclass
class FakeGpu:
    """One simulated GPU: identity, raw values and how it misbehaves."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = "00000000:18:00.0"
    serial: str | None = "1650123456789"
    """None: nvmlDeviceGetSerial is not supported (consumer boards)."""
    values: dict[tuple[Any, ...], Any] = field(default_factory=h100_values)
    """A key absent here answers NVML_ERROR_NOT_SUPPORTED, as the real driver does."""
    errors: dict[str | tuple[Any, ...], int] = field(default_factory=dict)
    """Call name or (call, *args) -> NVML error code that call raises."""
    lost: bool = False
    """Every call on the handle raises NVML_ERROR_GPU_IS_LOST (it fell off the bus)."""
    lost_after_calls: int | None = None
    """Become lost after this many calls on the handle (mid-read, like a real fall-off)."""
    calls: int = 0
    resets: int = 0
    """Resets done (fake_reset.reset_gpu)."""
    mig_mode: int | None = None
    """Current MIG mode (NVML_DEVICE_MIG_ENABLE/DISABLE); None: a GPU without MIG (pre-Ampere), whose
    nvmlDeviceGetMigMode answers NVML_ERROR_NOT_SUPPORTED."""
    mig: list[FakeMig | None] = field(default_factory=list)
    """MIG devices by index (nvmlDeviceGetMigDeviceHandleByIndex); None or past the end: an empty slot."""


class FakeNvml:
    """Stands in for the pynvml module; unknown attributes that are not functions come from
    the real pynvml (constants, exception and structure classes)."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: int | None = None,
        driver_version: str = "550.54.15",
        hidden: tuple[str, ...] = (),
        bytes_strings: bool = False,
    ) -> None:
        self._gpus = gpus
        self._init_error = init_error
        self._driver_version = driver_version
        self._hidden = frozenset(hidden)
        self._bytes = bytes_strings
        """Return bytes for strings, as nvidia-ml-py before 11.5 did."""
        self._handles = [
            ctypes.cast(ctypes.c_void_p(0x10000 + 0x100 * i), pynvml.c_nvmlDevice_t) for i in range(len(gpus))
        ]
        # MIG device handles: real pointers too, one per GPU and slot, distinct from the GPUs'.
        self._mig_handles = {
            (i, slot): ctypes.cast(ctypes.c_void_p(0x80000 + 0x100 * i + slot), pynvml.c_nvmlDevice_t)
            for i in range(len(gpus))
            for slot in range(MAX_MIG_DEVICES)
        }
        self._lock = threading.Lock()
        self._events: queue.Queue[tuple[int, int] | int] = queue.Queue()
        self._event_set = ctypes.cast(ctypes.c_void_p(0xE000), pynvml.c_nvmlEventSet_t)
        self.registered: set[int] = set()
        self.event_set_freed = False
        self.initialized = 0
        self.log: list[tuple[str, int | None]] = []
        self.now_us = 1_700_000_000_000_000
        """The CPU timestamp nvmlDeviceGetFieldValues stamps its values with (µs since 1970); tests move it."""
        """Every call made: (name, GPU index or None)."""

    # --- module-likeness ----------------------------------------------------------------

    def __getattribute__(self, name: str) -> Any:
        if name in object.__getattribute__(self, "_hidden"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        # Python falls back here when __getattribute__ hides a name: keep it hidden.
        if name.startswith("_") or name in object.__getattribute__(self, "_hidden"):
            raise AttributeError(name)
        real = getattr(pynvml, name)
        if inspect.isfunction(real):
            # Never fall through to the real library: a call the fake lacks is a test bug.
            raise AttributeError(f"FakeNvml does not implement {name}")
        return real

    # --- test controls ------------------------------------------------------------------

    def handle(self, index: int) -> Any:
        """The device handle of GPU `index` (a real c_nvmlDevice_t pointer)."""
        return self._handles[index]

    def gpu(self, index: int) -> FakeGpu:
        """GPU `index` itself, for test controls kept in other modules (fake_reset.py)."""
        return self._gpus[index]

    def lose(self, index: int) -> None:
        """GPU `index` falls off the bus now."""
        self._gpus[index].lost = True

    def queue_xid(self, index: int, xid: int) -> None:
        """Deliver an XID on GPU `index` to the next event wait (if it registered)."""
        self._events.put((index, xid))

    def queue_wait_error(self, code: int) -> None:
        """Make the next event wait raise NVML error `code`."""
        self._events.put(code)

    def calls_on(self, index: int) -> int:
        """How many calls were made on GPU `index`'s handle."""
        with self._lock:
            return sum(1 for _, i in self.log if i == index)

    # --- internals ----------------------------------------------------------------------

    def _str(self, s: str) -> str | bytes:
        return s.encode() if self._bytes else s

    def _record(self, name: str, index: int | None) -> None:
        with self._lock:
            self.log.append((name, index))

    def _need_init(self) -> None:
        if self.initialized <= 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _index(self, handle: Any) -> int:
        addr = ctypes.cast(handle, ctypes.c_void_p).value
        for i, h in enumerate(self._handles):
            if ctypes.cast(h, ctypes.c_void_p).value == addr:
                return i
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def _mig_slot(self, handle: Any) -> tuple[int, int] | None:
        """(GPU index, slot) of a MIG device handle; None for any other handle."""
        addr = ctypes.cast(handle, ctypes.c_void_p).value
        for key, h in self._mig_handles.items():
            if ctypes.cast(h, ctypes.c_void_p).value == addr:
                return key
        return None

    def _mig(self, fn: str, handle: Any) -> FakeMig:
        """The MIG device behind `handle`: its GPU's loss and the slot's emptiness answer as NVML does."""
        self._need_init()
        key = self._mig_slot(handle)
        if key is None:  # a GPU handle: "if this query is not supported by the device"
            self._gpu(fn, handle)
            raise pynvml.NVMLError(NOT_SUPPORTED)
        index, slot = key
        self._record(fn, index)
        gpu = self._gpus[index]
        if gpu.lost:
            raise pynvml.NVMLError(GPU_IS_LOST)
        mig = gpu.mig[slot] if slot < len(gpu.mig) else None
        if mig is None or gpu.mig_mode != pynvml.NVML_DEVICE_MIG_ENABLE:
            # The instance was destroyed since the handle was handed out: the handle is invalid.
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if fn in mig.errors:
            raise pynvml.NVMLError(mig.errors[fn])
        return mig

    def _gpu(self, fn: str, handle: Any, *args: Any) -> FakeGpu:
        """Resolve the handle, count the call and raise what the GPU is configured to raise."""
        self._need_init()
        index = self._index(handle)
        self._record(fn, index)
        gpu = self._gpus[index]
        gpu.calls += 1
        if gpu.lost_after_calls is not None and gpu.calls > gpu.lost_after_calls:
            gpu.lost = True
        if gpu.lost:
            raise pynvml.NVMLError(GPU_IS_LOST)
        for key in ((fn, *args), fn):
            if key in gpu.errors:
                raise pynvml.NVMLError(gpu.errors[key])
        return gpu

    def _value(self, fn: str, handle: Any, *args: Any) -> Any:
        gpu = self._gpu(fn, handle, *args)
        try:
            return gpu.values[(fn, *args)]
        except KeyError:
            raise pynvml.NVMLError(NOT_SUPPORTED) from None

    # --- library ------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._record("nvmlInit", None)
        if self._init_error is not None:
            raise pynvml.NVMLError(self._init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._record("nvmlShutdown", None)
        self._need_init()
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._need_init()
        return self._str(self._driver_version)

    def nvmlDeviceGetCount(self) -> int:
        self._need_init()
        return len(self._gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._need_init()
        self._record("nvmlDeviceGetHandleByIndex", index)
        if not 0 <= index < len(self._gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self._gpus[index].lost:
            raise pynvml.NVMLError(GPU_IS_LOST)
        return self._handles[index]

    # --- identity -----------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes:
        if self._mig_slot(handle) is not None:
            return self._str(self._mig("nvmlDeviceGetUUID", handle).uuid)
        return self._str(self._gpu("nvmlDeviceGetUUID", handle).uuid)

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        key = self._mig_slot(handle)
        if key is not None:  # "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
            return self._str(f"{self._gpus[key[0]].name} MIG {self._mig('nvmlDeviceGetName', handle).profile}")
        return self._str(self._gpu("nvmlDeviceGetName", handle).name)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle)
        info = pynvml.nvmlPciInfo_t()
        info.busId = gpu.pci_bus_id.encode()
        return info

    def nvmlDeviceGetSerial(self, handle: Any) -> str | bytes:
        gpu = self._gpu("nvmlDeviceGetSerial", handle)
        if gpu.serial is None:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return self._str(gpu.serial)

    # --- plain values -------------------------------------------------------------------

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return int(self._value("nvmlDeviceGetTemperature", handle, sensor))

    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        return int(self._value("nvmlDeviceGetTemperatureThreshold", handle, threshold))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetPowerUsage", handle))

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetPowerManagementLimit", handle))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetTotalEnergyConsumption", handle))

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        return int(self._value("nvmlDeviceGetClockInfo", handle, type))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetCurrentClocksEventReasons", handle))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        return int(self._value("nvmlDeviceGetRetiredPagesPendingStatus", device))

    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetPcieReplayCounter", handle))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetCurrPcieLinkGeneration", handle))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetMaxPcieLinkGeneration", handle))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetCurrPcieLinkWidth", handle))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return int(self._value("nvmlDeviceGetMaxPcieLinkWidth", handle))

    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: int) -> int:
        return int(self._value("nvmlDeviceGetPcieThroughput", device, counter))

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        return int(self._value("nvmlDeviceGetTotalEccErrors", handle, errorType, counterType))

    # --- structured values (the real return types) ----------------------------------------

    def nvmlDeviceGetViolationStatus(self, device: Any, perfPolicyType: int) -> Any:
        ns = self._value("nvmlDeviceGetViolationStatus", device, perfPolicyType)
        return pynvml.c_nvmlViolationTime_t(referenceTime=1_700_000_000_000_000, violationTime=ns)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu, memory = self._value("nvmlDeviceGetUtilizationRates", handle)
        return pynvml.c_nvmlUtilization_t(gpu=gpu, memory=memory)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        """Configured as a list of pids; answered as pynvml does, one c_nvmlProcessInfo_t each."""
        return self._processes("nvmlDeviceGetComputeRunningProcesses", handle)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        return self._processes("nvmlDeviceGetGraphicsRunningProcesses", handle)

    def _processes(self, fn: str, handle: Any) -> list[Any]:
        procs = []
        for pid in self._value(fn, handle):
            info = pynvml.c_nvmlProcessInfo_t()
            info.pid = pid
            procs.append(info)
        return procs

    def nvmlDeviceGetArchitecture(self, device: Any) -> int:
        return int(self._value("nvmlDeviceGetArchitecture", device))

    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        return self._per_link("nvmlDeviceGetNvLinkState", device, link)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        return self._per_link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)

    def _per_link(self, fn: str, handle: Any, link: int) -> int:
        """A per-link answer, configured as a list by link: past its end, InvalidArgument as the driver says."""
        per_link = self._value(fn, handle)
        if not 0 <= link < len(per_link):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(per_link[link])

    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        return [int(self._value("nvmlDeviceGetEncoderUtilization", handle)), 167_000]

    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        return [int(self._value("nvmlDeviceGetDecoderUtilization", handle)), 167_000]

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        if version and version != pynvml.nvmlMemory_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if self._mig_slot(handle) is not None:  # the instance's own memory (nothing reserved apart)
            total, free, used = self._mig("nvmlDeviceGetMemoryInfo", handle).memory
            if version:
                return pynvml.c_nvmlMemory_v2_t(version=version, total=total, reserved=0, free=free, used=used)
        elif version:
            # pynvml calls nvmlDeviceGetMemoryInfo_v2; a driver before r510 lacks the symbol.
            gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle, version)
            if ("nvmlDeviceGetMemoryInfo_v2",) not in gpu.values:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            total, reserved, free, used = gpu.values[("nvmlDeviceGetMemoryInfo_v2",)]
            return pynvml.c_nvmlMemory_v2_t(version=version, total=total, reserved=reserved, free=free, used=used)
        else:
            total, free, used = self._value("nvmlDeviceGetMemoryInfo", handle)
        return pynvml.c_nvmlMemory_t(total=total, free=free, used=used)

    def nvmlDeviceGetGridLicensableFeatures(self, handle: Any) -> Any:
        supported, features = self._value("nvmlDeviceGetGridLicensableFeatures", handle)
        out = pynvml.c_nvmlGridLicensableFeatures_v4_t()
        out.isGridLicenseSupported = supported
        out.licensableFeaturesCount = len(features)
        for slot, (code, state) in zip(out.gridLicensableFeatures, features, strict=False):
            slot.featureCode = code
            slot.featureState = state
        return out

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        return list(self._value("nvmlDeviceGetRetiredPages", device, sourceFilter))

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = self._value("nvmlDeviceGetRemappedRows", device)
        return (corr, unc, pending, failure)

    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        gpu = self._gpu("nvmlDeviceGetNvLinkErrorCounter", device, link, counter)
        if not 0 <= link < pynvml.NVML_NVLINK_MAX_LINKS:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        per_link = gpu.values.get(("nvlink", counter))
        if per_link is None or link >= len(per_link) or per_link[link] is None:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return int(per_link[link])

    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: Any) -> Any:
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle, tuple(fieldIds))
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for fv, requested in zip(values, fieldIds, strict=True):
            # An id alone, or (id, scope) as pynvml accepts; values are configured per id.
            field_id, fv.scopeId = requested if isinstance(requested, tuple) else (requested, 0)
            fv.fieldId = field_id
            fv.timestamp = self.now_us
            entry = gpu.values.get(("field", field_id))
            if entry is None:
                # The call succeeds; the unsupported entry carries its own return code.
                fv.nvmlReturn = NOT_SUPPORTED
                continue
            if entry[0] == "error":
                fv.nvmlReturn = entry[1]
                continue
            value_type, value = entry
            fv.nvmlReturn = pynvml.NVML_SUCCESS
            fv.valueType = value_type
            setattr(fv.value, _VALUE_MEMBER[value_type], value)
        return values

    # --- MIG: the error codes nvml.h gives for each call ----------------------------------

    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", device)
        if gpu.mig_mode is None:  # "If device doesn't support MIG mode"
            raise pynvml.NVMLError(NOT_SUPPORTED)
        return [gpu.mig_mode, gpu.mig_mode]  # [current, pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxMigDeviceCount", device)
        # "Returns zero if MIG is not supported or enabled."
        return MAX_MIG_DEVICES if gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", device, index)
        if gpu.mig_mode != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError(NOT_SUPPORTED)
        if not 0 <= index < MAX_MIG_DEVICES:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.mig) or gpu.mig[index] is None:  # "if no valid MIG device was found at index"
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return self._mig_handles[(self._index(device), index)]

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return self._mig("nvmlDeviceGetGpuInstanceId", device).gpu_instance_id

    # --- events -------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        self._need_init()
        self._record("nvmlEventSetCreate", None)
        self.event_set_freed = False
        return self._event_set

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu_index = self._index(handle)
        self._gpu("nvmlDeviceRegisterEvents", handle)
        if eventTypes & ~pynvml.nvmlEventTypeAll:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.registered.add(gpu_index)

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        return self._wait(timeoutms)

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        return self._wait(timeoutms)

    def _wait(self, timeoutms: int) -> Any:
        """Block like the real wait: an XID queued by the test, else Timeout."""
        self._need_init()
        if self.event_set_freed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        while True:
            try:
                item = self._events.get(timeout=timeoutms / 1000)
            except queue.Empty:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None
            if isinstance(item, int):
                raise pynvml.NVMLError(item)
            index, xid = item
            if index in self.registered:
                break
            # An unregistered GPU's XID never reaches this event set.
        data = pynvml.c_nvmlEventData_t()
        data.device = self._handles[index]
        data.eventType = pynvml.nvmlEventTypeXidCriticalError
        data.eventData = xid
        return data

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._record("nvmlEventSetFree", None)
        self.event_set_freed = True
