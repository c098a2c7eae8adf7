"""Judging alerts: precision re-weighted to the field's failure rate, and episodes too late to judge."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from predictor.evaluate import FIELD_RATE, episodes, field_precision, judge, out_of_service, precision

HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
WEEK = 7 * DAY
END = pd.Timestamp("2026-05-01T00:00:00Z")
"""The end of the history."""


# -- field precision ------------------------------------------------------------------------------


def test_field_precision_by_hand() -> None:
    # 10 predictable failures in 10,000 GPU-days: 1 per 1,000 here, 0.15 in the field, so the
    # 9 true episodes count as 9 x 0.15 = 1.35 against the 1 false one.
    assert field_precision(9, 1, 10, 10_000.0, field_rate=0.15) == pytest.approx(1.35 / 2.35)
    assert field_precision(9, 1, 10, 10_000.0, field_rate=0.5) == pytest.approx(4.5 / 5.5)


def test_the_default_field_rate_is_the_documented_one() -> None:
    assert field_precision(9, 1, 10, 10_000.0) == field_precision(9, 1, 10, 10_000.0, field_rate=FIELD_RATE)


def test_field_precision_at_the_field_rate_is_plain_precision() -> None:
    # 3 failures in 20,000 GPU-days = 0.15 per 1,000: nothing to re-weight.
    assert field_precision(3, 1, 3, 20_000.0, field_rate=0.15) == pytest.approx(0.75)


def test_a_fleet_failing_more_often_is_judged_more_strictly() -> None:
    """The same alerts are worth less where failures are common: fewer true ones per false one in the field."""
    rare = field_precision(8, 2, 5, 10_000.0, field_rate=0.15)  # 0.5 per 1,000: each true episode counts 0.3
    common = field_precision(8, 2, 50, 10_000.0, field_rate=0.15)  # 5 per 1,000: each counts 0.03
    assert rare == pytest.approx(2.4 / 4.4)
    assert common == pytest.approx(0.24 / 2.24)
    assert common < rare < 8 / 10


def test_all_true_or_all_false() -> None:
    assert field_precision(4, 0, 10, 1_000.0) == 1.0
    assert field_precision(0, 4, 10, 1_000.0) == 0.0


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ((0, 0, 10, 1_000.0), "no episodes to judge"),
        ((3, 1, 0, 1_000.0), "no predictable failures: no rate to re-weight by"),
        ((3, 1, 10, 0.0), "no GPU-days"),
        ((3, 1, -1, 1_000.0), "a negative count"),
        ((3, 1, 10, -5.0), "negative GPU-days"),
    ],
)
def test_field_precision_is_nan_without_something_to_judge(args: tuple, why: str) -> None:
    assert math.isnan(field_precision(*args)), why


def test_a_zero_field_rate_with_no_false_episodes_is_nan_not_a_division_error() -> None:
    assert math.isnan(field_precision(3, 0, 10, 1_000.0, field_rate=0.0))
    assert field_precision(3, 2, 10, 1_000.0, field_rate=0.0) == 0.0


# -- episodes the history can judge ---------------------------------------------------------------


def alerting(*rows: tuple[str, pd.Timestamp]) -> pd.DataFrame:
    df = pd.DataFrame({"gpu_uuid": [u for u, _ in rows], "cutoff": [c for _, c in rows], "a": True})
    return episodes(df, "a")


def fails(*rows: tuple[str, pd.Timestamp]) -> pd.DataFrame:
    at = pd.to_datetime([t for _, t in rows], utc=True).as_unit("ns")  # typed even when empty, as failures_frame
    return pd.DataFrame({"gpu_uuid": [u for u, _ in rows], "failed_at": at, "mode": "ecc"})


EPS = alerting(
    ("GPU-late", END - 2 * DAY),  # alerting near the end, not failed (yet): unknown
    ("GPU-old", END - 10 * DAY),  # long enough before the end: false
    ("GPU-edge", END - WEEK),  # exactly a window before the end: judged
    ("GPU-true", END - DAY),  # near the end, but it failed: true
    ("GPU-true", END - 20 * HOUR),
)
FAILS = fails(("GPU-true", END - 2 * HOUR))


def test_an_episode_near_the_end_without_a_failure_is_left_out() -> None:
    kept = judge(EPS, FAILS, WEEK, END)[0]
    assert sorted(kept["gpu_uuid"]) == ["GPU-edge", "GPU-old", "GPU-true"]
    assert set(kept.columns) == set(EPS.columns)


def test_until_none_keeps_every_episode() -> None:
    kept = judge(EPS, FAILS, WEEK, None)[0]
    assert len(kept) == len(EPS) == 4


def test_a_shorter_window_judges_more() -> None:
    kept = judge(EPS, FAILS, DAY, END)[0]
    assert sorted(kept["gpu_uuid"]) == ["GPU-edge", "GPU-late", "GPU-old", "GPU-true"]


def test_an_empty_set_of_episodes() -> None:
    none = alerting(("GPU-x", END)).iloc[0:0]
    assert judge(none, FAILS, WEEK, END)[0].empty
    assert judge(none, fails(), WEEK, END)[0].empty


def test_without_failures_only_old_episodes_are_judged() -> None:
    kept = judge(EPS, fails(), WEEK, END)[0]
    assert sorted(kept["gpu_uuid"]) == ["GPU-edge", "GPU-old"]


def test_a_recorded_failure_makes_a_late_episode_true_and_judged() -> None:
    """A failure on record within the window makes the episode true, whenever it was recorded."""
    kept = judge(EPS, fails(("GPU-late", END + DAY)), WEEK, END)[0]
    assert "GPU-late" in set(kept["gpu_uuid"])


def test_precision_leaves_unjudgeable_episodes_out() -> None:
    # Judged: GPU-old (false), GPU-edge (false), GPU-true (true); GPU-late left out.
    assert precision(EPS, FAILS, WEEK, END) == (pytest.approx(1 / 3), 1, 3)
    assert precision(EPS, FAILS, WEEK) == (pytest.approx(1 / 4), 1, 4)


def test_precision_when_nothing_can_be_judged_yet() -> None:
    late = alerting(("GPU-late", END - DAY))
    p, tp, n = precision(late, fails(), WEEK, END)
    assert math.isnan(p) and (tp, n) == (0, 0)


# -- GPUs already failed ----------------------------------------------------------------------------


def scored(*rows: tuple[str, pd.Timestamp, pd.Timestamp]) -> pd.DataFrame:
    """Scored rows (gpu_uuid, cutoff, last_seen) as score_span keeps them."""
    return pd.DataFrame(
        {
            "gpu_uuid": [u for u, _, _ in rows],
            "cutoff": pd.to_datetime([c for _, c, _ in rows], utc=True),
            "last_seen": pd.to_datetime([s for _, _, s in rows], utc=True),
        }
    )


FAILED = END - 10 * DAY


def test_a_dead_gpu_scored_on_its_last_samples_is_out_of_service() -> None:
    rows = scored(
        ("GPU-dead", FAILED - HOUR, FAILED - HOUR),  # before its failure: judged
        ("GPU-dead", FAILED, FAILED - HOUR),  # at the failure, nothing newer: out
        ("GPU-dead", FAILED + 5 * HOUR, FAILED - HOUR),  # hours on, still its last sample: out
        ("GPU-other", FAILED + 5 * HOUR, FAILED + 5 * HOUR),  # another GPU: judged
    )
    assert out_of_service(rows, fails(("GPU-dead", FAILED))).tolist() == [False, True, True, False]


def test_a_gpu_that_reports_again_after_its_failure_is_judged_again() -> None:
    """Repaired in place (same UUID): its new samples are a fresh start, and its alerts count."""
    rows = scored(
        ("GPU-back", FAILED + 2 * HOUR, FAILED - HOUR),  # down: out
        ("GPU-back", FAILED + 30 * HOUR, FAILED + 29 * HOUR),  # reporting again: judged
    )
    assert out_of_service(rows, fails(("GPU-back", FAILED))).tolist() == [True, False]


def test_the_hour_row_of_a_gpus_last_sample_is_not_a_report_after_its_failure() -> None:
    """Sampled at 19:00:18, failed at 19:52: its last hour row is stamped 20:00 (the hour's end)."""
    failed = FAILED + 52 * pd.Timedelta(minutes=1)
    rows = scored(
        ("GPU-dead", FAILED, FAILED),  # its hour before: judged
        ("GPU-dead", FAILED + HOUR, FAILED + HOUR),  # the hour of the failure, stamped at its end: out
        ("GPU-dead", FAILED + 3 * HOUR, FAILED + HOUR),  # still: out
        ("GPU-dead", FAILED + 30 * HOUR, FAILED + 2 * HOUR),  # an hour row after the failure's: back
    )
    assert out_of_service(rows, fails(("GPU-dead", failed))).tolist() == [False, True, True, False]


def test_without_failures_nothing_is_out_of_service() -> None:
    rows = scored(("GPU-1", FAILED, FAILED - DAY))
    assert out_of_service(rows, fails()).tolist() == [False]
    assert out_of_service(rows.iloc[:0], fails(("GPU-1", FAILED))).tolist() == []


def test_an_alert_on_a_dead_gpu_is_no_false_episode() -> None:
    """The case that made the judged span's first hours look false: a GPU failed just before it
    opens, its drain rule still stands on its last counters, and no failure follows."""
    rows = scored(*[("GPU-dead", FAILED + h * HOUR, FAILED - HOUR) for h in range(1, 20)]).assign(a=True)
    failures = fails(("GPU-dead", FAILED))
    assert precision(episodes(rows, "a"), failures, WEEK, END)[2] == 1  # judged as is: one false episode
    kept = rows[~out_of_service(rows, failures)]
    assert precision(episodes(kept, "a"), failures, WEEK, END)[2] == 0
