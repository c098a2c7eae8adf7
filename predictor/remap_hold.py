"""Whether a fleet's own outcomes say to hold a pending remap's drain (`Thresholds.remap_hold_risk`).

NVIDIA drains a GPU whose row remap waits for a reset. Where a remap comes of wearing memory that
drain is the earliest ECC catch there is; where weak rows on healthy GPUs are remapped too (NCSA
Delta: about 59 % of H100 row remaps succeed) most of those drains are false alarms, and holding
them at watch while the ECC risk shows no wear removes them. Which world a fleet is in is a fact
of that fleet, not of any generator: on the development simulator a pending remap is always wear,
on the independent one it mostly is not, and no fixed default serves both (docs/model.md, "A
fleet from another generator").

So the fleet's own history decides. `remap_hold_verdict` reads the evaluation's what-if of the
drain the other way (`evaluate.remap_hold_whatif`) over a span of the fleet's own history and
failure records (`gpuhealth model promote`: the holdout slice; `gpuhealth evaluate`: its span)
and holds the drain only where every one of these holds:

- at least `MIN_REMAP_GPUS` GPUs were drained for a pending remap alone (fewer cannot tell);
- under `WEAR_SHARE` of them failed of ECC within the window after it: a remap here is not wear;
- the hold catches every failure the drain caught, each at its mode's lead;
- the hold raises fewer false alert episodes.

Otherwise NVIDIA's drain stands. Either way the verdict says why, with the numbers. It is recorded,
not applied: a pending remap alone is now a reset at idle that drains only on wearing memory
(NVIDIA's guide; `Thresholds.remap_hold_risk` 0.3 by default), a drain at once is no longer NVIDIA's
rule, so no verdict changes the level (`thresholds_with`; docs/decisions/0082).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from predictor.thresholds import Thresholds

MIN_REMAP_GPUS = 10
"""GPUs drained for a pending remap alone that a span must hold before the hold is weighed."""
WEAR_SHARE = 0.5
"""At or above this share of those GPUs failing of ECC within the window, a remap is wear: no hold."""


@dataclass(frozen=True)
class RemapHoldVerdict:
    """Hold a pending remap's drain at watch while the ECC risk is under `risk`, or NVIDIA's drain (risk 0)."""

    hold: bool
    risk: float
    decided_by: str
    """"fleet outcomes" (this verdict's evidence) or "operator" (GPUHEALTH_REMAP_HOLD_RISK is set)."""
    reasons: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _drain(why: str, evidence: dict[str, Any]) -> RemapHoldVerdict:
    return RemapHoldVerdict(False, 0.0, "fleet outcomes", [f"NVIDIA's drain stands: {why}"], evidence)


def hold_said(level: float) -> str:
    """A hold level in words: "held while the ECC risk is under 0.3", or "NVIDIA's drain at once" (0)."""
    return "NVIDIA's drain at once" if level <= 0 else f"held while the ECC risk is under {level:g}"


def verdict_level(verdict: Mapping[str, Any]) -> float:
    """The ECC risk under which a verdict (`RemapHoldVerdict.to_dict`, a card's `remap_hold`) holds the
    drain: its `risk` where it holds, 0 (NVIDIA's drain at once) where it does not."""
    return float(verdict["risk"]) if verdict.get("hold") else 0.0


def modes_said(by_mode: Mapping[str, int]) -> str:
    """Counts per failure mode in words ("1 ecc, 2 pcie"); "none" where there are none."""
    return ", ".join(f"{n} {mode}" for mode, n in sorted(by_mode.items())) or "none"


def remap_hold_verdict(whatif: Mapping[str, Any] | None, window_days: float = 7.0) -> RemapHoldVerdict:
    """What the fleet's own outcomes in one evaluated span say (`whatif`: `evaluate.remap_hold_whatif`'s
    dict, None where no GPU was drained for a pending remap alone)."""
    if not whatif:
        return _drain("no GPU was drained for a pending remap alone in the span: nothing to judge a hold on", {})
    held_run = float(whatif["hold_risk_run"]) > 0
    level = float(whatif["hold_risk_run"] if held_run else whatif["hold_risk_other"])
    # The run and the other way, as drain and hold whichever the run was.
    false_drain, false_hold = int(whatif["false_episodes_run"]), int(whatif["false_episodes_other"])
    lost: Mapping[str, int] = whatif["catches_lost"]
    if held_run:
        false_drain, false_hold, lost = false_hold, false_drain, whatif["catches_gained"]
    gpus, wore = int(whatif["pending_remap_gpus"]), int(whatif["pending_remap_gpus_failed_ecc"])
    evidence = {"pending_remap_gpus": gpus, "failed_ecc": wore, "false_episodes_drain": false_drain,
                "false_episodes_hold": false_hold, "catches_lost_by_hold": dict(lost)}  # fmt: skip
    drained = f"{gpus} GPUs drained for a pending remap alone, {wore} of them failed of ECC within {window_days:g} days"
    if gpus < MIN_REMAP_GPUS:
        return _drain(f"only {drained}; {MIN_REMAP_GPUS} such GPUs needed to judge", evidence)
    if wore >= WEAR_SHARE * gpus:
        return _drain(f"{drained}: a remap on this fleet is wear", evidence)
    if lost:
        return _drain(f"{drained}, but holding would have caught {modes_said(lost)} failure(s) late", evidence)
    if false_hold >= false_drain:
        return _drain(f"{drained}, but holding leaves {false_hold} of the drain's {false_drain} false alert episodes",
                      evidence)  # fmt: skip
    why = (
        f"{drained}; holding the drain while the ECC risk is under {level:g} leaves {false_hold} of the "
        f"drain's {false_drain} false alert episodes and catches every failure the drain caught"
    )
    return RemapHoldVerdict(True, level, "fleet outcomes", [why], evidence)


def operator_verdict(th: Thresholds) -> RemapHoldVerdict:
    """The verdict where the operator set GPUHEALTH_REMAP_HOLD_RISK: theirs, whatever the fleet says."""
    said = f"GPUHEALTH_REMAP_HOLD_RISK is set: {hold_said(th.remap_hold_risk)}"
    return RemapHoldVerdict(th.remap_hold_risk > 0, th.remap_hold_risk, "operator", [said])


def thresholds_with(th: Thresholds, verdict: Mapping[str, Any] | None) -> Thresholds:
    """`th` as it is: a stored verdict (a model card's `remap_hold`) chose between holding a pending
    remap's drain and NVIDIA's drain at once, and a pending remap alone no longer drains at once (NVIDIA's
    guide: a reset at idle; docs/decisions/0082), so no verdict changes the level the service scores with."""
    del verdict
    return th
