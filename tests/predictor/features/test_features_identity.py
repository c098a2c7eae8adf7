"""Features made fast (issue 60) are the features they were, bit for bit, and so are the decisions.

The heat family's per-row work was rewritten for speed (`features.medians`, the first-week
slope from each GPU's first week only, the window sums' products in one buffer). The code it
replaced is kept in `reference_heat.py`; every test here builds the same fleet's features
both ways, on a fleet with what the fast paths must survive: rows arriving late (out of time
order), NaN samples, a GPU replaced in its slot, a GPU without a memory sensor, node names
whose order as text is not their rows' order, and samples every 15 minutes.
"""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest

from predictor import score as score_mod
from predictor.features import build_features
from predictor.features.errors import RESET_COUNTERS
from predictor.features.frame import OrderedFrame
from predictor.features.medians import group_medians, stable_argsort
from predictor.model import RiskModel
from simulator.fleet import SimConfig
from simulator.run import simulate
from tests.predictor.features import reference_heat

HEAT = importlib.import_module("predictor.features.heat")  # the attribute is the family of the same name
SLOTS = importlib.import_module("predictor.features.slots")
MEDIANS = importlib.import_module("predictor.features.medians")
MIX = {"NVIDIA A100-SXM4-80GB": 0.5, "NVIDIA H100 80GB HBM3": 0.5}


