"""PCIe features on hand-made histories: resets (links retrained), replays on the node, link drops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from core.history import validate
from predictor.features import build_features
from predictor.features.errors import RESET_COUNTERS
from predictor.features.frame import OrderedFrame

T0 = pd.Timestamp("2026-04-01T00:00:00Z")
H100 = "NVIDIA H100 80GB HBM3"
HOURS = 10 * 24
CUT = T0 + pd.Timedelta(hours=HOURS)
AGO = HOURS - np.arange(HOURS + 1)
"""Hours before the cutoff of each hourly sample (240 .. 0)."""


def gpu(uuid: str, host: str = "node-a", index: int = 0, **metrics: Any) -> pd.DataFrame:
    """Hourly rows over 10 days up to the cutoff; a metric is a scalar or one value per row."""
    data: dict[str, Any] = {
        "timestamp": T0 + pd.to_timedelta(np.arange(HOURS + 1), unit="h"),
        "hostname": host,
        "gpu_uuid": uuid,
        "gpu_index": index,
        "model_name": H100,
    }
    for name, v in metrics.items():
        data[name] = np.asarray(v, dtype=float) if np.ndim(v) else float(v)
    return pd.DataFrame(data)


def features(*parts: pd.DataFrame, cut: pd.Timestamp | list[pd.Timestamp] = CUT) -> pd.DataFrame:
    frame = validate(pd.concat(parts, ignore_index=True), source="test")
    cuts = [cut] if isinstance(cut, pd.Timestamp) else cut
    f = build_features(frame, pd.DatetimeIndex(cuts))
    return f.set_index("gpu_uuid") if isinstance(cut, pd.Timestamp) else f.set_index(["gpu_uuid", "cutoff"])


def counter(*steps: tuple[int, float], start: float = 100.0) -> np.ndarray:
    """A counter rising by 1 an hour from `start`, reset to a value at given hours ago:
    each step (hours_ago, value) sets it to value there, and it keeps rising from it."""
    x = start + np.arange(HOURS + 1, dtype=float)
    for ago, value in sorted(steps, reverse=True):
        i = HOURS - ago
        x[i:] = value + np.arange(HOURS + 1 - i)
    return x


def flat_with_new(ago: list[int], base: float = 10.0) -> np.ndarray:
    """A counter that grows by 1 only at the given hours ago."""
    inc = np.isin(AGO, ago).astype(float)
    return base + np.cumsum(inc)


# -- resets: the link trained again ------------------------------------------------------------


def test_a_counter_drop_within_a_day_is_a_retrain() -> None:
    f = features(
        gpu("GPU-none", pcie_replay_count=counter()),
        gpu("GPU-one", index=1, pcie_replay_count=counter((5, 0.0))),
        gpu("GPU-old", index=2, pcie_replay_count=counter((30, 0.0))),  # more than a day ago
        gpu("GPU-two", index=3, pcie_replay_count=counter((20, 0.0), (3, 1.0))),
    )
    assert f.loc["GPU-none", "link_retrained_1d"] == 0
    assert f.loc["GPU-one", "link_retrained_1d"] == 1
    assert f.loc["GPU-old", "link_retrained_1d"] == 0
    assert f.loc["GPU-two", "link_retrained_1d"] == 2


def test_any_reset_counter_tells_a_reset_and_one_reset_counts_once() -> None:
    assert set(RESET_COUNTERS) >= {"pcie_replay_count", "ecc_sbe_volatile", "thermal_violation_us"}
    steady = {c: counter() for c in RESET_COUNTERS}
    # The node rebooted 4 h ago: every volatile counter restarted in the same sample.
    together = {c: counter((4, 0.0)) for c in RESET_COUNTERS}
    # Only the power-violation counter fell, 10 h ago; replays fell 2 h ago.
    apart = {**steady, "power_violation_us": counter((10, 0.0)), "pcie_replay_count": counter((2, 0.0))}
    f = features(
        gpu("GPU-steady", **steady), gpu("GPU-together", index=1, **together), gpu("GPU-apart", index=2, **apart)
    )
    assert f.loc["GPU-steady", "link_retrained_1d"] == 0
    assert f.loc["GPU-together", "link_retrained_1d"] == 1
    assert f.loc["GPU-apart", "link_retrained_1d"] == 2


def test_a_counter_that_stays_level_or_skips_a_sample_is_no_reset() -> None:
    level = np.full(HOURS + 1, 50.0)
    gap = counter()
    gap[HOURS - 6 : HOURS - 3] = np.nan  # a scrape gap: the next reading is higher than the last
    f = features(gpu("GPU-level", pcie_replay_count=level), gpu("GPU-gap", index=1, pcie_replay_count=gap))
    assert f.loc["GPU-level", "link_retrained_1d"] == 0
    assert f.loc["GPU-gap", "link_retrained_1d"] == 0


def test_a_drop_across_a_gap_is_a_reset() -> None:
    x = counter((4, 0.0))
    x[HOURS - 6 : HOURS - 3] = np.nan  # the reset happened while the GPU was not scraped
    assert features(gpu("GPU-a", pcie_replay_count=x)).loc["GPU-a", "link_retrained_1d"] == 1


def test_the_next_gpu_starting_lower_is_not_a_reset() -> None:
    """Rows in (GPU, time) order: one GPU's first reading after another's last is no drop,
    even for a replacement whose first reading lies within the day."""
    high = gpu("GPU-a", pcie_replay_count=counter(start=10_000.0))
    new = gpu("GPU-b", pcie_replay_count=counter(start=0.0)).iloc[-10:]  # reporting for 10 h
    f = features(high, new)
    assert (f["link_retrained_1d"] == 0).all()


def test_ordered_frame_resets_positions() -> None:
    a = counter((30, 0.0), (5, 2.0), start=1000.0)
    b = np.array(counter((10, 0.0)), dtype=float)
    b[HOURS - 12 : HOURS - 10] = np.nan  # the drop lands on the first reading after the gap
    frame = validate(
        pd.concat([gpu("GPU-a", pcie_replay_count=a), gpu("GPU-b", index=1, pcie_replay_count=b)]), source="t"
    )
    # Shuffled rows: positions are in (GPU, time) order whatever the frame's order.
    frame = frame.sample(frac=1.0, random_state=1).reset_index(drop=True)
    f = OrderedFrame(frame)
    x = f.col("pcie_replay_count")
    assert x is not None
    pos = f.resets(x)
    assert np.all(np.diff(pos) > 0)
    got = sorted((str(f.uuids[c]), HOURS - int(t // 3600)) for c, t in zip(f.code_at(pos), f.t_at(pos), strict=True))
    assert got == [("GPU-a", 5), ("GPU-a", 30), ("GPU-b", 10)]
    assert np.all(np.isfinite(x[pos]))


def test_ordered_frame_resets_of_a_short_or_empty_column() -> None:
    frame = validate(gpu("GPU-a", pcie_replay_count=np.nan), source="t")
    f = OrderedFrame(frame)
    x = f.col("pcie_replay_count")
    assert x is not None
    assert len(f.resets(x)) == 0


def test_ordered_frame_codes_follow_the_rows_in_gpu_time_order() -> None:
    """A label's codes in (GPU, time) order, shuffled frame or not; a missing label is -1."""
    frame = validate(pd.concat([gpu("GPU-a"), gpu("GPU-b", index=1)]), source="t")
    frame["hostname"] = np.where(frame["gpu_uuid"] == "GPU-a", "node-a", "node-b")
    frame = frame.sample(frac=1.0, random_state=1).reset_index(drop=True)
    frame.loc[0, "hostname"] = None
    for labels in (frame["hostname"], frame["hostname"].astype("category")):
        f = OrderedFrame(frame.assign(hostname=labels))
        codes = f.codes("hostname")
        cats = np.asarray(labels.astype("category").cat.categories)
        names = np.where(codes >= 0, cats[np.maximum(codes, 0)], "?")
        want = np.asarray(frame["hostname"].fillna("?"), dtype=object)[f.order]
        assert names.tolist() == want.tolist() and (codes == -1).sum() == 1


