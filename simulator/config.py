"""What a simulated fleet is made of: its configuration, fault modes and injected faults,
the XID codes and throttle bits it reports, and the records it produces (GPU identities,
failure labels). `simulator.fleet` steps a fleet built from these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from simulator.domain import Domain
from simulator.models import DEFAULT_MODEL, GpuModel, get_model

HOUR = 3600.0
DAY = 86400.0
YEAR = 365.0 * DAY
EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: a fixed start keeps runs reproducible


class FaultMode(StrEnum):
    """How a fault unfolds (what `--sim-fault` injects)."""

    ECC = "ecc"  # HBM wear-out: SBE rate rising by orders of magnitude, remaps, DBE, XID 48
    THERMAL = "thermal"  # cooling degradation: temperature creeping up, throttling, shutdown
    PCIE = "pcie"  # link degradation: replays rising, x16 -> x8, then XID 79
    OFFBUS = "offbus"  # no precursor: the GPU falls off the bus (XID 79)
    GSP = "gsp"  # no precursor: GSP firmware timeout / error (XID 119 / 120)
    SRAM = "sram"  # no precursor: uncorrectable SRAM error (XID 95)
    # Cured by a GPU reset, never a failure (simulator.remedies); new modes go last: FleetSim
    # codes modes by their order here, and a default fleet must keep its codes.
    REMAP = "remap"  # a weak row remapped from correctable errors: pending until a reset (XID 63)
    GSP_RESET = "gsp-reset"  # a GSP RPC timeout (XID 119) the driver asks a reset for (recovery action 1)
    # The node's shared parts, never a GPU failure (simulator.fabric).
    FABRIC = "fabric"  # Fabric Manager stops: every GPU of the node unregistered from the NVLink fabric
    RAIL_FLAP = "rail-flap"  # the IB port on the GPU's rail goes down four times an hour
    # Seen in the kernel log only, never by NVML's events (simulator.kernel_log).
    LOG_XID = "log-xid"  # a GSP error (XID 120) the driver logs and NVML's event stream does not deliver


PRECURSOR_MODES = (FaultMode.ECC, FaultMode.THERMAL, FaultMode.PCIE)
SUDDEN_MODES = (FaultMode.OFFBUS, FaultMode.GSP, FaultMode.SRAM)
RESET_CURED_MODES = (FaultMode.REMAP, FaultMode.GSP_RESET)
"""Faults that ripen into one event and are gone after a GPU reset (or the node's reboot): no failure label."""
LABEL = {  # failure label mode (docs/architecture.md: ecc | thermal | pcie | other)
    FaultMode.ECC: "ecc", FaultMode.THERMAL: "thermal", FaultMode.PCIE: "pcie",
    FaultMode.OFFBUS: "other", FaultMode.GSP: "other", FaultMode.SRAM: "other",
}  # fmt: skip
_MODE_CODE = {m: i + 1 for i, m in enumerate(FaultMode)}  # 0 = healthy
_CODE_MODE = {v: k for k, v in _MODE_CODE.items()}

XID_OFF_BUS = 79
XID_DBE = 48
XID_SBE_HIGH = 92
XID_REMAP = 63
XID_REMAP_FAIL = 64
XID_CONTAINED = 94
XID_UNCONTAINED = 95
XID_GSP_TIMEOUT = 119
XID_GSP_ERROR = 120
THROTTLE_SW_POWER = 0x4
THROTTLE_HW_SLOWDOWN = 0x8
THROTTLE_SW_THERMAL = 0x20
THROTTLE_HW_THERMAL = 0x40


@dataclass(frozen=True)
class FaultSpec:
    """A fault injected into one GPU: it fails `hours` of simulated time after injection."""

    gpu: int
    mode: FaultMode
    hours: float = 24.0

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """Parse "GPU:MODE[:HOURS]", e.g. "3:ecc:12"."""
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"fault {text!r}: expected GPU:MODE[:HOURS], e.g. 3:ecc:12")
        try:
            gpu = int(parts[0])
            mode = FaultMode(parts[1])
            hours = float(parts[2]) if len(parts) == 3 else 24.0
        except ValueError:
            modes = ", ".join(m.value for m in FaultMode)
            raise ValueError(f"fault {text!r}: GPU must be an index, MODE one of {modes}, HOURS a number") from None
        if gpu < 0 or hours <= 0:
            raise ValueError(f"fault {text!r}: GPU index must be >= 0 and HOURS > 0")
        return cls(gpu, mode, hours)


