"""The cross-domain plan, its table and the CLI's family names (the training itself runs in `make cross-domain`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gpuhealth.cli.crossdomain import parse_families, parse_seeds
from modelops.crossdomain import (
    FLOOR_NAMES,
    Plan,
    all_floors_hold,
    family_sets,
    floor_grid,
    held_out_fleet,
    overview_markdown,
    pooled,
    table_markdown,
    totals,
    write_cross_domain,
)
from predictor.evaluate import FLOORS, field_precision
from predictor.thresholds import Thresholds
from simulator.families import FAMILIES


def table_row(family: str, precision: float, ok: bool = True) -> dict[str, Any]:
    """One held-out family's summary, as `leave_one_family_out` makes it."""
    model = {
        "recall_ecc_warned": 0.95, "recall_thermal_warned": 0.85, "recall_pcie_warned": 1.0,
        "recall_ecc": 0.9, "recall_thermal": 0.7, "recall_pcie": 1.0, "precision": precision,
        "field_precision": 0.5, "false_episodes_per_1000_gpu_days": 0.2, "recall_precursor_modes": 0.9,
        "episodes": 60, "true_episodes": 58, "failures_ecc_warned": 20, "failures_thermal_warned": 20,
        "failures_pcie_warned": 1, "precursor_failures": 49, "precursor_caught": 44, "false_demotions": 1,
    }  # fmt: skip
    rules = {"recall_precursor_modes": 0.7, "precision": 0.95, "episodes": 40, "true_episodes": 38,
             "precursor_failures": 49, "precursor_caught": 34}  # fmt: skip
    return {
        "family": family,
        "trained": "without it",
        "model": model,
        "failures": {"ecc": 40, "thermal": 9},
        "judged_gpu_days": 10_000.0,
        "rules": rules,
        "floors": {k: {"ok": ok, "value": 0.0, "floor": v} for k, v in FLOORS.items()},
        "pr_auc": 0.91,
        "pr_auc_all": 0.83,
    }


def test_the_table_has_a_column_per_family_and_the_floors() -> None:
    rows = [table_row("temperate", 0.93), table_row("hot-aisle", 0.81, ok=False)]
    text = table_markdown(rows)
    header = next(line for line in text.splitlines() if line.startswith("| measure"))
    assert "temperate" in header and "hot-aisle" in header
    assert "| precision over alert episodes | 0.93 | 0.81 | ≥ 0.9 |" in text
    assert "| false episodes / 1,000 GPU-days | 0.20 | 0.20 | ≤ 1 |" in text
    assert "| PR-AUC, failures that gave warning | 0.91 | 0.91 | ≥ 0.85 |" in text
    assert "| PR-AUC, all | 0.83 | 0.83 | — |" in text
    assert "| all floors hold | yes | NO | |" in text
    assert not all_floors_hold(rows)
    assert all_floors_hold(rows[:1])


def test_the_overview_names_the_floors_that_miss_per_family_and_seed() -> None:
    bad = table_row("hot-aisle", 0.81) | {"seed": 901}
    bad["floors"] = bad["floors"] | {
        "recall_thermal": {"ok": False, "value": 4 / 7, "floor": 0.8},
        "beats_rule_baseline": {"ok": False, "value": "recall 0.84 vs 0.77, precision 0.97 vs 1.00", "floor": "…"},
    }
    rows = [table_row("temperate", 0.93) | {"seed": 900}, table_row("hot-aisle", 0.9) | {"seed": 900}, bad]
    text = overview_markdown(rows)
    assert "| held-out family | seed 900 | seed 901 |" in text
    assert "| temperate | 2 false; all floors hold |  |" in text
    assert "| hot-aisle | 2 false; all floors hold | 2 false; misses recall thermal 0.57, above rules |" in text
    assert text in table_markdown(rows)


def test_the_totals_sum_what_a_change_moves_over_the_fleets() -> None:
    good = table_row("temperate", 0.93) | {"seed": 900}
    good["model"] |= {"failures_ecc_warned": 20, "failures_thermal_warned": 7, "failures_pcie_warned": 0,
                      "recall_pcie_warned": float("nan")}  # fmt: skip
    bad = table_row("hot-aisle", 0.81, ok=False) | {"seed": 900}
    bad["model"] |= {"failures_ecc_warned": 10, "failures_thermal_warned": 4, "failures_pcie_warned": 3,
                     "recall_ecc_warned": 0.9, "recall_thermal_warned": 0.5, "recall_pcie_warned": 2 / 3,
                     "episodes": 40, "true_episodes": 35}  # fmt: skip
    t = totals([good, bad])
    # Recall is caught / failures, so recall x failures is the count again (19 of 20, 9 of 10).
    assert t == {"fleets": 2, "every_floor": 1, "false_episodes": 2 + 5,
                 "caught_ecc": [19 + 9, 30], "caught_thermal": [6 + 2, 11], "caught_pcie": [2, 3]}  # fmt: skip
    text = overview_markdown([good, bad])
    assert "every floor holds on 1; 7 false alert episodes;" in text
    assert "ECC 28 of 30, thermal 8 of 11, PCIe 2 of 3." in text