# -- replays: active hours and the node's other GPUs --------------------------------------------


def test_replay_active_hours_in_six_hours() -> None:
    f = features(gpu("GPU-a", pcie_replay_count=flat_with_new([0, 2, 5, 6, 7, 30])))
    # (cutoff - 6 h, cutoff]: the samples 0..5 h ago; 6 h ago is outside.
    assert f.loc["GPU-a", "replay_active_hours_6h"] == 3
    assert f.loc["GPU-a", "replay_active_hours_1d"] == 5


def test_replay_surprise_is_against_the_gpus_own_habit() -> None:
    recent = [0, 2, 4]
    habit = list(range(30, HOURS, 8))  # one hour in eight; the habit counts those before the last week
    f = features(
        gpu("GPU-quiet", pcie_replay_count=flat_with_new(recent)),
        gpu("GPU-habit", pcie_replay_count=flat_with_new(recent + habit)),
        gpu("GPU-none", pcie_replay_count=flat_with_new([])),
    )
    quiet, used = f.loc["GPU-quiet"], f.loc["GPU-habit"]
    assert quiet["replay_active_hours_6h"] == used["replay_active_hours_6h"] == 3
    assert quiet["replay_surprise_6h"] > 4.0  # three of six hours on a link that never replays
    assert used["replay_surprise_6h"] < 2.5  # the same on one that replays an hour in eight
    assert quiet["replay_surprise_1d"] > used["replay_surprise_1d"]
    assert f.loc["GPU-none", "replay_surprise_6h"] == f.loc["GPU-none", "replay_surprise_1d"] == 0.0


