"""NVLink links and the fabric in the NVML test double.

Per-link state and error counters are FakeNvml's own (values ("nvmlDeviceGetNvLinkState",) and
("nvlink", counter), a list by link). `FakeFabricNvml` adds nvmlDeviceGetGpuFabricInfoV and the
deprecated nvmlDeviceGetGpuFabricInfo, filling the real c_nvmlGpuFabricInfoV_t / c_nvmlGpuFabricInfo_t
as the driver does. A GPU without a fabric answers NVML_ERROR_NOT_SUPPORTED, as an H100 PCIe or an
A100 without NVSwitch does on a driver that knows the call.
"""

from __future__ import annotations

import uuid
from typing import Any

import pynvml

from tests.collector.backends.fake_nvml import FakeGpu, FakeNvml, h100_values

p = pynvml
FABRIC = ("fabric",)
"""Key of a GPU's fabric: (state, status, clique id, cluster UUID string)."""
CLUSTER = "b8f3c2a1-5d4e-4f60-9a7b-0c1d2e3f4a5b"


def fabric(
    state: int = p.NVML_GPU_FABRIC_STATE_COMPLETED, status: int = p.NVML_SUCCESS, clique: int = 32766
) -> tuple[int, int, int, str]:
    """A fabric value; by default a GPU registered well, as on an HGX H100 with Fabric Manager running."""
    return (state, status, clique, CLUSTER)


def no_nvlink_values() -> dict[tuple[Any, ...], Any]:
    """An H100 PCIe without NVLink bridges: every per-link call answers NotSupported."""
    values = h100_values()
    for key in [
        k for k in values if k[0] in ("nvlink", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemoteDeviceType")
    ]:
        del values[key]
    return values


def nvswitch_gpu(index: int, **kw: Any) -> FakeGpu:
    """An HGX H100 GPU: 18 NVLink links to NVSwitches, registered with the fabric."""
    gpu = FakeGpu(
        uuid=f"GPU-{index:08x}-0000-0000-0000-000000000000", pci_bus_id=f"00000000:{0x18 + index:02X}:00.0", **kw
    )
    gpu.values[FABRIC] = fabric()
    return gpu


class FakeFabricNvml(FakeNvml):
    """FakeNvml that also answers the fabric calls."""

    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int:
        return self._fill("nvmlDeviceGetGpuFabricInfoV", device, gpuFabricInfo)

    def nvmlDeviceGetGpuFabricInfo(self, device: Any, gpuFabricInfo: Any) -> int:
        return self._fill("nvmlDeviceGetGpuFabricInfo", device, gpuFabricInfo)

    def _fill(self, fn: str, device: Any, ref: Any) -> int:
        gpu = self._gpu(fn, device)
        if FABRIC not in gpu.values:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        state, status, clique, cluster = gpu.values[FABRIC]
        info = getattr(ref, "_obj", ref)  # ctypes.byref(struct) -> the struct
        info.state = state
        info.status = status
        info.cliqueId = clique
        info.clusterUuid[:] = list(uuid.UUID(cluster).bytes)
        return int(pynvml.NVML_SUCCESS)
