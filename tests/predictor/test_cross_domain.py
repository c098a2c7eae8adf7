"""The guard of issue 14: the shipped model on a fleet of the family no model trains on.

`make model` trains on the four families of `simulator.families`; the family "unseen" has
its own noise levels, confounder rates and precursor durations and is never trained on.
docs/model.md has the full-size numbers (512 GPUs x 90 days); this is a small fleet of it
with the failure rate raised so that it holds a few dozen incidents, scored every 2 h, with
the floors loosened by what one incident moves on so few.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from predictor.evaluate import evaluate
from predictor.model import RiskModel
from simulator.families import FAMILIES, UNSEEN, family_config
from simulator.run import simulate

SEED = 31
"""Not a training seed of `make model` (100, 101) nor one of the docs' held-out seeds (900-903)."""
TOLERANT = {
    "precision": 0.80,
    "false_episodes_per_1000_gpu_days": 1.0,
    "recall_ecc_warned": 0.75,
    "recall_precursor_modes": 0.70,
}


def test_unseen_is_not_a_training_family(shipped_model: RiskModel) -> None:
    assert UNSEEN.name not in FAMILIES
    trained_on = {s["name"].rsplit("-", 1)[0] for s in shipped_model.meta["training_sets"]}
    assert UNSEEN.name not in trained_on
    assert trained_on == set(FAMILIES)


@pytest.fixture(scope="module")
def report(shipped_model: RiskModel) -> dict[str, Any]:
    frame, failures = simulate(family_config(UNSEEN.name, SEED, nodes=20, acceleration=24), 60)
    t = time.perf_counter()
    rep = evaluate(shipped_model, frame, failures, every="2h")
    m, r = rep["model"], rep["rules"]
    print(
        f"\nunseen family: {rep['gpus']} GPUs, {rep['gpu_days']:.0f} GPU-days in {time.perf_counter() - t:.1f} s; "
        f"failures judged {rep['failures']}\n"
        f"model: recall warned ecc {m['recall_ecc_warned']:.2f} thermal {m['recall_thermal_warned']:.2f} "
        f"pcie {m['recall_pcie_warned']:.2f}, precursor modes {m['recall_precursor_modes']:.2f}; precision "
        f"{m['precision']:.2f} ({m['true_episodes']}/{m['episodes']}), false episodes/1000 GPU-days "
        f"{m['false_episodes_per_1000_gpu_days']:.2f}, field precision {m['field_precision']:.2f}\n"
        f"rules: recall precursor modes {r['recall_precursor_modes']:.2f}, precision {r['precision']:.2f}"
    )
    return rep


def test_the_fleet_has_enough_incidents(report: dict[str, Any]) -> None:
    judged = report["failures"]
    assert judged.get("ecc", 0) >= 10
    assert judged.get("thermal", 0) + judged.get("pcie", 0) >= 4


@pytest.mark.parametrize("measure", sorted(TOLERANT))
def test_floor_holds_on_the_unseen_family(report: dict[str, Any], measure: str) -> None:
    value = report["model"][measure]
    if measure.startswith("false"):
        assert value <= TOLERANT[measure]
    else:
        assert value >= TOLERANT[measure]


def test_above_the_rule_baseline(report: dict[str, Any]) -> None:
    m, r = report["model"], report["rules"]
    assert m["recall_precursor_modes"] > r["recall_precursor_modes"]
