"""Hour rows as columns (`store.hourrows`): the window's one-copy slide equals dropping and appending, and
parts read apart join into what one read and sort make."""

from __future__ import annotations

import numpy as np
import pytest

from core import hourly
from store.hourrows import (
    Rows,
    append_later,
    combine,
    join_sorted,
    keep,
    row_bytes,
    slide,
    sort_rows,
    values_of,
    with_tail,
)
from store.rollup import HOUR_VALUES

H = hourly.HOUR_US


def _rows(hours_of: dict[str, list[int]], seed: int = 0) -> Rows:
    rng = np.random.default_rng(seed)
    gpus = sorted(hours_of)
    codes = np.concatenate([np.full(len(hours_of[g]), k, np.int32) for k, g in enumerate(gpus)])
    start = np.concatenate([np.asarray(hours_of[g], np.int64) * H for g in gpus])
    n = len(codes)
    cols: dict[str, np.ndarray] = {
        "gpu_temp_c": rng.normal(60, 5, n).astype(np.float32),
        "energy_mj": rng.uniform(0, 1e6, n),
    }
    return sort_rows(Rows(codes, gpus, start, cols))


def _same(a: Rows, b: Rows) -> None:
    assert a.gpus == b.gpus
    assert a.codes.tobytes() == b.codes.tobytes() and a.start.tobytes() == b.start.tobytes()
    assert a.cols.keys() == b.cols.keys()
    for c in a.cols:
        assert a.cols[c].dtype == b.cols[c].dtype and a.cols[c].tobytes() == b.cols[c].tobytes(), c


def test_an_hour_closed_over_every_gpu_is_one_slide() -> None:
    held = _rows({"GPU-b": list(range(10, 20)), "GPU-a": list(range(12, 20)), "GPU-c": [19]})
    closed = _rows({"GPU-c": [20], "GPU-a": [20], "GPU-b": [20]}, seed=1)
    lo = 13 * H  # GPU-a's 12, GPU-b's 10-12 would go: more than one row of b, so not a slide
    assert slide(held, lo, closed) is None
    held = _rows({"GPU-b": list(range(12, 20)), "GPU-a": list(range(12, 20)), "GPU-c": [12, 19]})
    want = append_later(keep(held, held.start >= lo), closed)
    got = slide(held, lo, closed, give_up=True)
    assert got is not None and not held.cols  # each of its columns let go as it moved
    _same(got, want)


@pytest.mark.parametrize(
    ("closed_hours", "lo_hour"),
    [
        ({"GPU-a": [20], "GPU-b": [20]}, 13),  # GPU-c has no closed hour
        ({"GPU-a": [20], "GPU-b": [20], "GPU-c": [20], "GPU-d": [20]}, 13),  # a GPU new to the window
        ({"GPU-a": [20], "GPU-b": [20], "GPU-c": [20]}, 12),  # nothing left the window
        ({"GPU-a": [20, 21], "GPU-b": [20], "GPU-c": []}, 13),  # two hours of one GPU, none of another
    ],
)
def test_anything_else_is_not_a_slide(closed_hours: dict[str, list[int]], lo_hour: int) -> None:
    held = _rows({"GPU-a": list(range(12, 20)), "GPU-b": list(range(12, 20)), "GPU-c": [12, 19]})
    closed = _rows({g: h for g, h in closed_hours.items() if h}, seed=2)
    assert slide(held, lo_hour * H, closed) is None


def test_parts_of_gpus_in_uuid_order_join_as_one_sorted_read() -> None:
    hours = {"GPU-a": [3, 1, 2], "GPU-b": [5], "GPU-c": [1, 2], "GPU-d": [7, 6], "GPU-e": [2]}
    parts = [
        _rows({g: hours[g] for g in names}, seed=k)
        for k, names in enumerate([["GPU-a", "GPU-b"], ["GPU-c"], ["GPU-d", "GPU-e"]])
    ]
    want = sort_rows(combine([Rows(p.codes, p.gpus, p.start, dict(p.cols)) for p in parts]))
    got = join_sorted(parts, ("gpu_temp_c", "energy_mj"))
    _same(got, want)
    assert list(got.codes) == [0, 0, 0, 1, 2, 2, 3, 3, 4] and got.gpus == sorted(hours)
    assert all(not p.cols for p in parts)  # each part's values let go as its column was joined


def test_the_values_held_are_those_of_the_columns_asked_in_hour_order() -> None:
    assert values_of(None) == HOUR_VALUES
    assert values_of(["timestamp", "energy_mj", "gpu_temp_c", "not_a_column"]) == ("gpu_temp_c", "energy_mj")
    assert row_bytes(("gpu_temp_c", "energy_mj")) == 4 + 8 + 4 + 8  # a gauge is float32, a counter float64


def test_a_tail_put_in_gives_the_rows_up_and_says_where_it_is() -> None:
    held = _rows({"GPU-a": [10, 11], "GPU-c": [10, 11, 12]})
    tail = _rows({"GPU-c": [13], "GPU-b": [13], "GPU-a": [13]}, seed=3)
    tail.stamp = tail.start + H // 2  # the newest sample, half-way into the hour
    want = append_later(Rows(held.codes, held.gpus, held.start, dict(held.cols)), tail)
    got, at, stamps = with_tail(held, tail)
    assert not held.cols  # each column let go as it was put in the frame's rows
    assert list(at) == [2, 3, 7] and list(stamps) == list(want.stamp[at])
    want.stamp = None
    _same(got, want)
    whole = np.ones(len(got), dtype=bool)
    whole[at] = False
    back = keep(got, whole, give_up=True)
    assert not got.cols and back.gpus == ["GPU-a", "GPU-c"]
    _same(back, _rows({"GPU-a": [10, 11], "GPU-c": [10, 11, 12]}))


def test_rows_given_up_as_they_are_copied_give_the_same_rows() -> None:
    def held() -> Rows:
        return _rows({"GPU-a": [10, 11, 12], "GPU-c": [11, 12]})

    later = _rows({"GPU-b": [10, 11, 12], "GPU-c": [13]}, seed=4)
    rows = held()
    _same(append_later(rows, later, give_up=True), append_later(held(), later))
    assert not rows.cols
    rows = held()
    _same(keep(rows, rows.start >= 11 * H, give_up=True), keep(held(), held().start >= 11 * H))
    assert not rows.cols
