"""The policy's levels: `Thresholds`, every risk level, σ level and wait of a decision, read from the
settings and checked on load.

What a round makes of them per row (at light load, the waits, the witnesses, the heat alone, the
probation) is `predictor.conditions`; `policy.decide` reads those. This module imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from core.settings import Settings
from core.units import parse_duration

HEADS = {"risk_ecc": "ECC", "risk_thermal": "thermal", "risk_pcie": "PCIe"}
"""Per-mode risk heads and how a reason names them."""


@dataclass(frozen=True)
class Thresholds:
    """Risk score cut-offs for the model's decisions."""

    watch: float = 0.3
    """At or above: watch (look at it; no change to what runs on it). A policy choice."""
    demote: float = 0.7
    """At or above: demote. The product brief's 0.7 = "warning: interruptible work only"
    (checkpointed training, never non-interruptible inference; diagnose at next maintenance)."""
    demote_for_s: float = 3 * 3600.0
    """The model's demote stands once the GPU's risk has held at or above `demote` this long
    (seconds), as an alert rule's `for:`; until then the GPU is at watch, and its reasons say
    since when and until when. The rules act at once. A policy choice: on held-out fleets a few
    hours take out the model's brief excursions (a flaky link's burst, a load change); the
    cost is lead time, a fault first seen 24-27 h ahead is caught under a day ahead
    (docs/model.md). It is the wait of a thermal demote (the riskiest head's), and of one by no head
    in particular; PCIe has its own (`pcie_demote_for_s`), the same by default."""
    ecc_demote_for_s: float = 12 * 3600.0
    """The wait of a demote whose riskiest head is ECC (seconds). Memory wears out over days
    (the first alert of an ECC failure on the held-out fleets came a median 84 h ahead), while
    a burst of corrected errors on a healthy GPU lifts its risk for hours: there, waiting half
    a day took out a third of the false demotes and caught every ECC failure as early."""
    pcie_demote_for_s: float = 3 * 3600.0
    """The wait of a demote whose riskiest head is PCIe (seconds). A fleet whose healthy links
    burst replays for hours may wait longer; the cost is links that fail within hours of first
    looking bad. Measured (docs/model.md): 6 h took out a fifth of the false episodes on the
    simulator's held-out families, but on the independent generator it lost 3 of 102 PCIe
    catches for 7 of about 700 false episodes, so the default stays the thermal wait's 3 h."""
    pcie_habit_demote_for_s: float = 6 * 3600.0
    """The wait of a PCIe demote on a link that replays out of habit (`habitual_link`; seconds, at
    least the PCIe wait): its hours with new replays over the last 6 h stand less than
    `pcie_surprise_z` σ out of its own month (`replay_surprise_6h`; not known counts as habit). A
    healthy link that bursts now and then lifts the PCIe risk for the 5-6 h its burst spends in the
    feature window; a degrading link's replaying hours are new to it. docs/model.md measures it."""
    pcie_surprise_z: float = 3.0
    """How far (σ) a link's replaying hours over 6 h must stand out of its own month for its PCIe
    demote to keep the PCIe wait (`pcie_demote_for_s`); under it, `pcie_habit_demote_for_s`. 0: never."""
    light_load_demote_for_s: float = 12 * 3600.0
    """The wait of a thermal demote while the GPU is at light load (`light_load`; seconds, at
    least the thermal wait). Its heat is then judged far below the load of the baseline it is
    measured against, an extrapolation of the fitted line that runs a healthy idle GPU 1-3 σ
    "hot" for as long as it idles. The demote stands once the load returns and the risk is still
    high, or when it has held this long. An idle GPU runs no work a demote would move, so the
    wait costs little; docs/model.md measures it."""
    light_load_share: float = 0.5
    """At light load: the GPU's power over the last 6 h is under this share of its baseline's
    (`heat_load_share`). 0: never."""
    light_load_spread_z: float = 2.0
    """A thermal demote at light load waits only the thermal wait (`demote_for_s`), not
    `light_load_demote_for_s`, where the memory-core spread over 6 h (`mem_spread_z`) stands at least
    this many σ out of its own 30 days (`light_wait`). The spread is memory against core in one GPU,
    against its own past: the fitted line an idle GPU's heat is extrapolated on is not in it, and a
    cooler failing while its GPU idles widens it (on the development fleets 2-3.7 σ a day ahead).
    The witnesses that cut the wait to nothing stay off at light load. 0: never. A policy choice;
    docs/model.md measures it (at 2 σ: 95 development fleets with every floor against 93, no false
    episode added; 2.5 and 3 σ 94, 4 σ none)."""
    thermal_corroborate_z: float = 1.0
    """A thermal demote that no reading of the GPU's own cooling corroborates waits
    `uncorroborated_demote_for_s` instead of the thermal wait: where its heat over its node's in its own
    spread of that (`heat_vs_node_own_z`) and its memory-core spread (`mem_spread_z`) are both known and
    both under this many σ (`uncorroborated`; not at light load, whose own wait holds there). The
    thermal head's risk alone then rests on what its node or its power explain: on the development
    fleets two of the five false episodes were such demotes, one a GPU whose heat its node shared. 0:
    never. A policy choice; docs/model.md measures it (1, 1.5 and 2 σ, 6 or 12 h: the same two false
    episodes fewer, no catch lost)."""
    uncorroborated_demote_for_s: float = 6 * 3600.0
    """The wait of a thermal demote no reading corroborates (`thermal_corroborate_z`; seconds, at least
    the thermal wait)."""
    thermal_agree_z: float = 2.0
    """A thermal demote stands without its wait when two readings of the GPU's own cooling agree
    (`witnesses_agree`): the memory-core spread over 6 h against its own 30 days (`mem_spread_z`) at
    least this many σ, and the core's heat excess over both its own past and its node
    (`heat_excess_z`) at least `thermal_agree_heat_z`. A sensor's excursion lifts one of them (a core
    sensor reading high narrows the spread); the room, a node's incident and its fans move core and
    memory together, so they lift neither. Not at light load, where heat is judged by extrapolation.
    0: never. A policy choice; docs/model.md measures it."""
    thermal_agree_heat_z: float = 1.0
    """The core's heat excess (`heat_excess_z`, σ) that agrees with a spread of `thermal_agree_z`: lower
    than the spread's, since a hot aisle's daily swing widens the core's own σ and its heat stands out
    late, while the spread, core and memory sharing one room, does not swing with it. docs/model.md
    measures it (1 σ against 2: five more fleets with every floor on the development fleets). 0: any
    known heat agrees (the spread's level alone then decides; `thermal_agree_z` 0 turns the agreement off)."""
    thermal_spread_z: float = 4.0
    """A thermal demote also stands without its wait where the memory-core spread alone is at least
    this many σ wide against its own 30 days (`witnesses_agree`; not at light load). A memory that
    runs that far from its own core's heat is the GPU's own cooling going (its paste, its memory's
    contact): on the held-out fleets such spreads stood 3-4 σ out for 10-20 h before the core's heat
    reached 2 σ against its node, while a sensor's excursion or the room moves the spread 1-3 σ.
    0: never. A policy choice; docs/model.md measures it (3 σ added false episodes, 4 σ none)."""
    thermal_agree_vs_node_z: float = 3.0
    """A thermal demote also stands without its wait where the core's heat over its node's, beyond
    what its power explains, stands at least this many σ out of its own 30 days of that difference
    (`heat_vs_node_own_z`; `witnesses_agree`; not at light load): the room's swings cancel against its
    node before that spread is taken, so a hot aisle's fast cooler stands out there hours before its
    heat over its own past does. 0: never. A policy choice; docs/model.md measures it (on the
    development fleets 93 with every floor against 91, no false episode added)."""
    thermal_heat_z: float = 4.0
    """A thermal demote on heat alone: where the core's heat over both its own past and its node
    (`heat_excess_z`, a 6 h mean) has been at least this many σ in every round for
    `thermal_heat_for_s`, not at light load, the GPU is demoted whatever the thermal head's risk
    (`heat_held`). A cooler whose failure widens no memory-core spread (the core's heat alone
    climbing) can keep the thermal head under the demote level: the heads learned from fleets whose
    failing coolers widen it. 0: never. A policy choice; docs/model.md measures it (at once, 3-5 σ
    added false episodes; 4 σ held 6 h none, and two more development fleets hold every floor)."""
    thermal_heat_vs_node_z: float = 5.0
    """The demote on heat alone also counts a round where the core's heat over its node's, beyond
    what its power explains, stands at least this many σ out of its own 30 days of that difference
    (`heat_vs_node_own_z`), with its heat over both its own past and its node (`heat_excess_z`) at
    least `thermal_heat_vs_node_excess_z`; not at light load. The node's air cancels before that
    spread is taken, so a cooler failing in a room that swings stands out there first, while its
    own σ of heat, widened by the room, keeps `heat_excess_z` under `thermal_heat_z`. Its rounds and
    `thermal_heat_z`'s make one run (`heat_held`). 0: never. A policy choice; docs/model.md measures
    it (on the development fleets the same as without it; on the independent generator's failing
    coolers 3 of 8 demoted a day ahead, against 1)."""
    thermal_heat_vs_node_excess_z: float = 2.0
    """The core's heat over both its own past and its node (`heat_excess_z`, σ) a round counted by
    `thermal_heat_vs_node_z` needs as well: without it, at 5 σ, 10 false episodes on the development
    fleets against 5, and every floor on 86 of them against 91 (docs/model.md)."""
    thermal_heat_for_s: float = 6 * 3600.0
    """How long (seconds) the core's heat must have counted (`heat_alone`: at `thermal_heat_z`, or at
    `thermal_heat_vs_node_z`) in every round for a demote on heat alone."""
    probation_risk: float = 0.1
    """After a drain or RMA lets a GPU go (its criterion holds no more: a pending row remap
    taken by a reset, a DBE a week old), the GPU stays demoted while its risk is at or above
    this (`on_probation`; at most `probation_for_s`). Memory that needed a repair and still
    scores well above a healthy GPU's risk is put back on interruptible work only, not on the
    next large job. At most `demote`. A policy choice; docs/model.md measures it."""
    probation_for_s: float = 30 * 86400.0
    """How long a probation lasts at most after the drain or RMA let the GPU go (seconds; 0:
    no probation). 30 days: the ECC failures that came after a pending remap's drain on the
    held-out fleets came 8-20 days after it (docs/model.md)."""
    remap_hold_risk: float = 0.3
    """A pending row remap (`rules.REMAP_PENDING`) where no drain or RMA rule fires is a watch and a reset
    at the GPU's next idle moment: NVIDIA's memory error management guide lets unaffected work go on
    until that reset, and a weak row on a healthy GPU is remapped too. It is held so (`remap_waits`)
    unless the ECC head reads its memory as wearing: its risk at this level (held `remap_hold_for_s`),
    now or within `remap_hold_clear_s`; then it is drained and reset now, and the drain stands until a
    reset takes the remap (`replay.remap_held`, `policy.remap_drain_rows`). An unknown ECC risk shows
    no wear and waits. 0: every pending remap drains at once (NVIDIA's old DCGM-style drain, an operator's
    choice; GPUHEALTH_REMAP_HOLD_RISK=0). 0.3 (the watch level): on the development
    fleets, where a remap is wear, it keeps every ECC catch NVIDIA's drain made (where a watch alone
    loses a third of them); where weak rows on healthy GPUs are remapped it leaves most of that drain's
    false alarms out (docs/decisions/0082)."""
    remap_hold_for_s: float = 0.0
    """How long (seconds) the ECC risk must have held `remap_hold_risk` before a pending remap stops
    waiting for idle and drains; 0: the first round at it. docs/model.md measures 12 h (the ECC demote's wait): it
    lets a healthy burst's passing risk go by, but drains failing memory too late on the development
    fleets."""
    remap_hold_clear_s: float = 86400.0
    """A pending remap waits for idle only if the ECC risk has not held `remap_hold_risk` (for
    `remap_hold_for_s`) at any round within this long (seconds) before (`replay.ecc_wore`): memory the
    ECC head called wearing a few hours ago is drained at its next remap even where the reset took the
    last one and the risk fell with the burst that passed. 0: only this round's risk counts. 24 h:
    picked on spent development seeds between 24 h, 72 h and 7 days (docs/model.md)."""
    release: float | None = None
    """A demote that stands (the model's, a probation's, or one held so) is held while the GPU's
    risk stays at or above this (`replay.held_demotes`); the first round under it, or a drain or RMA,
    ends it. None: the watch level. `demote`: held only while the risk stays at the demote
    level, so a demote ends once the risk falls under it (and the wait begins again the next
    time it rises). A policy choice:
    on the held-out fleets, demotes that fell back to the watch level for a few hours and rose
    again counted as new false episodes, or cut a GPU's early warning short (docs/model.md)."""

    def __post_init__(self) -> None:
        # Written so that NaN fails too: every comparison with NaN is False.
        if not (0.0 < self.watch < self.demote <= 1.0):
            raise ValueError(
                f"risk thresholds must satisfy 0 < watch < demote <= 1; got watch={self.watch}, demote={self.demote}"
            )
        for name, v in (
            ("demote_for", self.demote_for_s),
            ("demote_for_ecc", self.ecc_demote_for_s),
            ("demote_for_pcie", self.pcie_demote_for_s),
            ("demote_for_light_load", self.light_load_demote_for_s),
            ("demote_for_pcie_habit", self.pcie_habit_demote_for_s),
            ("demote_for_uncorroborated", self.uncorroborated_demote_for_s),
            ("thermal_heat_for", self.thermal_heat_for_s),
            ("remap_hold_for", self.remap_hold_for_s),
            ("remap_hold_clear", self.remap_hold_clear_s),
        ):
            if not (0.0 <= v < float("inf")):
                raise ValueError(f"{name} must be a duration >= 0; got {v} s")
        _shares(light_load_share=self.light_load_share, remap_hold_risk=self.remap_hold_risk)
        for name, z in (
            ("pcie_surprise_z", self.pcie_surprise_z),
            ("thermal_agree_z", self.thermal_agree_z),
            ("thermal_agree_heat_z", self.thermal_agree_heat_z),
            ("thermal_spread_z", self.thermal_spread_z),
            ("thermal_agree_vs_node_z", self.thermal_agree_vs_node_z),
            ("light_load_spread_z", self.light_load_spread_z),
            ("thermal_corroborate_z", self.thermal_corroborate_z),
            ("thermal_heat_z", self.thermal_heat_z),
            ("thermal_heat_vs_node_z", self.thermal_heat_vs_node_z),
            ("thermal_heat_vs_node_excess_z", self.thermal_heat_vs_node_excess_z),
        ):
            if not (0.0 <= z < float("inf")):
                raise ValueError(f"{name} must be a number of σ >= 0 (0: never); got {z}")
        if not (0.0 < self.probation_risk <= self.demote):
            raise ValueError(
                f"probation_risk must satisfy 0 < probation_risk <= demote ({self.demote}); got {self.probation_risk}"
            )
        if not (0.0 <= self.probation_for_s < float("inf")):
            raise ValueError(f"probation_for must be a duration >= 0; got {self.probation_for_s} s")
        if self.release is not None and not (0.0 < self.release <= self.demote):
            raise ValueError(f"release must satisfy 0 < release <= demote ({self.demote}); got {self.release}")

    @property
    def release_level(self) -> float:
        """The risk a standing demote is held at or above (`release`; None: the watch level)."""
        return self.watch if self.release is None else self.release

    @classmethod
    def from_settings(cls, s: Settings) -> Thresholds:
        """The thresholds an operator set (GPUHEALTH_WATCH_THRESHOLD, _DEMOTE_THRESHOLD, _DEMOTE_FOR,
        _DEMOTE_FOR_ECC, _DEMOTE_FOR_PCIE, _DEMOTE_FOR_PCIE_HABIT, _PCIE_SURPRISE_Z, _DEMOTE_FOR_LIGHT_LOAD,
        _LIGHT_LOAD_SHARE, _LIGHT_LOAD_SPREAD_Z, _THERMAL_CORROBORATE_Z, _DEMOTE_FOR_UNCORROBORATED,
        _THERMAL_AGREE_Z, _THERMAL_AGREE_HEAT_Z, _THERMAL_SPREAD_Z, _THERMAL_AGREE_VS_NODE_Z, _THERMAL_HEAT_Z,
        _THERMAL_HEAT_VS_NODE_Z, _THERMAL_HEAT_VS_NODE_EXCESS_Z, _DEMOTE_FOR_HEAT, _PROBATION_RISK,
        _PROBATION_FOR, _REMAP_HOLD_RISK, _REMAP_HOLD_FOR, _REMAP_HOLD_CLEAR, _RELEASE_THRESHOLD)."""
        waits = {}
        for field_name, name, text in (
            ("demote_for_s", "GPUHEALTH_DEMOTE_FOR", s.demote_for),
            ("ecc_demote_for_s", "GPUHEALTH_DEMOTE_FOR_ECC", s.demote_for_ecc),
            ("pcie_demote_for_s", "GPUHEALTH_DEMOTE_FOR_PCIE", s.demote_for_pcie),
            ("light_load_demote_for_s", "GPUHEALTH_DEMOTE_FOR_LIGHT_LOAD", s.demote_for_light_load),
            ("pcie_habit_demote_for_s", "GPUHEALTH_DEMOTE_FOR_PCIE_HABIT", s.demote_for_pcie_habit),
            ("uncorroborated_demote_for_s", "GPUHEALTH_DEMOTE_FOR_UNCORROBORATED", s.demote_for_uncorroborated),
            ("probation_for_s", "GPUHEALTH_PROBATION_FOR", s.probation_for),
            ("thermal_heat_for_s", "GPUHEALTH_DEMOTE_FOR_HEAT", s.demote_for_heat),
            ("remap_hold_for_s", "GPUHEALTH_REMAP_HOLD_FOR", s.remap_hold_for),
            ("remap_hold_clear_s", "GPUHEALTH_REMAP_HOLD_CLEAR", s.remap_hold_clear),
        ):
            try:
                waits[field_name] = parse_duration(text, allow_zero=True)
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
        return cls(
            s.watch_threshold, s.demote_threshold, light_load_share=s.light_load_share,
            light_load_spread_z=s.light_load_spread_z, thermal_corroborate_z=s.thermal_corroborate_z,
            thermal_agree_z=s.thermal_agree_z, thermal_agree_heat_z=s.thermal_agree_heat_z,
            thermal_spread_z=s.thermal_spread_z, thermal_agree_vs_node_z=s.thermal_agree_vs_node_z,
            thermal_heat_z=s.thermal_heat_z,
            thermal_heat_vs_node_z=s.thermal_heat_vs_node_z,
            thermal_heat_vs_node_excess_z=s.thermal_heat_vs_node_excess_z, pcie_surprise_z=s.pcie_surprise_z,
            probation_risk=s.probation_risk, remap_hold_risk=s.remap_hold_risk, release=s.release_threshold,
            **waits,
        )  # fmt: skip

    @property
    def heat_hold(self) -> pd.Timedelta:
        """How long the core's heat alone must have counted for a demote on it (`thermal_heat_for_s`)."""
        return pd.Timedelta(seconds=self.thermal_heat_for_s)

    @property
    def longest_wait(self) -> pd.Timedelta:
        """The longest a model demote waits (how far back its clock must be read; 0: none waits)."""
        light = self.light_load_demote_for_s if self.light_load_share > 0 else 0.0
        habit = self.pcie_habit_demote_for_s if self.pcie_surprise_z > 0 else 0.0
        alone = self.uncorroborated_demote_for_s if self.thermal_corroborate_z > 0 else 0.0
        waits = (self.demote_for_s, self.ecc_demote_for_s, self.pcie_demote_for_s, light, habit, alone)
        return pd.Timedelta(seconds=max(waits))

    def wait_for(self, mode: Any, light: Any = None, habit: Any = None, alone: Any = None) -> np.ndarray:
        """Per row, the wait of a demote whose riskiest head is `mode` ("ECC", "thermal", "PCIe", "";
        `top_heads`' names), as timedelta64[ns]; with `light` (per row, `light_load`), a thermal
        one at light load waits the longer of its wait and `light_load_demote_for_s`; with `habit`
        (per row, `habitual_link`), a PCIe one on such a link the longer of its wait and
        `pcie_habit_demote_for_s`; with `alone` (per row, `uncorroborated`), a thermal one no reading
        corroborates the longer of its wait and `uncorroborated_demote_for_s`."""
        m = np.asarray(mode, dtype=object)
        seconds = np.select(
            [m == HEADS["risk_ecc"], m == HEADS["risk_pcie"]],
            [self.ecc_demote_for_s, self.pcie_demote_for_s],
            self.demote_for_s,
        )
        if light is not None:
            idle = (m == HEADS["risk_thermal"]) & np.asarray(light, dtype=bool)
            seconds = np.where(idle, np.maximum(seconds, self.light_load_demote_for_s), seconds)
        if habit is not None:
            calm = (m == HEADS["risk_pcie"]) & np.asarray(habit, dtype=bool)
            seconds = np.where(calm, np.maximum(seconds, self.pcie_habit_demote_for_s), seconds)
        if alone is not None:
            bare = (m == HEADS["risk_thermal"]) & np.asarray(alone, dtype=bool)
            seconds = np.where(bare, np.maximum(seconds, self.uncorroborated_demote_for_s), seconds)
        return np.asarray(np.round(seconds * 1e9), dtype="timedelta64[ns]")


def _shares(**shares: float) -> None:
    """Raise ValueError for the first of `shares` (name=value) that is not between 0 and 1 (NaN is not)."""
    for name, share in shares.items():
        if not (0.0 <= share <= 1.0):
            raise ValueError(f"{name} must be between 0 and 1; got {share}")
