"""The `sim` backend: a simulated fleet (simulator.fleet) served as if it were real GPUs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from collector.backends.base import (
    BackendError,
    CommonOptions,
    GpuInfo,
    GpuLostError,
    GpuReading,
    ProbeRunner,
    ResetFacts,
    XidEvent,
)
from collector.backends.nvml_links import FabricReading, GpuLinks, LinkReading
from core.nvlink import COUNTERS, NVML_SUCCESS
from kernels import expected as exp
from kernels.runner import ProbeResult, judge
from simulator.fleet import FaultMode, FaultSpec, FleetSim, SimConfig
from simulator.kernel_log import driver_line
from simulator.models import DEFAULT_MODEL

SIM_PID = 100_000
"""The simulated process on a busy simulated GPU has pid SIM_PID + its index."""
HUNG = {"reason": "GSP not responding (XID 119): the GPU needs a reset", "simulated": True}
"""A probe's details on a GPU whose GSP stopped answering (CUDA cannot start a context there)."""


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
    kernel_log: str = ""
    """A directory to write each node's kernel log to, /dev/kmsg's records (collector.kernel_log reads them);
    "": none."""


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
        refault_share: float | None = None,
        kernel_log: Path | None = None,
    ) -> None:
        if step_s <= 0:
            raise ValueError("simulated step must be positive")
        cfg = SimConfig(
            nodes=nodes, gpus_per_node=gpus_per_node, seed=seed, models={model: 1.0}, spare_nodes=spare_nodes
        )
        if refault_share is not None:  # default: SimConfig's, from a public trace (simulator.remedies)
            cfg = replace(cfg, refault_share=refault_share)
        if start is not None:  # default: a fixed start, so a seed gives the same values everywhere
            cfg = replace(cfg, start=start)
        self.fleet = FleetSim(cfg)
        self.seed = seed
        self.step_s = step_s
        for f in faults:
            self.fleet.inject(f)
        self.driver_version = driver_version
        self._infos = self._identities()
        self._repairs = self.fleet.repairs
        self.kernel_logs: dict[str, Path] = {}
        """Hostname -> the file its driver's kernel log is written to (/dev/kmsg's records); {}: none."""
        self._kmsg_seq: dict[str, int] = {}
        if kernel_log is not None:  # a new simulated boot: each node's ring starts empty, its sequence at 0
            self.fleet.klog.keep = True
            Path(kernel_log).mkdir(parents=True, exist_ok=True)
            for host in sorted({g.hostname for g in self._infos}):
                self.kernel_logs[host] = Path(kernel_log) / f"{host}.kmsg"
                self.kernel_logs[host].write_text("")

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

    def probe_runner(self, seed: int | None = None) -> ProbeRunner:
        """Probe results derived from the simulated fleet, deterministic per `seed` (default: the fleet's)."""
        return SimProbeRunner(self.fleet, self.seed if seed is None else seed)

    def gpus(self) -> list[GpuInfo]:
        return list(self._infos)

    def read(self) -> list[GpuReading]:
        self.fleet.step(self.step_s)
        if self.fleet.repairs != self._repairs:  # a repaired slot holds a new GPU (new UUID)
            self._repairs = self.fleet.repairs
            self._infos = self._identities()
        self._write_kernel_log()
        cols = self.fleet.values()
        rails = self.fleet.fabric.rails(self.fleet)  # the NIC on each GPU's rail, as RailCounts names it
        out = []
        for i, info in enumerate(self._infos):
            if self.fleet.lost[i]:
                out.append(GpuReading(info, {}, lost=True, error="GPU has fallen off the bus (XID 79)"))
            else:
                out.append(GpuReading(info, {k: float(v[i]) for k, v in cols.items()}, rail=rails[i]))
        return out

    def _write_kernel_log(self) -> None:
        """Append the XIDs the driver logged this step to their node's log, as /dev/kmsg hands records out
        (`prio,seq,usec,-;message`): every one NVML delivers and those it does not (simulator.kernel_log)."""
        logged = self.fleet.klog.drain()
        if not self.kernel_logs or not logged:
            return
        lines: dict[str, list[str]] = {}
        for i, code, t in logged:
            g = self.fleet.gpus[i]
            seq = self._kmsg_seq.get(g.node, 0)
            self._kmsg_seq[g.node] = seq + 1
            usec = int((t - self.fleet.cfg.start) * 1e6)  # since the simulated boot
            lines.setdefault(g.node, []).append(f"3,{seq},{usec},-;{driver_line(g.pci_bus_id, g.index, code)}\n")
        for host, text in lines.items():
            with open(self.kernel_logs[host], "a") as f:
                f.writelines(text)

    def read_links(self) -> list[GpuLinks]:
        """Each GPU's NVLink links and fabric registration now, as NVML answers on the simulated node
        (simulator.fabric): the model's links (18 on an H100), its CRC flit count split over them; none on
        a node without a fabric (NOT_SUPPORTED) nor for a GPU off the bus, as collector.backends.nvml_links."""
        out = []
        for i, (info, fab) in enumerate(zip(self._infos, self.fleet.fabric.links(self.fleet), strict=True)):
            if fab is None or self.fleet.lost[i]:
                continue
            crc = "NVML_NVLINK_ERROR_DL_CRC_FLIT"
            links = [
                LinkReading(k, up, {name: n if name == crc else 0 for name in COUNTERS})
                for k, (up, n) in enumerate(zip(fab.up, fab.crc_flit, strict=True))
            ]
            out.append(GpuLinks(info, links, FabricReading(fab.state, NVML_SUCCESS, fab.clique_id, fab.cluster_uuid)))
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

    def reset_facts(self, gpu: GpuInfo, util_threshold_pct: float = 5.0) -> ResetFacts:
        """A simulated GPU busier than the threshold runs one (simulated) process, pid SIM_PID + its index;
        the simulated GPUs stand alone (no NVLink), so each can be reset by itself."""
        i = self._position(gpu)
        busy = float(self.fleet.util[i]) >= util_threshold_pct
        pids = (SIM_PID + gpu.index,) if busy else ()
        return ResetFacts(processes=pids, generation="hopper+", nvlink=False, nvswitch=False)

    def reset_gpu(self, gpu: GpuInfo) -> str:
        """As a reset does (`FleetSim.reset`): the volatile ECC counters restart, a pending row remap is
        applied, the recovery action goes back to none; a fault a reset cures is gone (a share comes back
        later), one that persists goes on. GpuLostError when the GPU is off the bus."""
        self.fleet.reset(self._position(gpu))
        return f"simulated GPU {gpu.index} was reset"

    def _position(self, gpu: GpuInfo) -> int:
        """The fleet position of `gpu`; GpuLostError when it is off the bus (or failed)."""
        i = next((k for k, g in enumerate(self._infos) if g.uuid == gpu.uuid), None)
        if i is None:
            raise BackendError(f"no simulated GPU {gpu.uuid}")
        if self.fleet.lost[i] or self.fleet.failed[i]:
            raise GpuLostError(f"simulated GPU {gpu.index} ({gpu.uuid}) has fallen off the bus (XID 79)")
        return i

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
        kernel_log=Path(options.kernel_log) if options.kernel_log else None,
    )


