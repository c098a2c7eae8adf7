"""NVLink links one by one, and the GPU's registration with the NVLink fabric, from NVML.

Each link's state (nvmlDeviceGetNvLinkState) and its four data-link error counters
(nvmlDeviceGetNvLinkErrorCounter: CRC flit, CRC data, replay, recovery); the fabric from
nvmlDeviceGetGpuFabricInfoV (nvidia-ml-py 12.535+, driver R535+), else the deprecated
nvmlDeviceGetGpuFabricInfo. A link NVML does not know answers NotSupported or InvalidArgument and
is absent; a GPU without a fabric answers NotSupported, or state NVML_GPU_FABRIC_STATE_NOT_SUPPORTED.
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from collector.backends.base import BackendError, GpuInfo, GpuLostError
from collector.backends.nvml_common import codes, link_absent_codes, one_line
from core.nvlink import COUNTERS, FABRIC_COMPLETED, NVML_SUCCESS


@dataclass(frozen=True)
class LinkReading:
    """One NVLink link of a GPU: up or down, and its error counters (absent ones left out)."""

    link: int
    up: bool
    counters: dict[str, int]
    """NVML_NVLINK_ERROR_* name -> count since the driver loaded."""


@dataclass(frozen=True)
class FabricReading:
    """A GPU's registration with the NVLink fabric (nvmlGpuFabricInfo_t)."""

    state: int
    """NVML_GPU_FABRIC_STATE_*: 1 not started, 2 in progress, 3 completed."""
    status: int
    """The registration's nvmlReturn_t: NVML_SUCCESS once it completed well."""
    clique_id: int
    cluster_uuid: str


@dataclass(frozen=True)
class GpuLinks:
    """What one GPU says about its links and fabric at one read."""

    info: GpuInfo
    links: list[LinkReading]
    fabric: FabricReading | None


def _state(nvml: Any, handle: Any, link: int) -> bool | None:
    """The link's state; None for a link NVML does not know."""
    try:
        return bool(nvml.nvmlDeviceGetNvLinkState(handle, link) == nvml.NVML_FEATURE_ENABLED)
    except nvml.NVMLError as err:
        if err.value in link_absent_codes(nvml):
            return None
        raise


def _counters(nvml: Any, handle: Any, link: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in COUNTERS:
        kind = getattr(nvml, name, None)
        if kind is None:
            continue
        try:
            out[name] = int(nvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, kind))
        except nvml.NVMLError as err:
            if err.value in link_absent_codes(nvml):
                continue  # a link that is down may not count; Blackwell dropped some counters
            raise
    return out


def read_links(nvml: Any, handle: Any, known: Sequence[int] | None = None) -> list[LinkReading]:
    """Every link of the GPU NVML knows: `known` (links found before) or 0..NVML_NVLINK_MAX_LINKS-1."""
    candidates = range(nvml.NVML_NVLINK_MAX_LINKS) if known is None else known
    out = []
    for link in candidates:
        up = _state(nvml, handle, link)
        if up is not None:
            out.append(LinkReading(link, up, _counters(nvml, handle, link)))
    return out