def test_a_link_degrading_for_days_is_not_its_own_habit() -> None:
    """The habit is the month before the last week: five days of replays every hour are news,
    not the link's norm; the same on a link that replayed an hour in eight before them is less so."""
    from predictor.features.errors import SURPRISE_MAX

    days = list(range(5 * 24))
    habit = list(range(7 * 24 + 2, HOURS, 8))
    f = features(
        gpu("GPU-bad", pcie_replay_count=flat_with_new(days)),
        gpu("GPU-was-busy", pcie_replay_count=flat_with_new(days + habit)),
    )
    bad, busy = f.loc["GPU-bad"], f.loc["GPU-was-busy"]
    assert bad["replay_active_hours_6h"] == 6 and bad["replay_active_hours_1d"] == 24
    assert bad["replay_surprise_6h"] > 6.0
    assert bad["replay_surprise_1d"] == SURPRISE_MAX
    assert busy["replay_surprise_6h"] < bad["replay_surprise_6h"]


def test_surprise_is_poisson_against_a_shrunk_habit() -> None:
    from scipy import stats

    from predictor.features.errors import PRIOR_ACTIVE_PER_H, PRIOR_HOURS, SURPRISE_MAX, surprise

    k, before, before_h = np.array([3.0, 1.0, 0.0, 40.0]), np.array([24.0, 0.0, 5.0, 0.0]), np.full(4, 240.0)
    z = surprise(k, before, before_h, np.full(4, 6.0))
    for i in (0, 1):
        rate = (before[i] + PRIOR_ACTIVE_PER_H * PRIOR_HOURS) / (240.0 + PRIOR_HOURS)
        assert z[i] == pytest.approx(stats.norm.isf(stats.poisson.sf(k[i] - 1, rate * 6.0)))
    assert 2.0 < z[1] < 2.5  # one hour on a link quiet for ten days: unusual, far from alarming
    assert z[2] == 0.0  # none: nothing unusual
    assert z[3] == SURPRISE_MAX  # bounded
    assert np.isnan(surprise(np.array([np.nan]), np.zeros(1), np.zeros(1), np.ones(1)))[0]
    # with no history of its own, the prior alone
    lone = surprise(np.array([3.0]), np.zeros(1), np.zeros(1), np.array([6.0]))[0]
    assert lone == pytest.approx(stats.norm.isf(stats.poisson.sf(2, PRIOR_ACTIVE_PER_H * 6.0)))


def test_surprise_rises_with_the_count_on_a_quiet_link_and_says_less_on_a_busy_one() -> None:
    """On links that replay at one rate, a surprise is a rising function of the count (so trees
    split it where they split the count); at a busy link's rate the same count is no news."""
    from predictor.features.errors import surprise

    k = np.arange(1.0, 7.0)
    quiet = surprise(k, np.full(6, 7.0), np.full(6, 696.0), np.full(6, 6.0))
    busy = surprise(k, np.full(6, 120.0), np.full(6, 696.0), np.full(6, 6.0))
    assert np.all(np.diff(quiet[quiet < 8.0]) > 0)
    assert np.all(busy <= quiet)
    assert busy[1] < 1.0 < quiet[1]  # two hours in six: news on a quiet link, not on a busy one


def test_node_replaying_gpus_counts_the_other_gpus_of_the_node() -> None:
    recent, old, none = flat_with_new([1, 3]), flat_with_new([8, 30]), flat_with_new([])
    f = features(
        gpu("GPU-a0", "node-a", 0, pcie_replay_count=recent),
        gpu("GPU-a1", "node-a", 1, pcie_replay_count=recent),
        gpu("GPU-a2", "node-a", 2, pcie_replay_count=recent),
        gpu("GPU-a3", "node-a", 3, pcie_replay_count=old),  # replays, but not in 6 h
        gpu("GPU-b0", "node-b", 0, pcie_replay_count=recent),
        gpu("GPU-b1", "node-b", 1, pcie_replay_count=none),
    )
    n = f["node_replaying_gpus_6h"]
    assert n["GPU-a0"] == n["GPU-a1"] == n["GPU-a2"] == 2, "itself not counted"
    assert n["GPU-a3"] == 3
    assert n["GPU-b0"] == 0 and n["GPU-b1"] == 1, "another node's GPUs do not count"