def awkward(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The fleet with NaN samples, a GPU replaced half-way, one without a memory sensor, and 1 % of
    its rows arriving late (moved to the end, out of time order)."""
    rng = np.random.default_rng(seed)
    out = frame.copy()
    n = len(out)
    for col in ("gpu_temp_c", "memory_temp_c", "power_w", "gpu_util_pct", "pcie_replay_count", "ecc_sbe_aggregate"):
        out.loc[rng.random(n) < 0.02, col] = np.nan
    uuid = out["gpu_uuid"].astype(str)
    gpus = uuid.unique()
    out.loc[uuid == gpus[1], "memory_temp_c"] = np.nan
    half = out["timestamp"].min() + (out["timestamp"].max() - out["timestamp"].min()) / 2
    replaced = (uuid == gpus[2]) & (out["timestamp"] > half)
    out["gpu_uuid"] = uuid.where(~replaced, "GPU-replacement").astype("category")
    for col in ("ecc_sbe_aggregate", "pcie_replay_count", "energy_mj"):  # a new GPU's counters start again
        out.loc[replaced, col] = out.loc[replaced, col] - out.loc[replaced, col].min()
    late = rng.random(n) < 0.01
    return pd.concat([out[~late], out[late]], ignore_index=True)


@pytest.fixture(scope="module")
def fleets() -> dict[str, pd.DataFrame]:
    # 12 nodes: sim-node-10 and -11 sort between -01 and -02 as text, not as their rows lie.
    hourly, _ = simulate(SimConfig(nodes=12, gpus_per_node=4, seed=3, models=MIX), 21)
    raw, _ = simulate(SimConfig(nodes=3, gpus_per_node=4, seed=4, models=MIX), 10, interval_s=900.0)
    out = {"hourly": awkward(hourly, 1), "15min": awkward(raw, 2)}
    for frame in out.values():
        ns = frame["timestamp"].array.asi8
        assert not np.all(ns[1:] >= ns[:-1]), "late rows: not in time order"
        assert frame["gpu_uuid"].nunique() > frame[["hostname", "gpu_index"]].drop_duplicates().shape[0]
        assert frame["memory_temp_c"].isna().any() and frame["power_w"].isna().any()
    return out


def cutoffs(frame: pd.DataFrame) -> dict[str, pd.Timestamp | pd.DatetimeIndex]:
    ts = frame["timestamp"]
    last = ts.max()
    return {
        "latest": last,
        "earlier": last - pd.Timedelta(hours=30, minutes=20),
        "many": pd.date_range(ts.min() + pd.Timedelta(days=1), last, freq="9h"),
    }


def as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heat family's per-row work as it was written before."""
    monkeypatch.setattr(HEAT, "_node_relative_z", reference_heat.node_relative_z)
    monkeypatch.setattr(HEAT, "_moments", reference_heat.moments)


@pytest.mark.parametrize("fleet", ["hourly", "15min"])
@pytest.mark.parametrize("when", ["latest", "earlier", "many"])
def test_features_equal_the_reference_bit_for_bit(
    fleets: dict[str, pd.DataFrame], fleet: str, when: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = fleets[fleet]
    cut = cutoffs(frame)[when]
    fast = build_features(frame, cut)
    with monkeypatch.context() as m:
        as_before(m)
        before = build_features(frame, cut)
    assert fast["heat_vs_node_own_z"].notna().any() and fast["mem_spread_z"].notna().any()
    pd.testing.assert_frame_equal(fast, before, check_exact=True)


@pytest.mark.parametrize("fleet", ["hourly", "15min"])
def test_only_the_replaced_gpu_takes_its_slots_habit(
    fleets: dict[str, pd.DataFrame], fleet: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every feature of the GPUs never replaced is what it was before slots lent their habit (decision
    0089), bit for bit; the replacement's replay habit is its slot's."""
    frame = fleets[fleet]
    cut = cutoffs(frame)["many"]
    with_slots = build_features(frame, cut)
    with monkeypatch.context() as m:
        m.setattr(SLOTS, "predecessors", lambda f, q: SLOTS.NONE)
        own = build_features(frame, cut)
    new = (with_slots["gpu_uuid"] == "GPU-replacement").to_numpy()
    pd.testing.assert_frame_equal(with_slots[~new], own[~new], check_exact=True)
    if fleet == "hourly":  # 10 days of its predecessor before it; the 15-minute fleet has 5, all its last week
        surprise = ["replay_surprise_6h", "replay_surprise_1d"]
        assert not with_slots.loc[new, surprise].equals(own.loc[new, surprise])


def test_score_decides_as_with_the_reference(
    fleets: dict[str, pd.DataFrame], shipped_model: RiskModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = fleets["hourly"]
    cuts = cutoffs(frame)
    for at in (cuts["latest"], cuts["earlier"]):
        fast = score_mod.score(shipped_model, frame, at=at)
        with monkeypatch.context() as m:
            as_before(m)
            before = score_mod.score(shipped_model, frame, at=at)
        pd.testing.assert_frame_equal(fast, before, check_exact=True)


def test_group_medians_are_pandas_medians() -> None:
    rng = np.random.default_rng(7)
    for trial in range(300):
        n = int(rng.integers(1, 300))
        groups = int(rng.integers(1, 50))
        if trial % 3 == 0:  # runs, in no order of their keys
            key = np.repeat(rng.permutation(groups), rng.integers(1, 9, groups))[:n]
        elif trial % 3 == 1:  # a key's rows apart
            key = rng.integers(0, groups, n)
        else:  # a few wide groups: sorted, not by a network
            key = rng.integers(0, 3, n) * 10**9
        v = rng.normal(size=len(key)).round(int(rng.integers(0, 3)))  # ties too
        v[rng.random(len(key)) < 0.2 * (trial % 2)] = np.nan
        v[rng.random(len(key)) < 0.02] = np.inf
        min_count = int(rng.integers(1, 4))
        by = pd.Series(v).groupby(key)
        want = np.where(by.transform("count") >= min_count, by.transform("median"), np.nan)
        assert np.array_equal(group_medians(key.astype(np.int64), v, min_count), want, equal_nan=True), trial


def resets_one_by_one(f: OrderedFrame, names: tuple[str, ...]) -> np.ndarray:
    """`OrderedFrame.resets_of` as it was: each counter put in (GPU, time) order whole."""
    resets = [f.resets(x) for c in names if (x := f.col(c)) is not None]
    return np.unique(np.concatenate(resets)) if resets else np.empty(0, dtype=np.int64)


def with_resets(frame: pd.DataFrame, seed: int) -> pd.DataFrame:
    """The frame with a few counters falling (a GPU reset), each in one counter only."""
    out = frame.copy()
    rng = np.random.default_rng(seed)
    for col in RESET_COUNTERS:
        rows = rng.choice(len(out), 3, replace=False)
        out.loc[rows, col] = 0.0
    return out


@pytest.mark.parametrize("fleet", ["hourly", "15min"])
@pytest.mark.parametrize("order", ["as read", "in time order", "in GPU order"])
def test_resets_found_in_the_frames_order_are_those_one_by_one(
    fleets: dict[str, pd.DataFrame], fleet: str, order: str
) -> None:
    """Counters with a value in every row are compared in the frame's own order (`resets_of`); those
    with NaN, and a frame already in (GPU, time) order, one by one: the same rows either way, and a
    repeated (GPU, time) row is placed by the frame's order."""
    frame = with_resets(fleets[fleet], 5)
    if order != "as read":
        keys = ["timestamp"] if order == "in time order" else ["gpu_uuid", "timestamp"]
        frame = frame.sort_values(keys, kind="stable", ignore_index=True)
    assert frame["pcie_replay_count"].isna().any() and not frame["energy_mj"].isna().any()
    f = OrderedFrame(frame)
    assert f.identity == (order == "in GPU order")
    want = resets_one_by_one(f, RESET_COUNTERS)
    assert len(want) >= len(RESET_COUNTERS)
    assert np.array_equal(f.resets_of(RESET_COUNTERS), want)
    again = frame.iloc[[10, 500]].assign(energy_mj=0.0)  # two (GPU, time) rows again, their counter reset
    twice = OrderedFrame(pd.concat([frame, again], ignore_index=True))
    want = resets_one_by_one(twice, RESET_COUNTERS)
    assert np.isin(twice.sorted_positions(np.arange(len(frame), len(frame) + 2)) + 1, want).all()
    assert np.array_equal(twice.resets_of(RESET_COUNTERS), want)


@pytest.mark.parametrize("block", [1, 7, 1000, 1 << 18])
def test_counters_compared_block_by_block_are_compared_whole(fleets: dict[str, pd.DataFrame], block: int) -> None:
    """`OrderedFrame._dropped` compares each row with its GPU's previous row a block of rows at a time:
    the rows it finds are those of one comparison of each whole column, whatever the block."""
    frame = with_resets(fleets["hourly"], 5)
    f = OrderedFrame(frame)
    columns = [x for c in RESET_COUNTERS if not f.nan_state(c)[0] and (x := f.raw(c)) is not None]
    prev = f._previous_rows()
    whole = np.zeros(f.n, dtype=bool)
    for x in columns:
        whole |= x < np.take(x, prev)
    assert len(columns) >= 3 and 0 < whole.sum() < f.n
    assert np.array_equal(f._dropped(columns, block=block), whole)


@pytest.mark.parametrize("fleet", ["hourly", "15min"])
def test_features_with_resets_equal_those_found_one_by_one(
    fleets: dict[str, pd.DataFrame], fleet: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = with_resets(fleets[fleet], 6)
    for cut in cutoffs(frame).values():
        fast = build_features(frame, cut)
        with monkeypatch.context() as m:
            m.setattr(OrderedFrame, "resets_of", resets_one_by_one)
            before = build_features(frame, cut)
        assert fast["link_retrained_1d"].gt(0).any() or isinstance(cut, pd.Timestamp)
        pd.testing.assert_frame_equal(fast, before, check_exact=True)


@pytest.mark.parametrize("fleet", ["hourly", "15min"])
def test_a_frame_in_gpu_order_is_not_sorted_again(fleets: dict[str, pd.DataFrame], fleet: str) -> None:
    """A window kept in (GPU, time) order (the scorer's) is taken as it is, in the order a sort gives,
    ties included, and its features are those of the same rows in any order, bit for bit."""
    frame = fleets[fleet]
    by_gpu = frame.sort_values(["gpu_uuid", "timestamp"], kind="stable", ignore_index=True)
    for rows in (by_gpu, frame, frame.sort_values("timestamp", kind="stable", ignore_index=True)):
        f = OrderedFrame(rows)
        codes = rows["gpu_uuid"].cat.codes.to_numpy()
        seconds = (rows["timestamp"].array.asi8 - f.t0_ns) // 1_000_000_000
        assert np.array_equal(f.order, np.lexsort((seconds, codes)))
    assert OrderedFrame(by_gpu).identity
    swapped = by_gpu.iloc[[*range(5), 6, 5, *range(7, len(by_gpu))]].reset_index(drop=True)  # two rows of a GPU
    assert not OrderedFrame(swapped).identity
    cut = cutoffs(frame)["latest"]
    pd.testing.assert_frame_equal(build_features(by_gpu, cut), build_features(frame, cut), check_exact=True)


def test_stable_argsort_is_numpys() -> None:
    rng = np.random.default_rng(8)
    for span in (1, 7, 2**16 - 1, 2**16, 2**20, 2**32 - 1, 2**32, 2**40):
        for n in (0, 1, 9, 5000):
            key = rng.integers(-3, span, n, dtype=np.int64)
            assert np.array_equal(stable_argsort(key), np.argsort(key, kind="stable")), (span, n)


def test_medians_placed_by_slot_are_the_sorted_ones() -> None:
    """Keys whose rows lie apart, each row with a slot of its own in its key: the values placed by
    slot give the medians a sort gives (and pandas')."""
    rng = np.random.default_rng(9)
    for trial in range(300):
        width = int(rng.integers(1, 17))
        cells = [(k, j) for k in range(int(rng.integers(1, 40))) for j in range(width) if rng.random() < 0.7]
        if not cells:
            continue
        key, slot = np.array(cells, dtype=np.int64)[rng.permutation(len(cells))].T
        v = rng.normal(size=len(key)).round(int(rng.integers(0, 3)))  # ties too
        v[rng.random(len(key)) < 0.2] = np.nan
        v[rng.random(len(key)) < 0.03] = np.inf
        min_count = int(rng.integers(1, 4))
        sorted_ = group_medians(key, v, min_count)
        assert np.array_equal(group_medians(key, v, min_count, slot=slot), sorted_, equal_nan=True), trial
        placed = MEDIANS._placed_medians(key, v, slot, min_count)
        assert placed is not None and np.array_equal(placed, sorted_, equal_nan=True), trial
        by = pd.Series(v).groupby(key)
        want = np.where(by.transform("count") >= min_count, by.transform("median"), np.nan)
        assert np.array_equal(sorted_, want, equal_nan=True), trial
    twice = np.array([0, 0, 1, 1, 1])  # every key has a slot taken twice: the sort of the whole instead
    assert MEDIANS._placed_medians(np.array([0, 0, 0, 1, 1]), np.arange(5.0), twice, 1) is None


def test_medians_placed_by_slot_sort_the_few_keys_with_a_slot_taken_twice_apart() -> None:
    """A node's GPU with two rows in one hour (its last whole hour, stamped at its end, and its current
    hour's tail): those keys' medians, of all their rows, come from a sort, the rest from the table."""
    rng = np.random.default_rng(12)
    for trial in range(200):
        width, n_keys = int(rng.integers(2, 17)), int(rng.integers(8, 60))
        cells = [(k, j) for k in range(n_keys) for j in range(width) if rng.random() < 0.8]
        again = [(k, j) for k, j in cells if k % 7 == 3 and rng.random() < 0.5]  # a few keys: a slot twice
        if not again:
            continue
        key, slot = np.array(cells + again, dtype=np.int64)[rng.permutation(len(cells) + len(again))].T
        v = rng.normal(size=len(key)).round(int(rng.integers(0, 3)))
        v[rng.random(len(key)) < 0.2] = np.nan
        min_count = int(rng.integers(1, 4))
        placed = MEDIANS._placed_medians(key, v, slot, min_count)
        by = pd.Series(v).groupby(key)
        want = np.where(by.transform("count") >= min_count, by.transform("median"), np.nan)
        assert placed is not None and np.array_equal(placed, want, equal_nan=True), trial
        assert np.array_equal(group_medians(key, v, min_count, slot=slot), want, equal_nan=True), trial


@pytest.mark.parametrize("fleet", ["hourly", "15min"])
@pytest.mark.parametrize("order", ["as read", "in time order"])
def test_frame_hours_and_per_gpu_values_are_those_of_each_row(
    fleets: dict[str, pd.DataFrame], fleet: str, order: str
) -> None:
    """`OrderedFrame.frame_hours` divides a frame in time order once per distinct time, and
    `per_frame_row` gathers by GPU code: each row gets what the per-row formulas give."""
    frame = fleets[fleet]
    if order == "in time order":
        frame = frame.sort_values("timestamp", kind="stable", ignore_index=True)
    f = OrderedFrame(frame)
    assert f.in_time_order == (order == "in time order")
    hours = f.frame_hours()
    assert hours.dtype == np.int64
    assert np.array_equal(hours, (f.ts_ns - f.t0_ns) // (3600 * 10**9))
    if fleet == "15min":  # four distinct times in an hour: one value for them all
        assert len(np.unique(f.ts_ns)) > 3 * len(np.unique(hours))
    per_gpu = np.arange(len(f.gpu_codes)) * 1.5 + 0.25
    pos = {int(code): i for i, code in enumerate(f.gpu_codes)}
    want = np.array([per_gpu[pos[int(code)]] for code in f.frame_codes])
    assert np.array_equal(f.per_frame_row(per_gpu), want)