def _fabric_struct(nvml: Any, handle: Any) -> Any:
    """The filled fabric struct, by the versioned call where this pynvml and driver have it."""
    versioned = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    if versioned is not None and hasattr(nvml, "c_nvmlGpuFabricInfoV_t"):
        info = nvml.c_nvmlGpuFabricInfoV_t()
        try:
            versioned(handle, ctypes.byref(info))
            return info
        except nvml.NVMLError as err:
            if err.value not in codes(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND"):
                raise  # an older driver lacks the V call: the plain one below
    info = nvml.c_nvmlGpuFabricInfo_t()
    nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    return info


def read_fabric(nvml: Any, handle: Any) -> FabricReading | None:
    """The GPU's fabric registration; None on a GPU (or pynvml, or driver) without a fabric."""
    if not hasattr(nvml, "nvmlDeviceGetGpuFabricInfo") or not hasattr(nvml, "c_nvmlGpuFabricInfo_t"):
        return None
    try:
        info = _fabric_struct(nvml, handle)
    except nvml.NVMLError as err:
        if err.value in codes(nvml, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"):
            return None
        raise
    if int(info.state) == nvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return None
    cluster = str(uuid.UUID(bytes=bytes(info.clusterUuid)))
    return FabricReading(int(info.state), int(info.status), int(info.cliqueId), cluster)


class NvmlLinks:
    """Reads the links and fabric of an NVML backend's GPUs (collector.nvlink.NvlinkCollector's source).

    `device(index)` is NvmlBackend.device: (the pynvml module, the handle), GpuLostError when lost.
    The links a GPU has are found once (36 calls) and remembered: NVLink topology is fixed while
    the driver is loaded.
    """

    def __init__(self, gpus: Callable[[], list[GpuInfo]], device: Callable[[int], tuple[Any, Any]]) -> None:
        self._gpus = gpus
        self._device = device
        self._known: dict[str, list[int]] = {}

    def read(self) -> list[GpuLinks]:
        """Every GPU's links and fabric; a lost GPU is left out, other NVML errors raise BackendError."""
        out = []
        for info in self._gpus():
            try:
                nvml, handle = self._device(info.index)
            except GpuLostError:
                continue
            try:
                links = read_links(nvml, handle, self._known.get(info.uuid))
                fabric = read_fabric(nvml, handle)
            except nvml.NVMLError as err:
                if err.value in codes(nvml, "NVML_ERROR_GPU_IS_LOST"):
                    continue
                raise BackendError(f"reading the NVLink links of GPU {info.index}: {one_line(err)}") from err
            self._known.setdefault(info.uuid, [r.link for r in links])
            out.append(GpuLinks(info, links, fabric))
        return out


def links_of(backend: object) -> NvmlLinks | None:
    """The link reader of an NVML backend (one with `gpus()` and `device(index)`); None for any other."""
    gpus, device = getattr(backend, "gpus", None), getattr(backend, "device", None)
    if not callable(gpus) or not callable(device):
        return None
    return NvmlLinks(gpus, device)


FABRIC_FAILED = 4
"""`gpu_fabric_state` of a registration NVML calls completed with an error status (core.catalog's enum)."""


def fabric_state(reading: FabricReading) -> int:
    """The catalogue's `gpu_fabric_state`: NVML's state, but 4 for one completed with an error status."""
    if reading.state == FABRIC_COMPLETED and reading.status != NVML_SUCCESS:
        return FABRIC_FAILED
    return reading.state


class LinkFields:
    """Readers of the catalogue fields `nvlink_links_down` and `gpu_fabric_state` on the nvml backend.

    Each GPU's links are found once (as NvmlLinks does) and remembered by UUID; a GPU without NVLink
    or without a fabric gives None: the field is absent.
    """

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._known: dict[str, list[int]] = {}

    def readers(self) -> dict[str, Callable[[Any], float | None]]:
        """Catalogue short name -> reader of an nvml `_GpuCalls` (none where this pynvml lacks the calls)."""
        out: dict[str, Callable[[Any], float | None]] = {}
        if hasattr(self._nvml, "nvmlDeviceGetNvLinkState") and hasattr(self._nvml, "NVML_FEATURE_ENABLED"):
            out["nvlink_links_down"] = self.links_down
        if hasattr(self._nvml, "nvmlDeviceGetGpuFabricInfo"):
            out["gpu_fabric_state"] = self.fabric
        return out

    def links_down(self, calls: Any) -> float | None:
        """How many of the GPU's links are down; None without NVLink."""
        uuid_ = calls.gpu.info.uuid
        known = self._known.get(uuid_)
        candidates = range(self._nvml.NVML_NVLINK_MAX_LINKS) if known is None else known
        states = {link: _state(self._nvml, calls.handle, link) for link in candidates}
        links = [link for link, up in states.items() if up is not None]
        self._known.setdefault(uuid_, links)
        return float(sum(not states[link] for link in links)) if links else None

    def fabric(self, calls: Any) -> float | None:
        """The GPU's `gpu_fabric_state`; None without a fabric."""
        reading = read_fabric(self._nvml, calls.handle)
        return None if reading is None else float(fabric_state(reading))
