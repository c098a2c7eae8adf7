"""The one interface every telemetry backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from core.catalog import Field
from kernels.runner import ProbeResult


class BackendError(RuntimeError):
    """A backend could not start or read; the message is one line an operator can act on."""


class BackendUnavailable(BackendError):
    """The library a backend needs (NVML, DCGM) is not installed or does not load."""


@dataclass(frozen=True)
class GpuInfo:
    """Identity of one GPU, as discovered at start."""

    index: int
    uuid: str
    model_name: str
    hostname: str
    pci_bus_id: str = ""
    serial: str = ""
    driver_version: str = ""


@dataclass(frozen=True)
class MigInstance:
    """One MIG GPU instance of a GPU: dcgm-exporter's GPU_I_ID and GPU_I_PROFILE labels."""

    gpu_instance_id: int
    """The GPU instance ID (nvmlDeviceGetGpuInstanceId), unique within its GPU."""
    profile: str
    """The GPU instance profile, e.g. "1g.10gb" ("" when the driver does not say)."""
    uuid: str = ""
    """The MIG device's UUID ("MIG-..."): what the Kubernetes device plugin hands to pods."""


@dataclass
class MigReading:
    """One MIG instance's values at one sample: only the fields that exist per instance (memory)."""

    instance: MigInstance
    values: dict[str, float] = field(default_factory=dict)


@dataclass
class GpuReading:
    """One GPU's values at one sample; a field the GPU does not support is absent."""

    info: GpuInfo
    values: dict[str, float] = field(default_factory=dict)
    lost: bool = False
    error: str | None = None
    """Why the GPU is lost or a read failed, for logs and /healthz."""
    mig: list[MigReading] = field(default_factory=list)
    """Its MIG instances when MIG is on; health, risk and decisions stay with the GPU itself."""
    rail: str = ""
    """Its InfiniBand/RoCE ports as `device/port` ("mlx5_3/1", core.infiniband.rail_name); "" when none is
    tied to it. Set by the rails augmenter (collector.infiniband.RailCounts) or a simulated fleet."""


@dataclass(frozen=True)
class XidEvent:
    """One XID error reported by the driver."""

    gpu_uuid: str
    xid: int
    timestamp: float


@dataclass(frozen=True)
class CommonOptions:
    """What every backend is opened with; each backend's own options are its own dataclass."""

    hostname: str
    fields: Sequence[Field]
    interval_s: float


class ProbeRunner(Protocol):
    """Runs probes on one GPU; never raises for the GPU's trouble (errors become results)."""

    name: str

    def run(self, gpu: GpuInfo, tests: Sequence[str], budget_s: float) -> list[ProbeResult]:
        """One result per test, in order."""
        ...


@runtime_checkable
class Backend(Protocol):
    """A source of GPU telemetry: NVML, DCGM, the simulator or a recorded history."""

    name: str

    def gpus(self) -> list[GpuInfo]:
        """The GPUs found at start (lost ones included)."""
        ...

    def read(self) -> list[GpuReading]:
        """One reading per GPU; never raises for a single GPU's trouble."""
        ...

    def drain_xid_events(self) -> list[XidEvent]:
        """XID events seen since the last call, oldest first."""
        ...

    def data_time(self) -> float | None:
        """The time the latest reading describes (epoch seconds) for a backend with its own
        clock (sim, replay); None: readings are as of the wall clock when they were read."""
        ...

    def probe_runner(self) -> ProbeRunner | None:
        """The runner that probes these GPUs; None: they cannot be probed."""
        ...

    def close(self) -> None:
        """Release the library and stop background threads."""
        ...


class GpuLostError(BackendError):
    """The GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST): it cannot be read or reset."""


class ResetFailed(BackendError):
    """A GPU reset ran and did not succeed; the message is the tool's own one line."""


Generation = Literal["pre-ampere", "ampere", "hopper+", "unknown"]
"""Where a GPU stands in nvidia-smi's reset rules: individual reset of NVLink GPUs began with Ampere;
Ampere NVSwitch systems still need Fabric Manager for it, Hopper and later do not."""


@dataclass(frozen=True)
class ResetFacts:
    """What the driver says about one GPU just before a reset: its processes and its NVLink topology."""

    processes: tuple[int, ...]
    """PIDs of the compute and graphics processes on it."""
    generation: Generation
    nvlink: bool
    """It has an active NVLink link (to a GPU or an NVSwitch)."""
    nvswitch: bool
    """Its NVLink links go to NVSwitches (an HGX/DGX baseboard)."""


@runtime_checkable
class Resettable(Protocol):
    """A backend that can reset its GPUs: what `collector.remedy.Resetter` asks of it."""

    def gpus(self) -> list[GpuInfo]:
        """The GPUs found at start."""
        ...

    def reset_facts(self, gpu: GpuInfo) -> ResetFacts:
        """Processes and topology of `gpu`; GpuLostError when it is off the bus, BackendError when
        the driver cannot say (a reset must then not run)."""
        ...

    def reset_gpu(self, gpu: GpuInfo) -> str:
        """Reset `gpu` now and say what the tool said; ResetFailed (or GpuLostError) when it did not happen."""
        ...
