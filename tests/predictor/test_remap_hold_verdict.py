"""What a fleet's own outcomes say of a pending remap's drain (`predictor.remap_hold`): each condition
that keeps NVIDIA's drain, the hold where they all pass, either way round of the what-if, and how the
service's thresholds take a stored verdict unless the operator set the hold."""

from __future__ import annotations

from typing import Any

import pytest

from core.settings import Settings
from predictor.remap_hold import (
    MIN_REMAP_GPUS,
    modes_said,
    operator_verdict,
    remap_hold_verdict,
    thresholds_with,
)
from predictor.thresholds import Thresholds


def whatif(gpus: int = 20, wore: int = 2, false_run: int = 6, false_other: int = 1, **kw: Any) -> dict[str, Any]:
    """`evaluate.remap_hold_whatif`'s dict of a run with NVIDIA's drain, the other way held at 0.3."""
    return {"hold_risk_run": 0.0, "hold_risk_other": 0.3, "pending_remap_gpus": gpus,
            "pending_remap_gpus_failed_ecc": wore, "false_episodes_run": false_run,
            "false_episodes_other": false_other, "catches_lost": {}, "catches_gained": {}, **kw}  # fmt: skip


def test_the_hold_where_remaps_are_healthy_gpus_and_it_costs_no_catch() -> None:
    v = remap_hold_verdict(whatif())
    assert (v.hold, v.risk, v.decided_by) == (True, 0.3, "fleet outcomes")
    assert v.reasons == [
        "20 GPUs drained for a pending remap alone, 2 of them failed of ECC within 7 days; holding the drain "
        "while the ECC risk is under 0.3 leaves 1 of the drain's 6 false alert episodes and catches every "
        "failure the drain caught"
    ]
    assert v.evidence == {"pending_remap_gpus": 20, "failed_ecc": 2, "false_episodes_drain": 6,
                          "false_episodes_hold": 1, "catches_lost_by_hold": {}}  # fmt: skip


@pytest.mark.parametrize(
    ("w", "why"),
    [
        (None, "no GPU was drained for a pending remap alone in the span"),
        (whatif(gpus=MIN_REMAP_GPUS - 1, wore=0), "only 9 GPUs drained for a pending remap alone, 0 of them failed"),
        (
            whatif(gpus=12, wore=6),
            "12 GPUs drained for a pending remap alone, 6 of them failed of ECC within 7 days: a remap on this",
        ),
        (whatif(catches_lost={"ecc": 1, "pcie": 2}), "but holding would have caught 1 ecc, 2 pcie failure(s) late"),
        (whatif(false_run=3, false_other=3), "but holding leaves 3 of the drain's 3 false alert episodes"),
    ],
)
def test_nvidias_drain_stands_and_says_which_condition_failed(w: dict[str, Any] | None, why: str) -> None:
    v = remap_hold_verdict(w)
    assert (v.hold, v.risk, v.decided_by) == (False, 0.0, "fleet outcomes")
    assert (
        w is None
        or w["pending_remap_gpus"] < MIN_REMAP_GPUS
        or v.evidence["pending_remap_gpus"] == w["pending_remap_gpus"]
    )
    assert v.reasons[0].startswith("NVIDIA's drain stands: ") and why in v.reasons[0]


def test_a_run_that_held_reads_the_what_if_the_other_way_round() -> None:
    # The run held at 0.3 (1 false episode), NVIDIA's drain the other way (6): the same evidence as above.
    held = whatif(false_run=1, false_other=6, hold_risk_run=0.3, hold_risk_other=0.0)
    assert remap_hold_verdict(held) == remap_hold_verdict(whatif())
    # What the drain caught and the held run did not is `catches_gained` here: a loss of the hold.
    late = remap_hold_verdict({**held, "catches_gained": {"ecc": 1}, "catches_lost": {"pcie": 1}})
    assert not late.hold and "would have caught 1 ecc failure(s) late" in late.reasons[0]


def test_no_stored_verdict_changes_the_level_the_service_scores_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """A verdict chose between the hold and NVIDIA's drain at once; a pending remap alone is now a reset
    at idle (NVIDIA's guide) that drains only on wearing memory, so no verdict turns that into a drain
    at once (docs/decisions/0078)."""
    held, drained = remap_hold_verdict(whatif()).to_dict(), remap_hold_verdict(None).to_dict()
    base = Thresholds.from_settings(Settings())
    assert not base.remap_hold_fixed and base.remap_hold_risk == 0.3
    assert thresholds_with(base, held) == base
    assert thresholds_with(base, drained) == base
    assert thresholds_with(base, None) == base
    # A verdict recorded while the operator's setting stood is theirs, not the fleet's: not applied.
    assert thresholds_with(base, operator_verdict(Thresholds(remap_hold_risk=0.5)).to_dict()) == base
    monkeypatch.setenv("GPUHEALTH_REMAP_HOLD_RISK", "0")  # NVIDIA's drain, by hand: it stands
    fixed = Thresholds.from_settings(Settings())
    assert fixed.remap_hold_fixed and thresholds_with(fixed, held) == fixed
    v = operator_verdict(fixed)
    assert (v.hold, v.risk, v.decided_by) == (False, 0.0, "operator")
    assert v.reasons == ["GPUHEALTH_REMAP_HOLD_RISK is set: NVIDIA's drain at once"]


def test_modes_in_words() -> None:
    assert modes_said({"pcie": 2, "ecc": 1}) == "1 ecc, 2 pcie"
    assert modes_said({}) == "none"
