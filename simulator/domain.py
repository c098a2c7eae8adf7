"""What a simulated fleet's world is like: sensors, air, workload, confounders and precursors.

A `Domain` holds the knobs that differ between real fleets but not between GPU models:
how noisy the sensors are, how the air and the cooling behave (node-wide incidents, fan
failures), how jobs come and go, how often healthy GPUs do things that look like failing
ones (SBE bursts, replay bursts, links trained narrow), and what a precursor looks like.
The defaults are the simulator's original fleet; `simulator.families` draws domains at
random so that a model learns what failing GPUs have in common, not one world's noise.

A knob left at its default draws no random numbers, so a fleet of the default domain is
the same, sample for sample, as before the domain existed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

Range = tuple[float, float]


@dataclass(frozen=True)
class Domain:
    """The world a simulated fleet lives in (defaults: the original simulator)."""

    # -- sensors -------------------------------------------------------------------------
    temp_noise_c: float = 0.3
    """Per-sample noise of the temperature sensors (°C, σ)."""
    sensor_offset_c: float = 0.0
    """σ of a fixed per-GPU offset of the core temperature sensor (°C): calibration spread."""
    power_noise_w: float = 4.0
    """Per-sample noise of the power reading (W, σ)."""
    resistance_spread: float = 0.0
    """σ of a per-GPU factor on the thermal resistance (lognormal): heat sinks and paste differ."""
    # -- air and cooling -----------------------------------------------------------------
    inlet_c: Range = (19.0, 24.0)
    """Inlet air temperature of a node, drawn uniformly (°C)."""
    rack_gradient_c: float = 1.5
    """Extra inlet °C per rack position (4 nodes a rack; the top runs warmest)."""
    hot_node_share: float = 0.1
    """Nodes in hot spots (top of rack, far from the inlet) that run warm but stay healthy."""
    hot_node_c: float = 6.0
    """How much warmer the air of a hot-spot node is (°C)."""
    slot_spread_c: float = 8.0
    """Slot offsets inside a node go from 0 to this (°C; ~14 °C between slots in the field)."""
    ambient_swing_c: float = 0.0
    """Amplitude of the daily swing of the room's air (°C; 0: none)."""
    node_incidents_per_year: float = 0.0
    """Node-wide cooling incidents per node-year (a rack door, a CRAH, a blocked inlet): every
    GPU of the node runs hotter together for a while, and none of them is failing."""
    node_incident_c: Range = (3.0, 9.0)
    """How much hotter a node's air gets in an incident (°C)."""
    node_incident_hours: Range = (4.0, 48.0)
    """How long an incident lasts (hours)."""
    fan_failures_per_year: float = 0.0
    """Node fan failures per node-year: the node's thermal resistance rises until repaired."""
    fan_failure_factor: Range = (1.15, 1.5)
    """Factor on the thermal resistance of every GPU of a node with a failed fan."""
    fan_repair_hours: Range = (12.0, 96.0)
    """How long until a failed fan is replaced (hours)."""
    # -- workload ------------------------------------------------------------------------
    job_days: float = 5.0
    """Mean length of a job (days)."""
    idle_hours: float = 8.0
    """Mean idle gap between jobs (hours)."""
    training_share: float = 0.7
    """Share of new jobs that are training (the rest inference, following the day)."""
    training_util: float = 96.0
    """Mean utilisation of a training job (%)."""
    shift_day: float = 0.0
    """Day of the run from which the workload shifts (0: never): training share and load change."""
    shift_training_share: float = 0.7
    """Training share after the shift."""
    shift_training_util: float = 96.0
    """Training utilisation after the shift (%)."""
    # -- confounders: healthy GPUs that look like failing ones ---------------------------
    sbe_burst_share: float = 0.03
    """Healthy GPUs with bursts of SBEs that never fail (Titan: SBEs concentrate in few cards)."""
    sbe_bursts_per_day: float = 0.1
    """How often such a GPU has a burst."""
    sbe_burst_size: Range = (10.0, 300.0)
    """SBEs in one burst."""
    burst_remap_share: float = 0.0
    """Share of those bursts that leave a weak row behind: the row is remapped (a correctable
    remap, pending until the node's next reboot) and the GPU goes on healthy. The field sees
    remaps on GPUs that never fail (NCSA Delta: about 59 % of H100 row remaps succeed); 0: a
    pending remap is only ever a wearing GPU's, as before."""
    reboot_replay_share: float = 0.2
    """Share of GPUs whose link retrain after a node reboot costs a burst of replays."""
    reboot_replay_size: Range = (20.0, 400.0)
    """Replays in such a burst (spread over a few samples)."""
    flaky_link_share: float = 0.0
    """Healthy GPUs whose link has replay bursts now and then, and never fails."""
    flaky_bursts_per_day: float = 0.2
    """How often a flaky link has a burst."""
    flaky_burst_size: Range = (20.0, 500.0)
    """Replays in a flaky link's burst."""
    downtrained_share: float = 0.015
    """Healthy GPUs whose link trained below its maximum (x8 or a generation down) and stays so."""
    memtemp_missing_share: float = 0.02
    """GPUs whose memory temperature sensor reads nothing (NaN)."""
    dropout: float = 0.01
    """Share of samples missing (scrape gaps)."""
    # -- precursors: what a failing GPU shows before it fails ----------------------------
    thermal_gain: float = 1.6
    """A cooling fault multiplies the thermal resistance by up to 1 + this at failure."""
    thermal_shape: float = 1.5
    """Exponent of the cooling fault's progress (1: linear; larger: late and steep)."""
    thermal_mem_c: float = 12.0
    """How much wider the memory-core spread gets by failure (°C)."""
    ecc_start_per_h: float = 0.05
    """SBE rate of a wearing-out HBM stack at onset (per hour)."""
    ecc_orders: float = 3.5
    """Orders of magnitude the SBE rate climbs by failure."""
    pcie_start_per_h: float = 2.0
    """Replay rate of a degrading link at onset (per hour)."""
    pcie_orders: float = 3.0
    """Orders of magnitude the replay rate climbs by failure."""
    pcie_narrow_at: float = 0.5
    """Progress at which a degrading link trains down to half width."""
    # -- repeat offenders ----------------------------------------------------------------
    bad_node_share: float = 0.0
    """Share of nodes with a worse failure rate (power, backplane, a bad riser): repeat offenders."""
    bad_node_factor: float = 1.0
    """How many times the failure rate of a bad node's GPUs is the fleet's."""

    def __post_init__(self) -> None:
        for f in fields(self):
            _check_knob(f.name, getattr(self, f.name))
        for name in ("sbe_burst_share", "burst_remap_share", "hot_node_share", "reboot_replay_share",
                     "flaky_link_share", "downtrained_share", "memtemp_missing_share", "dropout", "bad_node_share",
                     "training_share", "shift_training_share", "pcie_narrow_at"):  # fmt: skip
            if getattr(self, name) > 1:
                raise ValueError(f"domain {name} is a share: between 0 and 1, got {getattr(self, name)}")
        if self.bad_node_factor < 1:
            raise ValueError(f"domain bad_node_factor must be >= 1, got {self.bad_node_factor}")
        for name in ("job_days", "idle_hours"):
            if getattr(self, name) <= 0:
                raise ValueError(f"domain {name} must be a positive, finite time, got {getattr(self, name)}")
        for name in ("sbe_burst_size", "reboot_replay_size"):
            lo, hi = getattr(self, name)
            if int(hi) <= int(lo):
                raise ValueError(f"domain {name} must span at least one whole count, got {(lo, hi)}")


def _check_knob(name: str, v: float | Range) -> None:
    """A knob is a finite number >= 0, or a (low, high) range of them."""
    values = v if isinstance(v, tuple) else (v,)
    if any(not 0 <= x < float("inf") for x in values):  # NaN fails every comparison
        raise ValueError(f"domain {name} must be >= 0 and finite, got {v!r}")
    if isinstance(v, tuple) and (len(v) != 2 or v[0] > v[1]):
        raise ValueError(f"domain {name} must be a (low, high) range, got {v!r}")
