"""Decisions: the worst of what the rules say and what the risk model says, with reasons.

A rule (NVIDIA/DCGM criterion, `predictor.rules`) can ask for watch, drain or rma; the
model's risk score can ask for watch or demote; a node finding (`predictor.node`: the node's
GPUs run hot together) asks for watch on each GPU of the node and holds a thermal model
demote there at watch, since the heat is the node's cooling, not the GPU. The decision is
the most severe of them, and its reasons are the sentences of whatever set it: rule reasons
first (a documented criterion outranks a score), then the node's, then the model's; a node
finding that did not set the decision follows as context. `decision_changes` says what a
scoring round does to each GPU's standing decision; the store persists what it says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from core.decisions import DECISIONS, SEVERITY
from core.settings import Settings
from core.units import parse_duration
from predictor.node import NodeHeat, held_reason, node_findings, node_reason
from predictor.rules import evaluate_rules

DECISION_DTYPE = pd.CategoricalDtype(DECISIONS, ordered=True)
"""Ordered, so decisions sort and compare by severity (rma > drain > ...)."""

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
    thermal_agree_z: float = 2.0
    """A thermal demote stands without its wait when two readings of the GPU's own cooling agree,
    each at least this many σ (`witnesses_agree`): the core's heat excess over both its own past
    and its node (`heat_excess_z`), and the memory-core spread over 6 h against its own 30 days
    (`mem_spread_z`). A sensor's excursion lifts one of them (a core sensor reading high narrows
    the spread); the room, a node's incident and its fans move core and memory together, so they
    lift neither. Not at light load, where heat is judged by extrapolation. 0: never. A policy
    choice; docs/model.md measures it."""
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
        ):
            if not (0.0 <= v < float("inf")):
                raise ValueError(f"{name} must be a duration >= 0; got {v} s")
        if not (0.0 <= self.light_load_share <= 1.0):
            raise ValueError(f"light_load_share must be between 0 and 1; got {self.light_load_share}")
        if not (0.0 <= self.pcie_surprise_z < float("inf")):
            raise ValueError(f"pcie_surprise_z must be a number of σ >= 0 (0: never); got {self.pcie_surprise_z}")
        if not (0.0 <= self.thermal_agree_z < float("inf")):
            raise ValueError(f"thermal_agree_z must be a number of σ >= 0 (0: never); got {self.thermal_agree_z}")
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
        _LIGHT_LOAD_SHARE, _THERMAL_AGREE_Z, _PROBATION_RISK, _PROBATION_FOR, _RELEASE_THRESHOLD)."""
        waits = {}
        for field_name, name, text in (
            ("demote_for_s", "GPUHEALTH_DEMOTE_FOR", s.demote_for),
            ("ecc_demote_for_s", "GPUHEALTH_DEMOTE_FOR_ECC", s.demote_for_ecc),
            ("pcie_demote_for_s", "GPUHEALTH_DEMOTE_FOR_PCIE", s.demote_for_pcie),
            ("light_load_demote_for_s", "GPUHEALTH_DEMOTE_FOR_LIGHT_LOAD", s.demote_for_light_load),
            ("pcie_habit_demote_for_s", "GPUHEALTH_DEMOTE_FOR_PCIE_HABIT", s.demote_for_pcie_habit),
            ("probation_for_s", "GPUHEALTH_PROBATION_FOR", s.probation_for),
        ):
            try:
                waits[field_name] = parse_duration(text, allow_zero=True)
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
        return cls(
            s.watch_threshold, s.demote_threshold, light_load_share=s.light_load_share,
            thermal_agree_z=s.thermal_agree_z, pcie_surprise_z=s.pcie_surprise_z, probation_risk=s.probation_risk,
            release=s.release_threshold, **waits,
        )  # fmt: skip

    @property
    def longest_wait(self) -> pd.Timedelta:
        """The longest a model demote waits (how far back its clock must be read; 0: none waits)."""
        light = self.light_load_demote_for_s if self.light_load_share > 0 else 0.0
        habit = self.pcie_habit_demote_for_s if self.pcie_surprise_z > 0 else 0.0
        return pd.Timedelta(seconds=max(self.demote_for_s, self.ecc_demote_for_s, self.pcie_demote_for_s, light, habit))

    def wait_for(self, mode: Any, light: Any = None, habit: Any = None) -> np.ndarray:
        """Per row, the wait of a demote whose riskiest head is `mode` ("ECC", "thermal", "PCIe", "";
        `top_heads`' names), as timedelta64[ns]; with `light` (per row, `light_load`), a thermal
        one at light load waits the longer of its wait and `light_load_demote_for_s`; with `habit`
        (per row, `habitual_link`), a PCIe one on such a link the longer of its wait and
        `pcie_habit_demote_for_s`."""
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
        return np.asarray(np.round(seconds * 1e9), dtype="timedelta64[ns]")


