"""core.probes: the slow-GPU rule the collector and the predictor share."""

from __future__ import annotations

import math

import pytest

from core.probes import MIN_PEERS, SLOW_THRESHOLD, compare_to_peers, is_slow


def test_each_gpu_is_compared_with_the_median_of_the_others() -> None:
    out = compare_to_peers({"a": 400.0, "b": 410.0, "c": 395.0, "d": 355.0})
    assert out["d"].peers == 3 and out["d"].peer_median == 400.0
    assert out["d"].ratio == pytest.approx(355 / 400) and is_slow(out["d"].ratio)
    assert out["a"].peer_median == 395.0  # itself left out: median of 410, 395, 355
    assert not any(is_slow(out[g].ratio) for g in "abc")


def test_too_few_peers_or_no_positive_median_gives_no_ratio() -> None:
    pair = compare_to_peers({"a": 400.0, "b": 100.0})
    assert MIN_PEERS == 2 and all(c.ratio is None and c.peers == 1 for c in pair.values())
    assert pair["b"].peer_median == 400.0  # still reported, for the reason text
    alone = compare_to_peers({"a": 400.0})["a"]
    assert alone.peers == 0 and math.isnan(alone.peer_median) and alone.ratio is None
    assert compare_to_peers({"a": 1.0, "b": 0.0, "c": 0.0})["a"].ratio is None
    assert compare_to_peers({"a": 400.0, "b": 100.0}, min_peers=1)["b"].ratio == 0.25


def test_slow_means_more_than_the_threshold_below_one() -> None:
    assert SLOW_THRESHOLD == 0.10
    assert is_slow(0.89) and not is_slow(0.9) and not is_slow(1.2) and not is_slow(None)
    assert is_slow(0.94, threshold=0.05) and not is_slow(0.96, threshold=0.05)