@dataclass(frozen=True)
class SimConfig:
    """Knobs of a simulated fleet; the defaults are field statistics (REFERENCE.md)."""

    nodes: int = 1
    gpus_per_node: int = 8
    seed: int = 0
    models: Mapping[str, float] = field(default_factory=lambda: {DEFAULT_MODEL: 1.0})
    """GPU model mix, by share of nodes (a node holds one model)."""
    random_failures: bool = False
    """Draw failures from field rates (the batch simulator) or only injected ones (live sim)."""
    annual_failure_rate: float = 0.11
    """GPU-attributable interruptions per GPU-year at training load (Llama 3: ~11 %/year)."""
    acceleration: float = 4.0
    """Multiplies the failure rate so 512 GPUs x 120 days hold >= 60 failures."""
    mode_mix: Mapping[str, float] = field(
        default_factory=lambda: {"ecc": 0.30, "thermal": 0.15, "pcie": 0.15, "sudden": 0.40}
    )
    """Share of failure modes; HBM ~3 %/year of ~11 % -> ~0.3 ECC; "sudden" has no precursor."""
    precursor_days: Mapping[str, tuple[float, float]] = field(
        default_factory=lambda: {"ecc": (5.0, 0.8), "thermal": (3.0, 0.7), "pcie": (2.0, 0.8)}
    )
    """Precursor window per mode: lognormal (median days, sigma), clipped to 6 h .. 30 days."""
    ecc_factor_h100: float = 3.2
    """H100/H200 memory errors are 3.2x as frequent as A100's (NCSA Delta)."""
    reboot_days: float = 21.0
    """Mean days between node reboots (volatile counters reset, pending remaps apply)."""
    repair_days: tuple[float, float] = (1.0, 5.0)
    """A failed GPU is replaced (new UUID) after a uniform delay in this range."""
    domain: Domain = field(default_factory=Domain)
    """Sensors, air, workload, confounders and precursor shapes (`simulator.domain`)."""
    spare_nodes: int = 0
    """The last nodes are a spare pool: never given jobs, always idle (so probes can run there)."""
    start: float = EPOCH
    refault_share: float = 0.14
    """Share of GPUs remedied in place (a reset or the node's reboot after a fault a reset cures) whose
    fault comes back. InfiniteHBD-Trace (stepfun-ai, 400 servers, 348 days): 22 of the 156 GPU faults
    that ended a week or more before the trace's end were followed by another GPU fault on the same
    server within 7 days of the return (14.1 %); a server's, so at most the same GPU's (decision 0079)."""
    refault_days: float = 7.0
    """A refault comes uniformly within this many days of the remedy (the trace's 22: median 3.1 days)."""

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError("a simulated fleet needs at least one node and one GPU per node")
        if not 0 <= self.spare_nodes <= self.nodes:
            raise ValueError(f"spare nodes must be between 0 and the {self.nodes} node(s), not {self.spare_nodes}")
        for name in self.models:
            get_model(name)
        if not self.models or min(self.models.values()) < 0 or sum(self.models.values()) <= 0:
            raise ValueError("model shares must be non-negative and not all zero")
        if set(self.mode_mix) != {"ecc", "thermal", "pcie", "sudden"}:
            raise ValueError("mode_mix needs shares for ecc, thermal, pcie and sudden")
        if self.acceleration < 0 or self.annual_failure_rate < 0:
            raise ValueError("failure rate and acceleration must be >= 0")
        if not 0 <= self.refault_share <= 1 or not 0 < self.refault_days < float("inf"):
            raise ValueError(
                f"refault share must be within 0..1 and refault days positive, got {self.refault_share}, "
                f"{self.refault_days}"
            )


@dataclass(frozen=True)
class SimGpu:
    """Identity of the GPU now in one slot."""

    index: int
    node: str
    uuid: str
    model: GpuModel
    pci_bus_id: str
    serial: str


@dataclass(frozen=True)
class Failure:
    """One GPU failure: the label a predictor learns from."""

    gpu_uuid: str
    hostname: str
    failed_at: float
    mode: str
    fault: FaultMode
    xid: int
    onset: float
    """When its precursor began (== failed_at for sudden failures)."""