def light_load(share: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row: whether the GPU is at light load, its 6 h power under `light_load_share` of its
    baseline's (`heat_load_share`, NaN: not known, so not light)."""
    x = np.asarray(share, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return np.asarray(x < thresholds.light_load_share)


def habitual_link(surprise: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row: whether its link replays out of habit, its hours with new replays over 6 h less
    than `pcie_surprise_z` σ out of its own month (`replay_surprise_6h`, NaN: not known, so habit)."""
    x = np.asarray(surprise, dtype=np.float64)
    if thresholds.pcie_surprise_z <= 0:
        return np.zeros(x.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        return np.asarray(~(x >= thresholds.pcie_surprise_z))


def pending_demote(
    cutoff: np.ndarray, since: np.ndarray, thresholds: Thresholds, mode: Any, light: Any = None, habit: Any = None
) -> np.ndarray:
    """Per row: whether a demote by the model still waits for its risk to hold the wait of its
    riskiest head `mode` (`Thresholds.wait_for`, at light load where `light`, on a link replaying
    out of habit where `habit`; since NaT: the run begins now)."""
    c, s = naive_utc(cutoff), naive_utc(since)
    held_for = c - np.where(np.isnat(s), c, s)
    return np.asarray(held_for < thresholds.wait_for(mode, light, habit))


WAIT_INPUTS = ("heat_load_share", "heat_excess_z", "mem_spread_z", "replay_surprise_6h")
"""The feature columns a model demote's wait reads beside the risk (`demote_waits`): kept with the
hourly rows that are decided again under other waits (`score.hour_rows`)."""


def witnesses_agree(table: pd.DataFrame, mode: Any, light: Any, thresholds: Thresholds) -> np.ndarray:
    """Per row of `table` (features, or `score.hour_rows`' rows): whether its demote, thermal by its
    riskiest head `mode`, stands without its wait because two readings of the GPU's own cooling agree
    (`Thresholds.thermal_agree_z`; not at light load, `light`)."""
    z = thresholds.thermal_agree_z
    if z <= 0:
        return np.zeros(len(table), dtype=bool)
    with np.errstate(invalid="ignore"):
        both = (_column(table, "heat_excess_z") >= z) & (_column(table, "mem_spread_z") >= z)
    thermal = np.asarray(mode, dtype=object) == HEADS["risk_thermal"]
    return np.asarray(both & thermal & ~np.asarray(light, dtype=bool))


def demote_waits(
    table: pd.DataFrame, since: np.ndarray, thresholds: Thresholds, mode: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `table` (with `cutoff` and `WAIT_INPUTS`): whether a demote by the model still waits
    (`pending_demote`, its light-load and habitual-link waits included), and whether it would, but two
    readings agree (`witnesses_agree`) and it stands now."""
    light = light_load(_column(table, "heat_load_share"), thresholds)
    habit = habitual_link(_column(table, "replay_surprise_6h"), thresholds)
    pending = pending_demote(table["cutoff"], since, thresholds, mode, light, habit)
    agree = pending & witnesses_agree(table, mode, light, thresholds)
    return pending & ~agree, agree


def agree_reason(heat_z: float, spread_z: float, thresholds: Thresholds) -> str:
    """Why a thermal demote stands before its wait is over: the two readings that agree."""
    return (
        f"thermal demote without its {thresholds.demote_for_s / 3600:g} h wait: two readings of its own cooling "
        f"agree: the core runs {heat_z:+.1f} σ hot against its own past and its node, and the memory-core "
        f"spread is {spread_z:+.1f} σ wide against its own 30 days (each at {thresholds.thermal_agree_z:g} σ or more)"
    )


def on_probation(at: Any, began: np.ndarray, out: np.ndarray, risk: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """Per row: whether the GPU is on probation, demoted after a drain or RMA let it go at `began`
    (`replay.probation_began`, or the store's; NaT: none): no drain or RMA holds now (`out` false), its
    risk is at `probation_risk` or above and the release is under `probation_for_s` old."""
    c, b = naive_utc(at), np.asarray(began, dtype="datetime64[ns]")
    with np.errstate(invalid="ignore"):
        high = np.asarray(risk, dtype=np.float64) >= thresholds.probation_risk
    age = c - np.where(np.isnat(b), c, b)
    limit = np.timedelta64(round(thresholds.probation_for_s * 1e9), "ns")
    return np.asarray(~np.asarray(out, dtype=bool) & high & ~np.isnat(b) & (age < limit))


def probation_reason(began: pd.Timestamp, risk: float, thresholds: Thresholds) -> str:
    """Why a GPU is demoted on probation: when the drain or RMA let it go, its risk, and until when."""
    until = began + pd.Timedelta(seconds=thresholds.probation_for_s)
    return (
        f"probation: a drain or RMA let it go on {began:%Y-%m-%d %H:%M} UTC, and its risk {risk:.2f} "
        f"is still at or above {thresholds.probation_risk:.2f}; interruptible work only until it falls "
        f"under that, or until {until:%Y-%m-%d %H:%M} UTC at the latest"
    )


def hold_reason(since: pd.Timestamp, risk: float, thresholds: Thresholds) -> str:
    """Why a GPU whose demote stands is still demoted: since when, its risk, and what ends it."""
    return (
        f"demote held: demoted since {since:%Y-%m-%d %H:%M} UTC, and its risk {risk:.2f} is still at or "
        f"above {thresholds.release_level:.2f}; interruptible work only until it falls under that"
    )


def naive_utc(t: Any) -> np.ndarray:
    """Times (aware or naive UTC, any unit) as naive UTC datetime64[ns]."""
    idx = pd.DatetimeIndex(t)
    return (idx.tz_convert(None) if idx.tz is not None else idx).as_unit("ns").to_numpy()


def pending_reason(
    since: pd.Timestamp,
    thresholds: Thresholds,
    mode: str,
    load_share: float | None = None,
    surprise: float | None = None,
) -> str:
    """Why a demote by the model is a watch for now: since when its risk is high, and until when it
    must stay so (the wait of its riskiest head `mode`; with `load_share`, a thermal one at
    light load, which also stands once the load returns; None or NaN: the load is not known; with
    `surprise`, a PCIe one on a link replaying out of habit)."""
    light = load_share is not None and bool(light_load([load_share], thresholds)[0])
    habit = surprise is not None and bool(habitual_link([surprise], thresholds)[0])
    wait = thresholds.wait_for([mode], [light], [habit])[0]
    due = since + pd.Timedelta(wait)
    text = (
        f"demote pending: risk at or above {thresholds.demote:.2f} since {since:%Y-%m-%d %H:%M} UTC; "
        f"it is demoted if that holds until {due:%Y-%m-%d %H:%M} UTC"
    )
    if wait > thresholds.wait_for([mode])[0] and light:  # the light-load wait is the one that holds it
        text += (
            f", or sooner once its load returns: light load (6 h power {load_share:.0%} of its baseline's), "
            "where heat is judged by extrapolation"
        )
    elif wait > thresholds.wait_for([mode])[0]:  # the habitual link's
        seen = "not known" if surprise is None or np.isnan(surprise) else f"{surprise:+.1f} σ"
        text += (
            f": its link replays out of habit (its hours with new replays over 6 h stand {seen} out of its own "
            f"month, under {thresholds.pcie_surprise_z:g} σ)"
        )
    return text


def _model_severity(risk: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """0 (ok), 1 (watch) or 2 (demote) per row; NaN risk is 0 (the rules decide alone)."""
    with np.errstate(invalid="ignore"):
        return np.where(
            risk >= thresholds.demote,
            SEVERITY["demote"],
            np.where(risk >= thresholds.watch, SEVERITY["watch"], 0),
        )


def top_heads(risk: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the name of the highest mode head ("" if none is known) and its value."""
    cols = [c for c in HEADS if c in risk.columns]
    n = len(risk)
    if not cols:
        return np.full(n, "", dtype=object), np.full(n, np.nan)
    h = risk[cols].to_numpy(dtype=np.float64, na_value=np.nan)
    known = ~np.isnan(h).all(axis=1)
    arg = np.argmax(np.where(np.isnan(h), -np.inf, h), axis=1)
    names = np.asarray([HEADS[c] for c in cols], dtype=object)[arg]
    return np.where(known, names, ""), np.where(known, h[np.arange(n), arg], np.nan)


def _as_reasons(value: Any) -> list[str]:
    """The model's reasons for one row as a list (None/NaN/absent -> [])."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence | np.ndarray):
        return [str(v) for v in value]
    return []


def _note(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return str(value).strip()


def decide(
    features: pd.DataFrame,
    risk: pd.DataFrame,
    thresholds: Thresholds,
    rule_hits: pd.DataFrame | None = None,
    *,
    nodes: pd.DataFrame | None = None,
    node_heat: NodeHeat | None = None,
    since: np.ndarray | None = None,
    released: np.ndarray | None = None,
    demoted: np.ndarray | None = None,
) -> pd.DataFrame:
    """Per GPU row: `decision` (one of DECISIONS) and `reasons` (list[str]) from rules, risk and node findings.

    `since` (per row, with a `cutoff` column in features): when the GPU's risk last rose to
    `demote` and stayed (NaT: in this round); a model demote whose risk has not held the wait of
    its riskiest head (`Thresholds.wait_for`) is a watch saying so. None: the risk of this
    instant decides alone.

    `released` (per row, with `cutoff`): when a drain or RMA last let the GPU go, where its
    rounds since continue it without a break (`replay.probation_began`; NaT: none). Where no drain or
    RMA holds now and the risk is at `probation_risk` or above, the GPU is demoted on probation
    (`on_probation`), with a reason saying since when and until when. None: no probation.

    `demoted` (per row): since when the GPU's standing decision is a demote (NaT: it is not).
    Where the risk is at `Thresholds.release_level` or above, the demote is held (`replay.held_demotes`),
    with a reason saying since when and what ends it. None: no hold.

    `risk` has the features' index and a `risk` column, optionally the heads `risk_ecc`,
    `risk_thermal`, `risk_pcie`, the model's `reasons` (list[str] per row) and a `risk_note`
    (why a row could not be scored). `rule_hits` is `evaluate_rules(features)`'s output and
    `nodes` is `node_findings(features, node_heat)`'s (each computed here when None).
    On a suspected node every GPU is at least `watch`, and a model demote whose riskiest head
    is thermal is held at `watch` unless the GPU's `temp_excess_vs_node_z` or its `mem_spread_z`
    reaches `node_heat.stands_out_z`; what a rule asks for is never lowered.
    """
    _check_frames(features, risk)
    n = len(features)
    hits = evaluate_rules(features) if rule_hits is None else rule_hits
    pos, hit_sev = _hit_severity(features, hits)
    # Rule severity per row: the worst action that fired.
    rule_sev = np.zeros(n, dtype=np.int64)
    np.maximum.at(rule_sev, pos, hit_sev)

    r = risk["risk"].to_numpy(dtype=np.float64, na_value=np.nan)
    model_sev = _model_severity(r, thresholds)
    heat = node_heat or NodeHeat()
    on_hot_node, node_text = _hot_node_rows(features, node_findings(features, heat) if nodes is None else nodes)
    mode, _ = top_heads(risk)
    held = _node_held(features, mode, model_sev, on_hot_node, heat)
    model_sev[held] = SEVERITY["watch"]
    pending = agreed = np.zeros(n, dtype=bool)
    load_share, surprise = _column(features, "heat_load_share"), _column(features, "replay_surprise_6h")
    if since is not None and thresholds.longest_wait > pd.Timedelta(0):
        waits, cut_short = demote_waits(features, since, thresholds, mode)
        pending = (model_sev == SEVERITY["demote"]) & waits
        agreed = (model_sev == SEVERITY["demote"]) & cut_short
        model_sev[pending] = SEVERITY["watch"]
    node_sev = np.where(on_hot_node, SEVERITY["watch"], 0)
    probation, hold = _standing_demotes(features, r, rule_sev >= SEVERITY["drain"], thresholds, released, demoted)
    standing_sev = np.where(probation | hold, SEVERITY["demote"], 0)
    final = np.maximum(np.maximum(rule_sev, model_sev), np.maximum(node_sev, standing_sev))

    reasons: list[list[str]] = [[] for _ in range(n)]
    # Rule reasons first, only those whose action set the decision (hits keep RULES order).
    hit_reasons = hits["reason"].to_numpy()
    for i in np.flatnonzero(hit_sev == final[pos]):
        reasons[pos[i]].append(str(hit_reasons[i]))
    # Then the node's, where it set the decision (with why a demote was held) ...
    vs_node, mem_spread = _column(features, "temp_excess_vs_node_z"), _column(features, "mem_spread_z")
    for i in np.flatnonzero(on_hot_node & (node_sev == final)):
        reasons[i].append(node_text[i])
        if held[i]:
            reasons[i].append(held_reason(float(vs_node[i]), float(mem_spread[i]), heat))
    # ... then the model's, where the model's own decision is the final one (a pending demote says so first).
    for i in np.flatnonzero(pending & (model_sev == final)):
        began = pd.Timestamp(since[i]) if since is not None and not pd.isna(since[i]) else None
        at = began.tz_localize("UTC") if began is not None else pd.Timestamp(features["cutoff"].iat[i])
        reasons[i].append(pending_reason(at, thresholds, str(mode[i]), float(load_share[i]), float(surprise[i])))
    # ... or why it did not wait, where two readings agree.
    _add_agree_reasons(reasons, features, np.flatnonzero(agreed & (model_sev == final)), thresholds)
    # ... or the probation's, where it set the decision (the model's reasons then say why the risk).
    probation_set = probation & (final == SEVERITY["demote"]) & (model_sev < final)
    for i in np.flatnonzero(probation_set):
        began = pd.Timestamp(released[i]).tz_localize("UTC")  # type: ignore[index]
        reasons[i].append(probation_reason(began, float(r[i]), thresholds))
    # ... or the hold's, where neither the model's own demote nor a probation set it.
    hold_set = hold & (final == SEVERITY["demote"]) & (model_sev < final) & ~probation_set
    for i in np.flatnonzero(hold_set):
        began = pd.Timestamp(demoted[i]).tz_localize("UTC")  # type: ignore[index]
        reasons[i].append(hold_reason(began, float(r[i]), thresholds))
    set_by_model = ((model_sev == final) & (model_sev > 0)) | probation_set | hold_set
    _add_model_reasons(reasons, risk, r, np.flatnonzero(set_by_model))
    # A node finding below a worse decision still says what the GPU's node is going through.
    for i in np.flatnonzero(on_hot_node & (node_sev < final)):
        reasons[i].append(node_text[i])
    # Unscored rows: say so even when the rules leave them ok, so "ok" never hides "not scored".
    for i in np.flatnonzero(np.isnan(r)):
        note = _note(risk["risk_note"].iat[i]) if "risk_note" in risk.columns else ""
        reasons[i].append(f"no risk score: {note}" if note else "no risk score")

    decision = pd.Categorical.from_codes(final, dtype=DECISION_DTYPE)
    out = pd.DataFrame({"decision": decision}, index=features.index)
    out["reasons"] = pd.Series(reasons, index=features.index, dtype=object)
    return out


def _add_agree_reasons(
    reasons: list[list[str]], features: pd.DataFrame, rows: np.ndarray, thresholds: Thresholds
) -> None:
    """Append to `rows`' reasons why their thermal demote did not wait: the two readings (`agree_reason`)."""
    heat_z, spread_z = _column(features, "heat_excess_z"), _column(features, "mem_spread_z")
    for i in rows:
        reasons[i].append(agree_reason(float(heat_z[i]), float(spread_z[i]), thresholds))


def _standing_demotes(
    features: pd.DataFrame,
    r: np.ndarray,
    out_now: np.ndarray,
    thresholds: Thresholds,
    released: np.ndarray | None,
    demoted: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Per row: whether the GPU is demoted on probation (`released`, `on_probation`), and whether
    its standing demote is held (`demoted`: since when it stands; risk `r` at the release level)."""
    n = len(features)
    probation = hold = np.zeros(n, dtype=bool)
    if released is not None and thresholds.probation_for_s > 0:
        probation = on_probation(features["cutoff"], released, out_now, r, thresholds)
    if demoted is not None:
        with np.errstate(invalid="ignore"):
            hold = ~np.isnat(np.asarray(demoted, dtype="datetime64[ns]")) & (r >= thresholds.release_level)
    return probation, hold


def _column(features: pd.DataFrame, name: str) -> np.ndarray:
    """A numeric feature column as float64 (NaN where missing, all NaN when the frame lacks it)."""
    if name not in features.columns:
        return np.full(len(features), np.nan)
    return pd.to_numeric(features[name], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)


def _hot_node_rows(features: pd.DataFrame, nodes: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Per row: whether its node (at its cutoff) is suspected of a cooling problem, and the node's reason."""
    n = len(features)
    hot = nodes.loc[nodes["suspected"].to_numpy(dtype=bool)] if "suspected" in nodes.columns else nodes.iloc[:0]
    if not len(hot) or "hostname" not in features.columns:
        return np.zeros(n, dtype=bool), [""] * n
    # Findings per cutoff when both sides know it (a backtest scores many cutoffs at once).
    by_cutoff = "cutoff" in features.columns and bool(hot["cutoff"].notna().all())

    def keys(frame: pd.DataFrame) -> pd.Index:
        host = frame["hostname"].astype(str).to_numpy()
        return pd.MultiIndex.from_arrays([host, frame["cutoff"].array]) if by_cutoff else pd.Index(host)

    found = keys(hot)
    if not found.is_unique:
        raise ValueError("node findings name a node (at a cutoff) more than once")
    at = found.get_indexer(keys(features))
    texts = [
        node_reason(str(h), float(z), float(k), float(g))
        for h, z, k, g in zip(hot["hostname"], hot["heat_z"], hot["hot_gpus"], hot["gpus"], strict=True)
    ]
    return at >= 0, [texts[k] if k >= 0 else "" for k in at]


def held_by_node(
    features: pd.DataFrame, risk: pd.DataFrame, thresholds: Thresholds, node_heat: NodeHeat | None = None
) -> np.ndarray:
    """Per row: whether the model's demote is held at watch by a node finding (as `decide` does);
    the evaluation counts alerts the way the service decides them."""
    heat = node_heat or NodeHeat()
    model_sev = _model_severity(risk["risk"].to_numpy(dtype=np.float64, na_value=np.nan), thresholds)
    on_hot_node, _ = _hot_node_rows(features, node_findings(features, heat))
    return _node_held(features, top_heads(risk)[0], model_sev, on_hot_node, heat)


def _node_held(
    features: pd.DataFrame, mode: np.ndarray, model_sev: np.ndarray, on_hot_node: np.ndarray, heat: NodeHeat
) -> np.ndarray:
    """Rows whose model demote is held at watch: on a hot node, thermal head riskiest (`mode`, per
    row as `top_heads` names it), standing out neither of its node's heat nor of its own memory-core spread."""
    candidates = on_hot_node & (model_sev == SEVERITY["demote"])
    if not candidates.any():
        return candidates
    with np.errstate(invalid="ignore"):
        # Its core beyond its node's, or its memory-core spread beyond its own past: the node's
        # air moves core and memory together, a failing heat sink on the GPU widens the spread.
        stands_out = (_column(features, "temp_excess_vs_node_z") >= heat.stands_out_z) | (
            _column(features, "mem_spread_z") >= heat.stands_out_z
        )
    return candidates & (mode == "thermal") & ~stands_out


def _check_frames(features: pd.DataFrame, risk: pd.DataFrame) -> None:
    """ValueError unless features has a unique index and risk scores the same rows, with a `risk` column."""
    if not features.index.is_unique:
        raise ValueError("decide needs a features frame with a unique index (one row per GPU and cutoff)")
    if not risk.index.equals(features.index):
        raise ValueError(
            f"risk frame's index ({len(risk)} rows) differs from the features' ({len(features)} rows): "
            "score the same rows, in the same order"
        )
    if "risk" not in risk.columns:
        raise ValueError(f"risk frame has no 'risk' column (columns: {', '.join(map(str, risk.columns))})")


def _hit_severity(features: pd.DataFrame, hits: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per rule hit: the position of its row in `features` and the severity of its action."""
    pos = features.index.get_indexer(pd.Index(hits["row"]))
    if (pos < 0).any():
        bad = hits["row"].to_numpy()[pos < 0][0]
        raise ValueError(f"rule hits name row {bad!r}, which is not in the features frame")
    hit_sev = hits["action"].map(SEVERITY).to_numpy(dtype=np.int64, na_value=-1)
    if (hit_sev < 0).any():
        bad = hits["action"].to_numpy()[hit_sev < 0][0]
        raise ValueError(f"rule hits hold action {bad!r}; expected one of rma, drain, watch")
    return pos, hit_sev


def _add_model_reasons(reasons: list[list[str]], risk: pd.DataFrame, r: np.ndarray, contributed: np.ndarray) -> None:
    """Append the model's reasons to the rows (positions in `contributed`) whose decision it set."""
    if not len(contributed):
        return
    mode, head = top_heads(risk.iloc[contributed])
    model_reasons = risk["reasons"].to_numpy()[contributed] if "reasons" in risk.columns else None
    for k, i in enumerate(contributed):
        prefix = f"risk {r[i]:.2f}" + (f" ({mode[k]} {head[k]:.2f})" if mode[k] else "")
        own = _as_reasons(model_reasons[k]) if model_reasons is not None else []
        if own:
            reasons[i].extend([f"{prefix}: {own[0]}", *own[1:]])
        else:
            reasons[i].append(prefix)


@dataclass(frozen=True)
class DecisionChanges:
    """What one scoring round does to the GPUs' standing decisions (`store.DecisionChanges`' shape)."""

    close: tuple[int, ...] = ()
    """Decisions to close, by id."""
    refresh: tuple[tuple[int, list[str]], ...] = ()
    """Decisions that stand, by id, with the round's reasons."""
    open: tuple[tuple[str, str, list[str]], ...] = ()
    """Decisions to open: (GPU uuid, decision, reasons)."""


def decision_changes(
    active: Mapping[str, tuple[int, str]], scored: Sequence[tuple[str, str, Sequence[str]]]
) -> DecisionChanges:
    """Per scored GPU (uuid, decision, reasons), given its active decision {uuid: (id, decision)}.

    The same decision again refreshes the active one's reasons (an acknowledgement stays:
    someone is already acting on it); another decision closes it, and opens a new one unless
    the new decision is "ok". Opened decisions keep the order of `scored`.
    """
    close: list[int] = []
    refresh: list[tuple[int, list[str]]] = []
    open_: list[tuple[str, str, list[str]]] = []
    for uuid, decision, reasons in scored:
        current = active.get(uuid)
        if current is not None and current[1] == decision:
            refresh.append((current[0], list(reasons)))
            continue
        if current is not None:
            close.append(current[0])
        if decision != "ok":
            open_.append((uuid, decision, list(reasons)))
    return DecisionChanges(tuple(close), tuple(refresh), tuple(open_))