def test_pooled_judges_each_family_as_one_fleet_by_the_same_floors() -> None:
    """A family's fleets pooled: counts summed, then the floors; one fleet's 1-of-2 thermal recall
    misses alone and holds within its family's 10 of 12."""
    small = table_row("hot-aisle", 1.0) | {"seed": 900}
    small["model"] |= {"recall_thermal_warned": 0.5, "failures_thermal_warned": 2, "episodes": 30, "true_episodes": 30,
                       "precursor_failures": 20, "precursor_caught": 18, "false_demotions": 0}  # fmt: skip
    big = table_row("hot-aisle", 0.95) | {"seed": 901, "judged_gpu_days": 30_000.0, "pr_auc": 0.87}
    big["model"] |= {"recall_thermal_warned": 0.9, "failures_thermal_warned": 10, "episodes": 40, "true_episodes": 38,
                     "precursor_failures": 30, "precursor_caught": 27, "false_demotions": 3}  # fmt: skip
    other = table_row("temperate", 0.5) | {"seed": 900}
    other["model"]["true_episodes"] = 30  # 30 of 60: the counts judge, not a fleet's precision
    [p, q] = pooled([small, big, other])
    assert (p["family"], p["fleets"], q["family"]) == ("hot-aisle", 2, "temperate")
    f = p["floors"]
    assert f["recall_thermal"] == {"value": 10 / 12, "floor": 0.8, "ok": True}
    assert f["recall_ecc"]["value"] == pytest.approx((19 + 19) / 40)
    assert f["precision"]["value"] == pytest.approx(68 / 70)
    assert f["false_episodes_per_1000_gpu_days"]["value"] == pytest.approx(2 / 40_000 * 1000)
    assert f["false_demotions_per_1000_gpu_days"]["value"] == pytest.approx(3 / 40_000 * 1000)
    assert f["field_precision"]["value"] == pytest.approx(field_precision(68, 2, 50, 40_000.0))
    assert f["pr_auc"]["value"] == 0.87  # the lowest fleet's: PR-AUC does not pool
    # Above rules: recall 45/50 vs 68/98, precision 68/70 vs 76/80.
    assert p["model"]["recall_precursor_modes"] == pytest.approx(45 / 50)
    assert p["rules"]["recall_precursor_modes"] == pytest.approx(68 / 98)
    assert p["rules"]["precision"] == pytest.approx(76 / 80) and f["beats_rule_baseline"]["ok"]
    assert not q["floors"]["precision"]["ok"]
    text = table_markdown([small, big, other])
    assert "| measure | hot-aisle (2 fleets) | temperate (1 fleets) | floor |" in text
    assert "| recall thermal (24 h), failures that gave warning | 0.83 | 0.85 | ≥ 0.8 |" in text
    assert "| every floor holds | yes | NO | |" in text
    old = {k: v for k, v in small.items() if k != "judged_gpu_days"}
    with pytest.raises(ValueError, match="hot-aisle: rows without judged GPU-days"):
        pooled([old, big])


def test_the_models_own_seed_is_the_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    from modelops import crossdomain

    seeds: list[int] = []

    class Trained:
        def __init__(self) -> None:
            self.meta: dict[str, Any] = {}

    def fake_train(sets: object, **kw: Any) -> Trained:
        seeds.append(kw["seed"])
        return Trained()

    monkeypatch.setattr(crossdomain, "family_sets", lambda *a, **k: [])
    monkeypatch.setattr(crossdomain, "train_sets", fake_train)
    crossdomain.train_on_families(Plan())
    model = crossdomain.train_on_families(Plan(model_seed=7), exclude="temperate")
    assert seeds == [0, 7]
    assert model.meta["family_plan"]["model_seed"] == 7  # kept with the model: a kept file says it


def test_nan_shows_as_n_a() -> None:
    r = table_row("temperate", float("nan"))
    assert "| precision over alert episodes | n/a |" in table_markdown([r])


def test_write_cross_domain(tmp_path: Path) -> None:
    paths = write_cross_domain([table_row("temperate", 0.93)], Plan(), tmp_path)
    assert [p.name for p in paths] == ["cross-domain.json", "cross-domain.md", "cross-domain.png"]
    assert paths[2].read_bytes().startswith(b"\x89PNG")
    assert "Leave-one-family-out" in paths[1].read_text()
    assert json.loads(paths[0].read_text())["thresholds"]["pcie_demote_for_s"] == 3 * 3600  # the shipped policy
    policy = Thresholds(pcie_demote_for_s=6 * 3600)
    paths = write_cross_domain([table_row("temperate", 0.93)], Plan(), tmp_path, policy)
    saved = json.loads(paths[0].read_text())["thresholds"]
    assert (saved["pcie_demote_for_s"], saved["demote_for_s"], saved["demote"]) == (6 * 3600, 3 * 3600, 0.7)


