"""The `sim` backend: a simulated fleet (simulator.fleet) served as if it were real GPUs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from collector.backends.base import CommonOptions, GpuInfo, GpuReading, ProbeRunner, XidEvent
from collector.probes import SimProbeRunner
from simulator.fleet import FaultSpec, FleetSim, SimConfig
from simulator.models import DEFAULT_MODEL


@dataclass(frozen=True)
class SimOptions:
    """The `sim` backend's options (the --sim-* flags)."""

    nodes: int = 1
    gpus_per_node: int = 8
    seed: int = 0
    model: str | None = None
    """GPU model name; None: the simulator's default."""
    speed: float = 1.0
    """Simulated seconds per real second: each read steps interval x speed."""
    faults: Sequence[FaultSpec] = ()
    start: float | None = None
    """Simulated start time (epoch seconds); None: the simulator's fixed start."""
    spare_nodes: int = 0


class SimBackend:
    """Each `read()` advances the simulation by `step_s` simulated seconds."""

    name = "sim"

    def __init__(
        self,
        nodes: int = 1,
        gpus_per_node: int = 8,
        seed: int = 0,
        step_s: float = 10.0,
        model: str = DEFAULT_MODEL,
        faults: Sequence[FaultSpec] = (),
        driver_version: str = "570.124.06",
        start: float | None = None,
        spare_nodes: int = 0,
    ) -> None:
        if step_s <= 0:
            raise ValueError("simulated step must be positive")
        cfg = SimConfig(
            nodes=nodes, gpus_per_node=gpus_per_node, seed=seed, models={model: 1.0}, spare_nodes=spare_nodes
        )
        if start is not None:  # default: a fixed start, so a seed gives the same values everywhere
            cfg = replace(cfg, start=start)
        self.fleet = FleetSim(cfg)
        self.step_s = step_s
        for f in faults:
            self.fleet.inject(f)
        self.driver_version = driver_version
        self._infos = self._identities()
        self._repairs = self.fleet.repairs

    def _identities(self) -> list[GpuInfo]:
        return [
            GpuInfo(
                index=g.index,
                uuid=g.uuid,
                model_name=g.model.name,
                hostname=g.node,
                pci_bus_id=g.pci_bus_id,
                serial=g.serial,
                driver_version=self.driver_version,
            )
            for g in self.fleet.gpus
        ]

    def data_time(self) -> float:
        """Simulated time of the latest reading (epoch seconds)."""
        return float(self.fleet.time)

    def probe_runner(self, seed: int = 0) -> ProbeRunner:
        """Probe results derived from the simulated fleet, deterministic per `seed`."""
        return SimProbeRunner(self.fleet, seed)

    def gpus(self) -> list[GpuInfo]:
        return list(self._infos)

    def read(self) -> list[GpuReading]:
        self.fleet.step(self.step_s)
        if self.fleet.repairs != self._repairs:  # a repaired slot holds a new GPU (new UUID)
            self._repairs = self.fleet.repairs
            self._infos = self._identities()
        cols = self.fleet.values()
        out = []
        for i, info in enumerate(self._infos):
            if self.fleet.lost[i]:
                out.append(GpuReading(info, {}, lost=True, error="GPU has fallen off the bus (XID 79)"))
            else:
                out.append(GpuReading(info, {k: float(v[i]) for k, v in cols.items()}))
        return out

    def drain_xid_events(self) -> list[XidEvent]:
        return [XidEvent(self._infos[i].uuid, code, t) for i, code, t in self.fleet.drain_events()]

    def busy_reason(self, uuid: str, util_threshold_pct: float = 5.0) -> str | None:
        """Why simulated GPU `uuid` is not idle (its simulated utilisation), or None when it is."""
        i = next((k for k, g in enumerate(self._infos) if g.uuid == uuid), None)
        if i is None or self.fleet.lost[i] or self.fleet.failed[i]:
            return f"GPU {uuid} is lost or unknown"
        util = float(self.fleet.util[i])
        if util >= util_threshold_pct:
            return f"utilisation {util:.0f}% >= {util_threshold_pct:g}%"
        return None

    def close(self) -> None:
        return None


def open_sim(options: SimOptions, common: CommonOptions) -> SimBackend:
    """A simulated fleet stepped by one sampling interval (times `speed`) per read."""
    return SimBackend(
        nodes=options.nodes,
        gpus_per_node=options.gpus_per_node,
        seed=options.seed,
        step_s=common.interval_s * options.speed,
        model=options.model or DEFAULT_MODEL,
        faults=options.faults,
        start=options.start,
        spare_nodes=options.spare_nodes,
    )
