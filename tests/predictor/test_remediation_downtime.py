"""The honest downtime figure: the lognormal, hand-computed costs, the split of the saving, the docs table."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from gpuhealth.cli import app
from predictor.downtime import Alerts, DowntimeParams, Span
from predictor.remediation_downtime import (
    DOCS_BEGIN,
    DOCS_END,
    DOCS_SKILLS,
    POLICIES,
    STEPS,
    FaultClass,
    RemediationParams,
    Skill,
    capped_mean,
    docs_block,
    field_cell,
    field_downtime,
    field_markdown,
    fixed_share,
    human_repair_hours,
    lognormal_from_quantiles,
    skill_of,
)

HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
MIN = pd.Timedelta(minutes=1)
T = pd.Timestamp("2026-03-20T12:00:00Z")
runner = CliRunner()

P = DowntimeParams(checkpoint_interval=2 * HOUR, gpus_per_job=100, gpus_per_node=8, restart_time=HOUR / 2)
# One class a reset always fixes, one a human replaces: half the faults each.
RP = RemediationParams(
    detect_human=HOUR,
    detect_fast=6 * MIN,
    wait_idle=30 * MIN,
    reset_time=6 * MIN,
    reboot_time=15 * MIN,
    verify_time=12 * MIN,
    refault=0.0,
    classes=(FaultClass("a", 1, "reset", 1.0, "test"), FaultClass("b", 1, "replace", 0.0, "test")),
)


def test_the_lognormal_goes_through_the_trace_quantiles() -> None:
    mu, sigma = lognormal_from_quantiles(17.0, 479.0)
    dist = NormalDist(mu, sigma)
    assert math.exp(dist.inv_cdf(0.5)) == pytest.approx(17.0)
    assert math.exp(dist.inv_cdf(0.9)) == pytest.approx(479.0)
    assert sigma == pytest.approx(2.605, abs=1e-3)
    with pytest.raises(ValueError, match="median < p90"):
        lognormal_from_quantiles(17.0, 10.0)


def test_capped_mean_matches_sampling_and_the_uncapped_mean() -> None:
    mu, sigma = lognormal_from_quantiles(17.0, 479.0)
    assert capped_mean(mu, sigma, 1e12) == pytest.approx(17 * math.exp(sigma**2 / 2), rel=1e-6)  # 506 h
    draws = np.random.default_rng(0).lognormal(mu, sigma, 2_000_000)
    assert capped_mean(mu, sigma, 348 * 24) == pytest.approx(np.minimum(draws, 348 * 24).mean(), rel=0.01)
    assert human_repair_hours(RemediationParams()) == pytest.approx(280.2, abs=0.1)


def test_one_cell_by_hand() -> None:
    h = human_repair_hours(RP)
    # react: job 100 x (1 h lost + 1 h detection + 0.5 h restart) = 250; node 8 x H.
    react = 250 + 8 * h
    # fast detection: detection 0.1 h instead of 1 h: the job loses 90 GPU-h less.
    fast = 160 + 8 * h
    # remediate: class a out 0.5 + 0.1 + 0.2 = 0.8 h, class b a human repair.
    remediate = 160 + 8 * (0.5 * 0.8 + 0.5 * h)
    # model drains 10 % x 0.5 of failures: job 100 x 0.5 h, node 8 x H (planned, no credit).
    planned = 50 + 8 * h
    c = field_cell(P, RP, {"model": Skill(0.5)}, share=0.1, rate=2.0)
    assert c["react"] == pytest.approx(2 * react)
    assert c["model"] == pytest.approx(2 * (0.95 * react + 0.05 * planned))
    assert c["model_fast_detection"] == pytest.approx(2 * (0.95 * fast + 0.05 * planned))
    # drained under remediate: reset in the window, no wait: 0.1 + 0.2 h.
    assert c["remediate"] == pytest.approx(2 * (0.95 * remediate + 0.05 * (50 + 8 * (0.5 * 0.3 + 0.5 * h))))
    assert c["rules"] == pytest.approx(c["react"])  # no rules' skill given: no prediction


def test_a_refault_costs_a_whole_further_fault() -> None:
    again = dataclasses.replace(RP, refault=0.5)
    h = human_repair_hours(RP)
    further = 100 * (1 + 0.1 + 0.5) + 8 * h  # detected fast, repaired by a human
    plain = field_cell(P, RP, {}, share=0.0, rate=1.0)["remediate"]
    assert field_cell(P, again, {}, share=0.0, rate=1.0)["remediate"] == pytest.approx(plain + 0.5 * 0.5 * further)


def test_false_episodes_cost_the_same_at_every_failure_rate() -> None:
    s = {"model": Skill(1.0, false_per_1000=2.0, false_days=0.5)}
    lo, hi = (field_cell(P, RP, s, share=0.0, rate=r) for r in (0.0, 1.0))
    assert lo["react"] == 0.0 and lo["model"] == lo["remediate"] == pytest.approx(2 * 12 * 8 * 0.5)
    assert hi["model"] - hi["react"] == pytest.approx(96.0)


def test_the_split_adds_up_to_the_whole() -> None:
    f = field_downtime(DOCS_SKILLS, DowntimeParams(), RemediationParams())
    assert len(f["rows"]) == 6
    for row in f["rows"]:
        assert sum(row["saving_pct_points"][k] for k in STEPS) == pytest.approx(row["reduction_pct"]["remediate"])
        assert list(row["policies"]) == ["react", "rules", "model", "model_fast_detection", "remediate"]


def random_params(rng: np.random.Generator, fixed: float) -> tuple[DowntimeParams, RemediationParams]:
    def t(hi: float) -> pd.Timedelta:
        return pd.Timedelta(hours=float(rng.uniform(0, hi)))

    p = DowntimeParams(
        checkpoint_interval=t(5), gpus_per_job=int(rng.integers(1, 20000)), restart_time=t(2),
        gpus_per_node=int(rng.integers(1, 16)),
    )  # fmt: skip
    median = float(rng.uniform(0.5, 100))
    classes = tuple(
        FaultClass(f"c{i}", int(rng.integers(0, 50)) + 1, r, fixed if r != "replace" else 0.0, "random")
        for i, r in enumerate(rng.choice(["reset", "reboot", "replace"], size=4))
    )
    rp = RemediationParams(
        detect_human=t(10), detect_fast=t(0.2), wait_idle=t(1), reset_time=t(0.1), reboot_time=t(0.5),
        verify_time=t(0.2), repair_median=pd.Timedelta(hours=median),
        repair_p90=pd.Timedelta(hours=median * float(rng.uniform(1.5, 40))), refault=0.0, classes=classes,
    )  # fmt: skip
    return p, rp


def test_remedies_that_succeed_never_cost_more_than_react() -> None:
    # Remedies a few hours long against a human repair of at least 30 min median: when every remedy
    # succeeds and nothing faults again, remediate is never dearer than react or than model detected fast.
    rng = np.random.default_rng(1)
    for _ in range(200):
        p, rp = random_params(rng, fixed=1.0)
        if rp.detect_fast > rp.detect_human or human_repair_hours(rp) < 2.0:
            continue
        s = {"model": Skill(float(rng.uniform(0, 1)))}
        c = field_cell(p, rp, s, share=float(rng.uniform(0, 1)), rate=float(rng.uniform(0.01, 1)))
        assert c["remediate"] <= c["model_fast_detection"] + 1e-9 <= c["model"] + 2e-9
        assert c["model"] <= c["react"] + 1e-9


def test_the_default_fault_classes() -> None:
    rp = RemediationParams()
    # The InfiniteHBD trace's GPU-class faults: 158, of which REFERENCE.md names the classes of 156.
    assert sum(c.count for c in rp.classes) == 156
    assert fixed_share(rp) == pytest.approx((60 * 0.59 + 0.5 * (40 + 11 + 9 + 5)) / 156)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"detect_fast": -MIN}, "detect_fast"),
        ({"repair_p90": pd.Timedelta(hours=10)}, "median < p90"),
        ({"repair_cap": pd.Timedelta(hours=1)}, "repair_cap"),
        ({"refault": 1.5}, "refault"),
        ({"classes": ()}, "classes"),
        ({"classes": (FaultClass("x", 1, "replace", 0.5, ""),)}, "fixed must be 0"),
        ({"classes": (FaultClass("x", 1, "pray", 0.5, ""),)}, "remedy one of"),
    ],
)
def test_bad_params_are_refused(change: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        RemediationParams(**change)  # type: ignore[arg-type]


def test_skill_from_evaluated_alerts() -> None:
    per_failure = pd.DataFrame(
        {"mode": ["ecc", "ecc", "pcie", "other"], "caught": [True, False, True, False],
         "first_alert_lead": pd.to_timedelta([2 * DAY, None, 6 * HOUR, None])}
    )  # fmt: skip
    eps = pd.DataFrame({"start": pd.to_datetime([T], utc=True), "end": pd.to_datetime([T + 10 * HOUR], utc=True)})
    s = skill_of(Alerts(per_failure, eps), np.array([True, True, True, False]), Span(500.0, 400.0, 2 * HOUR), DAY)
    assert s.recall == pytest.approx((1 + 0 + 0.25) / 3)
    assert (s.false_per_1000, s.false_days) == (pytest.approx(2.0), pytest.approx(0.5))


def test_the_table_names_every_policy_and_step() -> None:
    md = field_markdown(field_downtime(DOCS_SKILLS, DowntimeParams(), RemediationParams()))
    assert md.count("\n") == 7 and all(p in md.splitlines()[0] for p in POLICIES)
    assert "| 0.14 | 2 % | 565 |" in md


def test_the_docs_page_holds_the_current_table(tmp_path: Path) -> None:
    page = Path(__file__).parents[2] / "docs" / "downtime.md"
    assert docs_block() in page.read_text()
    assert runner.invoke(app, ["docs", "downtime", "--check", "--out", str(page)]).exit_code == 0
    stale = tmp_path / "downtime.md"
    stale.write_text(f"# x\n\n{DOCS_BEGIN}\nold\n{DOCS_END}\n")
    result = runner.invoke(app, ["docs", "downtime", "--check", "--out", str(stale)])
    assert result.exit_code == 1 and "out of date" in result.stderr
    assert runner.invoke(app, ["docs", "downtime", "--out", str(stale)]).exit_code == 0
    assert docs_block() in stale.read_text()