def test_the_floor_grid_marks_each_floor_of_each_fleet() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bad = table_row("hot-aisle", 0.81) | {"seed": 900}
    above = {"beats_rule_baseline": {"ok": True, "value": "recall …", "floor": "…"}}
    bad["floors"] = bad["floors"] | above | {"precision": {"ok": False, "value": 0.81, "floor": 0.9}}
    good = table_row("temperate", 0.93) | {"seed": 900}
    good["floors"] = good["floors"] | above
    fig = floor_grid([good, bad], plt)
    ax = fig.axes[0]
    cells = ax.images[0].get_array()
    row = list(FLOOR_NAMES).index("precision")
    assert cells[:, 0].all() and cells[row, 1] == 0 and cells.sum() == cells.size - 1
    texts = [t.get_text() for t in ax.texts]
    assert "0.81" in texts and texts.count("yes") == 2
    assert ax.get_title().endswith("every floor holds on 1 of 2")
    plt.close(fig)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"families": ("temperate", "arctic")}, "unknown families"),
        ({"fleets_per_family": 0}, "at least 1"),
        ({"train_seed": 900, "test_seeds": (901, 900)}, "training seed"),
        ({"test_seeds": ()}, "must be given"),
        ({"test_burst_remap_share": 1.5}, "burst remap share must be between 0 and 1"),
        ({"test_burst_remap_share": float("nan")}, "burst remap share must be between 0 and 1"),
    ],
)
def test_a_bad_plan_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Plan(**kwargs)


def test_a_stressed_held_out_fleet_has_healthy_remaps_and_the_same_failures() -> None:
    """`test_burst_remap_share`: the held-out fleet's healthy SBE bursts leave pending remaps on GPUs
    that never fail; its failures, and everything the main generator draws, are the plain fleet's."""
    plan = Plan(test_nodes=8, test_days=30, test_seeds=(31,))
    plain, plain_failures = held_out_fleet(plan, "hbm-bursts")
    frame, failures = held_out_fleet(replace(plan, test_burst_remap_share=0.5), "hbm-bursts")
    pd.testing.assert_frame_equal(failures, plain_failures)
    failed = set(failures["gpu_uuid"].astype(str))
    pending = set(frame.loc[frame["row_remap_pending"] >= 1, "gpu_uuid"].astype(str))
    assert pending - failed, "no healthy GPU has a remap pending"
    assert len(pending) > plain.loc[plain["row_remap_pending"] >= 1, "gpu_uuid"].nunique()
    assert (frame["power_w"].to_numpy() == plain["power_w"].to_numpy()).all()


def test_family_sets_leave_the_family_out() -> None:
    plan = Plan(families=("temperate", "hot-aisle"), fleets_per_family=1, train_nodes=1, train_days=10)
    sets = family_sets(plan, exclude="hot-aisle")
    assert [s.name for s in sets] == ["temperate-100"]
    assert sets[0].frame["hostname"].nunique() == 1


def test_parse_families() -> None:
    assert parse_families("all") == tuple(FAMILIES)
    assert parse_families("hot-aisle, temperate") == ("hot-aisle", "temperate")
    with pytest.raises(ValueError, match="unknown families"):
        parse_families("hot-aisle,arctic")
    with pytest.raises(ValueError, match="unknown families"):
        parse_families(" , ")


def test_parse_seeds() -> None:
    assert parse_seeds(None) == {}
    assert parse_seeds("917, 918") == {"test_seeds": (917, 918)}
    assert Plan(**parse_seeds("917")).test_seeds == (917,)
    with pytest.raises(ValueError, match="not a comma-separated list of integers"):
        parse_seeds("917,next")
    with pytest.raises(ValueError, match="at least one seed"):
        parse_seeds(" , ")
    with pytest.raises(ValueError, match="none of them a training seed"):
        Plan(**parse_seeds("100"))


def test_the_cli_says_how_many_fleets_and_families_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gpuhealth evaluate --cross-domain` ends with the fleets and the pooled families that hold."""
    from rich.console import Console

    import gpuhealth.cli.crossdomain as cli_cd
    from modelops import crossdomain

    good = table_row("temperate", 0.93) | {"seed": 900, "judged_gpu_days": 300_000.0}  # field precision 0.96
    bad = table_row("hot-aisle", 0.93, ok=False) | {"seed": 900}
    bad["model"]["true_episodes"] = 30  # pooled precision 0.5: the family misses too
    monkeypatch.setattr(crossdomain, "leave_one_family_out", lambda *a, **k: [good, bad])
    monkeypatch.setattr("predictor.score.load_model", lambda path: None)
    console = Console(record=True, width=300)
    monkeypatch.setattr(cli_cd, "err", console)
    assert not cli_cd.evaluate_cross_domain(tmp_path, None, "temperate,hot-aisle", 2)
    said = console.export_text()
    assert "all floors hold on every held-out fleet: False (1 of 2); pooled per family, on 1 of 2" in said
    assert "(not on hot-aisle)" in said