class SimProbeRunner:
    """Plausible probe results from a simulated fleet, instantly and deterministically per seed.

    Each GPU gets a fixed "silicon lottery" factor (sd 1.5 %) and each run a little noise;
    a cooling fault heats the GPU into slowdown under the probe's load (GEMM and bandwidth
    slower: 20 % a third of the way to failure, 40 % at it); an ECC fault flips memtest bits once it is under way;
    a downtrained PCIe link halves (or more) the host<->device rate; a GPU whose GSP stopped answering
    (the `gsp-reset` fault, until a reset) runs no probe at all: each errors.
    """

    name = "sim"

    def __init__(self, fleet: FleetSim, seed: int = 0) -> None:
        self.fleet = fleet
        self.seed = seed
        self._runs: Counter[str] = Counter()

    def run(self, gpu: GpuInfo, tests: Sequence[str], budget_s: float) -> list[ProbeResult]:
        fl = self.fleet
        i = next((k for k, g in enumerate(fl.gpus) if g.uuid == gpu.uuid), None)
        if i is None:
            return [ProbeResult(t, "error", details={"reason": f"no simulated GPU {gpu.uuid}"}) for t in tests]
        if fl.remedies.hung[i]:
            return [
                ProbeResult(
                    t, "error", gpu_index=gpu.index, gpu_uuid=gpu.uuid, model_name=gpu.model_name, details=dict(HUNG)
                )
                for t in tests
            ]
        run_no = self._runs[gpu.uuid]
        self._runs[gpu.uuid] += 1
        lottery = 1.0 + 0.015 * float(np.random.default_rng([self.seed, i]).standard_normal())
        rng = np.random.default_rng([self.seed, i, run_no])
        # FleetSim codes fault modes 1.. in FaultMode's order (0 = healthy).
        code = int(fl.fault_mode[i])
        mode = list(FaultMode)[code - 1] if code > 0 else None
        p = float(fl.progress()[i])
        heat = 1.0 - (0.4 * p**0.5 if mode == FaultMode.THERMAL else 0.0) - (0.03 if fl.hot_node[i] else 0.0)
        link = (fl.link_width[i] / fl.m["pcie_width_max"][i]) * 2.0 ** (fl.link_gen[i] - fl.m["pcie_gen_max"][i])
        weights = [exp.WEIGHTS[t] for t in tests]
        out = []
        for t, w in zip(tests, weights, strict=True):
            r = ProbeResult(t, "pass", gpu_index=gpu.index, gpu_uuid=gpu.uuid, model_name=gpu.model_name)
            r.duration_s = round(budget_s * w / sum(weights) * float(rng.uniform(0.8, 0.95)), 2)
            want = exp.expected(gpu.model_name, t)
            noise = 1.0 + 0.01 * float(rng.standard_normal())
            if t == "memtest":
                flips = int(rng.poisson(2.0 + 40.0 * (p - 0.3))) if mode == FaultMode.ECC and p > 0.3 else 0
                r.value, r.errors = float(flips), flips
                r.details = {"bytes_tested": int(fl.m["fb_total_mib"][i] * 0.85 * 2**20), "simulated": True}
            elif want is None:
                r = ProbeResult(t, "skipped", gpu_index=gpu.index, gpu_uuid=gpu.uuid, model_name=gpu.model_name)
                r.details = {"reason": f"no expected values for {gpu.model_name!r}"}
            else:
                factor = {"gemm": heat, "gemm_fp32": heat, "bandwidth": 1.0 - 0.4 * (1.0 - heat), "pcie": link}[t]
                r.value = round(want * 1.02 * lottery * factor * noise, 2)
                r.errors = 0
                r.details = {"simulated": True}
            out.append(judge(r, gpu.model_name))
        return out