def test_node_replaying_gpus_per_cutoff() -> None:
    early = CUT - pd.Timedelta(days=2)
    a = flat_with_new([50, 49])  # replaying two days ago only
    f = features(
        gpu("GPU-a0", "node-a", 0, pcie_replay_count=a),
        gpu("GPU-a1", "node-a", 1, pcie_replay_count=flat_with_new([])),
        cut=[early, CUT],
    )
    assert f.loc[("GPU-a1", early), "node_replaying_gpus_6h"] == 1
    assert f.loc[("GPU-a1", CUT), "node_replaying_gpus_6h"] == 0


def test_gpu_without_replay_counter_is_unknown_and_not_counted() -> None:
    f = features(
        gpu("GPU-a0", "node-a", 0, pcie_replay_count=flat_with_new([1])),
        gpu("GPU-a1", "node-a", 1, pcie_replay_count=np.nan),
    )
    assert np.isnan(f.loc["GPU-a1", "node_replaying_gpus_6h"])
    assert np.isnan(f.loc["GPU-a1", "replay_active_hours_6h"])
    assert f.loc["GPU-a0", "node_replaying_gpus_6h"] == 0


# -- the link's width and generation -------------------------------------------------------------


def link(width: np.ndarray | float = 16.0, gen: np.ndarray | float = 5.0) -> dict[str, Any]:
    return {"pcie_link_width": width, "pcie_link_width_max": 16.0, "pcie_link_gen": gen, "pcie_link_gen_max": 5.0}


def narrowed(hours_ago: int, to: float = 8.0, top: float = 16.0) -> np.ndarray:
    return np.where(hours_ago > AGO, to, top)


def test_link_drop_is_the_share_lost_within_the_week() -> None:
    f = features(
        gpu("GPU-full", **link()),
        gpu("GPU-born-narrow", index=1, **link(width=8.0)),
        gpu("GPU-narrowed", index=2, **link(width=narrowed(48))),
        gpu("GPU-gen-down", index=3, **link(gen=narrowed(24, to=4.0, top=5.0))),
        gpu("GPU-narrowed-long-ago", index=4, **link(width=narrowed(9 * 24))),
        gpu("GPU-recovered", index=5, **link(width=np.where((AGO < 48) & (AGO >= 24), 8.0, 16.0))),
    )
    d = f["link_drop_7d"]
    assert d["GPU-full"] == 0
    assert d["GPU-born-narrow"] == 0, "trained narrow at boot and left so: a confounder, nothing lost"
    assert f.loc["GPU-born-narrow", "link_width_ratio"] == 0.5
    # The week's 168 samples: 120 at full width, 48 at half; now half.
    assert d["GPU-narrowed"] == pytest.approx((120 + 48 * 0.5) / 168 - 0.5)
    assert d["GPU-gen-down"] == pytest.approx((144 + 24 * 0.8) / 168 - 0.8)
    assert f.loc["GPU-gen-down", "link_gen_ratio"] == pytest.approx(0.8)
    assert d["GPU-narrowed-long-ago"] == 0
    assert d["GPU-recovered"] == 0, "a link back at full width has lost nothing"


def test_link_drop_of_width_and_generation_together() -> None:
    both = link(width=narrowed(12), gen=narrowed(12, to=4.0, top=5.0))
    d = features(gpu("GPU-a", **both)).loc["GPU-a", "link_drop_7d"]
    assert d == pytest.approx((156 + 12 * 0.4) / 168 - 0.4)


def test_link_features_are_the_same_for_one_cutoff_or_many() -> None:
    parts = [
        gpu("GPU-a", pcie_replay_count=counter((20, 0.0), (3, 1.0)), **link(width=narrowed(30))),
        gpu("GPU-b", index=1, pcie_replay_count=flat_with_new([1, 2, 40]), **link(gen=narrowed(5, 4.0, 5.0))),
    ]
    cuts = [CUT - pd.Timedelta(hours=h) for h in (30, 12, 0)]
    names = ["link_retrained_1d", "replay_active_hours_6h", "node_replaying_gpus_6h", "link_drop_7d"]
    many = features(*parts, cut=cuts)[names]
    for c in cuts:
        one = features(*parts, cut=[c])[names]
        pd.testing.assert_frame_equal(one, many.loc[one.index], check_names=False)
    assert many.loc[("GPU-a", cuts[0]), "link_drop_7d"] == 0
    assert many.loc[("GPU-a", cuts[2]), "link_drop_7d"] > 0
