"""NVML readers for the fields DCGM derives from NVML, computed the way DCGM computes them.

- Framebuffer memory from nvmlDeviceGetMemoryInfo_v2 (DCGM does so from driver r510 on): `used`
  leaves the reserved memory out, which is DCGM_FI_DEV_FB_RESERVED. An older driver lacks the call
  (NVML_ERROR_FUNCTION_NOT_FOUND): v1, whose `used` includes the reserved memory, and no reserved.
- DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL (449): DCGM sums NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX and _TX
  for all links (scope UINT_MAX), KiB counters, and publishes the difference since its previous read
  per second, divided by 1000 (DcgmCacheManager::ReadAndCacheNvLinkBandwidth). The first read has
  no previous one: absent here (DCGM publishes 0).
- DCGM_FI_PROF_PCIE_TX/RX_BYTES (1009/1010) are bytes per second from DCGM's profiling module; NVML
  offers nvmlDeviceGetPcieThroughput, the same bytes counted over 20 ms, in KB/s: times 1024.
- DCGM_FI_DEV_VGPU_LICENSE_STATUS (526): nvmlDeviceGetGridLicensableFeatures; 0 without vGPU
  licensing, else the vGPU feature's state (1 licensed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collector.backends.nvml import _GpuCalls

DerivedReader = Callable[["_GpuCalls"], float | None]

ALL_LINKS = 0xFFFFFFFF
"""The scope id that asks NVML for the sum over every NVLink of the GPU (DCGM passes UINT_MAX)."""
KIB_PER_S_TO_MB_PER_S = 1000.0
"""DCGM divides the KiB/s by 1000 and calls the result MB/s; the catalogue keeps DCGM's number."""
NVML_KB = 1024
"""nvmlDeviceGetPcieThroughput's KB, taken as NVML's KiB elsewhere (its field ids say "in KiB")."""


def memory_reader(nvml: Any) -> Callable[[_GpuCalls], Any]:
    """The GPU's memory info: the v2 structure (with `reserved`) where the driver has it, else v1."""
    n = nvml
    v2 = getattr(n, "nvmlMemory_v2", None)
    codes = ("NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_NOT_SUPPORTED")
    no_v2 = frozenset(getattr(n, name) for name in codes if hasattr(n, name))

    def memory(c: _GpuCalls) -> Any:
        if v2 is not None:
            try:
                return c("nvmlDeviceGetMemoryInfo", v2)
            except n.NVMLError as err:
                if err.value not in no_v2:
                    raise
        return c("nvmlDeviceGetMemoryInfo")

    return memory


def derived_readers(nvml: Any) -> dict[str, DerivedReader]:
    """Catalogue short name -> reader for the fields above (a constant this pynvml lacks: no reader)."""
    n = nvml
    memory = memory_reader(n)
    mib = 1024 * 1024
    readers: dict[str, DerivedReader] = {
        "fb_reserved_mib": lambda c: _reserved(memory(c), mib),
        "pcie_tx_bytes_per_s": lambda c: c("nvmlDeviceGetPcieThroughput", n.NVML_PCIE_UTIL_TX_BYTES) * NVML_KB,
        "pcie_rx_bytes_per_s": lambda c: c("nvmlDeviceGetPcieThroughput", n.NVML_PCIE_UTIL_RX_BYTES) * NVML_KB,
    }
    rx = getattr(n, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
    tx = getattr(n, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
    if rx is not None and tx is not None:
        readers["nvlink_bandwidth_mbps"] = NvlinkBandwidth(n, rx, tx)
    vgpu = getattr(n, "NVML_GRID_LICENSE_FEATURE_CODE_VGPU", None)
    if vgpu is not None:
        readers["vgpu_license_status"] = lambda c: _vgpu_licensed(c("nvmlDeviceGetGridLicensableFeatures"), vgpu)
    return readers


def _reserved(info: Any, mib: int) -> float | None:
    reserved = getattr(info, "reserved", None)  # v1 (a driver before r510) has none
    return None if reserved is None else reserved / mib


def _vgpu_licensed(features: Any, vgpu_code: int) -> float | None:
    if not features.isGridLicenseSupported:
        return 0.0
    for i in range(features.licensableFeaturesCount):
        feature = features.gridLicensableFeatures[i]
        if feature.featureCode == vgpu_code:
            return 1.0 if feature.featureState > 0 else 0.0
    return None  # licensing, but not of vGPU: DCGM publishes nothing either


class NvlinkBandwidth:
    """DCGM's NVLINK_BANDWIDTH_TOTAL from NVML: (RX + TX data KiB, all links) per second since the last read, / 1000."""

    def __init__(self, nvml: Any, rx_field: int, tx_field: int) -> None:
        self._n = nvml
        self._ids = ((rx_field, ALL_LINKS), (tx_field, ALL_LINKS))
        self._last: dict[str, tuple[int, int]] = {}
        """Per GPU UUID: (KiB total, microseconds) at its previous read."""

    def __call__(self, c: _GpuCalls) -> float | None:
        n = self._n
        values = c("nvmlDeviceGetFieldValues", self._ids)
        total, stamp = 0, 0
        for v in values:
            if v.nvmlReturn != n.NVML_SUCCESS:  # NOT_SUPPORTED without NVLink: the field is absent
                raise n.NVMLError(v.nvmlReturn)
            total += int(v.value.ullVal)  # DCGM reads ullVal: nvml.h types both fields unsigned long long
            stamp = max(stamp, int(v.timestamp))
        stamp = stamp or int(time.time() * 1_000_000)
        previous = self._last.get(c.gpu.info.uuid)
        self._last[c.gpu.info.uuid] = (total, stamp)
        if previous is None or stamp <= previous[1] or total < previous[0]:
            return None  # no earlier read, or the counters restarted (driver reload)
        return (total - previous[0]) / ((stamp - previous[1]) / 1e6) / KIB_PER_S_TO_MB_PER_S
