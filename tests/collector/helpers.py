"""Small stand-in backends for collector tests (not GPU library doubles)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from prometheus_client.registry import CollectorRegistry

from collector.backends.base import GpuInfo, GpuReading, MigReading, ProbeRunner, XidEvent
from collector.exporter import GpuCollector, SelfCollector
from collector.probes import SubprocessProbeRunner
from core import catalog
from core.labels import HOSTNAME

if TYPE_CHECKING:
    from collector.sampler import Sampler
    from core.catalog import Field


def info(index: int, host: str = "node-a") -> GpuInfo:
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index:08d}-test",
        model_name="NVIDIA H100 80GB HBM3",
        hostname=host,
        pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
    )


class ScriptedBackend:
    """Returns readings a test sets; can fail, hang or emit XID events on demand."""

    name = "scripted"

    def __init__(self, n: int = 2) -> None:
        self.infos = [info(i) for i in range(n)]
        self.values: dict[int, dict[str, float]] = {i: {"gpu_temp_c": 40.0 + i} for i in range(n)}
        self.lost: set[int] = set()
        self.mig: dict[int, list[MigReading]] = {}
        """MIG instances a GPU reports (by GPU index)."""
        self.events: list[XidEvent] = []
        self.fail_with: Exception | None = None
        self.gate: threading.Event | None = None  # when set to an unset Event, read() hangs
        self.reads = 0
        self.closed = False

    def gpus(self) -> list[GpuInfo]:
        return list(self.infos)

    def read(self) -> list[GpuReading]:
        if self.gate is not None:
            self.gate.wait()
        self.reads += 1
        if self.fail_with is not None:
            raise self.fail_with
        return [
            GpuReading(
                i_, {} if i in self.lost else dict(self.values[i]), lost=i in self.lost,
                mig=[] if i in self.lost else list(self.mig.get(i, [])),
            )
            for i, i_ in enumerate(self.infos)
        ]  # fmt: skip

    def drain_xid_events(self) -> list[XidEvent]:
        ev, self.events = self.events, []
        return ev

    def data_time(self) -> None:
        return None  # stands in for live GPUs: readings are as of the wall clock

    def probe_runner(self) -> ProbeRunner:
        return SubprocessProbeRunner()  # as real GPUs: the CUDA child process

    def close(self) -> None:
        self.closed = True


class FakeClock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def gpu_labels(b: ScriptedBackend, i: int, host_label: str = HOSTNAME, **extra: str) -> dict[str, str]:
    """The labels of GPU `i`'s series as the exporter writes them (dcgm-exporter's), plus `extra`."""
    inf = b.infos[i]
    return {
        "gpu": str(i), "UUID": inf.uuid, "device": f"nvidia{i}", "modelName": inf.model_name,
        "pci_bus_id": inf.pci_bus_id, host_label: inf.hostname, **extra,
    }  # fmt: skip


def registry(
    sampler: Sampler, fields: Sequence[Field] | None = None, host_label: str = HOSTNAME, *, health: bool = False
) -> CollectorRegistry:
    """A registry with the GPU collector over `sampler` (all fields by default), and with `health` the
    scrape-health collector (gpuhealth_collector_success...)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(GpuCollector(lambda: sampler.latest, fields or catalog.select("all"), host_label))
    if health:
        reg.register(SelfCollector(sampler))
    return reg
