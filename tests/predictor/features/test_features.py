"""Features on hand-made histories with known answers: windows, resets, gaps, staleness, peers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from core.history import HistoryError, validate
from predictor.features import FEATURES, SPECS, build_features, missing_inputs
from simulator.fleet import SimConfig
from simulator.run import simulate

T0 = pd.Timestamp("2026-03-01T00:00:00Z")
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def at(hours: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(hours=hours)


def gpu(
    uuid: str, hours: list[float], host: str = "node-a", model: str = H100, index: int = 0, **metrics: Any
) -> pd.DataFrame:
    """Rows of one GPU at T0 + hours; each metric is a scalar or a list aligned with hours."""
    n = len(hours)
    data: dict[str, Any] = {
        "timestamp": [at(h) for h in hours],
        "hostname": [host] * n,
        "gpu_uuid": [uuid] * n,
        "gpu_index": [index] * n,
        "model_name": [model] * n,
    }
    for name, v in metrics.items():
        data[name] = list(v) if isinstance(v, list | tuple | np.ndarray) else [v] * n
    return pd.DataFrame(data)


def history(*parts: pd.DataFrame) -> pd.DataFrame:
    """A validated history frame (categoricals, UTC, time order) as `history.read` gives."""
    return validate(pd.concat(parts, ignore_index=True), source="test")


def row(features: pd.DataFrame, uuid: str) -> pd.Series:
    sel = features[features["gpu_uuid"] == uuid]
    assert len(sel) == 1, f"{uuid}: {len(sel)} rows"
    return sel.iloc[0]


def test_features_and_specs_agree() -> None:
    assert len(FEATURES) == len(set(FEATURES)) == len(SPECS)
    assert all(s.mode in ("ecc", "thermal", "pcie", "any") for s in SPECS)


# --- ECC: aggregate preferred, volatile as fallback, NaN without data ----------------------

EVERY_12H = [12.0 * i for i in range(17)]  # 0 h .. 192 h (8 days), 17 samples
# New SBEs per sample: +1 at 12 h .. 168 h (14 samples), +5 at 180 h and 192 h.
SBE_NEW = np.array([0] + [1] * 14 + [5, 5], dtype=float)
CUT_8D = at(192)


def ecc_fleet(with_aggregate_column: bool = True) -> pd.DataFrame:
    """GPU-agg reports both counters (volatile stuck at 0), GPU-vol only volatile, GPU-none neither."""
    agg = 1000.0 + np.cumsum(SBE_NEW)  # the first value is history from before: never counted
    nan = [np.nan] * len(EVERY_12H)
    parts = [
        gpu("GPU-agg", EVERY_12H, ecc_sbe_aggregate=agg, ecc_sbe_volatile=0.0, ecc_dbe_aggregate=agg - 1000),
        gpu("GPU-vol", EVERY_12H, ecc_sbe_aggregate=nan, ecc_sbe_volatile=agg - 990, ecc_dbe_aggregate=nan),
        gpu("GPU-none", EVERY_12H, ecc_sbe_aggregate=nan, ecc_sbe_volatile=nan, ecc_dbe_aggregate=nan),
    ]
    frame = history(*parts)
    return frame if with_aggregate_column else frame.drop(columns=["ecc_sbe_aggregate"])


@pytest.mark.parametrize("uuid", ["GPU-agg", "GPU-vol"])
def test_sbe_rates_from_aggregate_or_volatile(uuid: str) -> None:
    r = row(build_features(ecc_fleet(), CUT_8D), uuid)
    # 1 d window (168 h, 192 h]: 180 h and 192 h, +5 each.
    assert r["sbe_rate_1d"] == pytest.approx(10.0)
    # 7 d window (24 h, 192 h]: 36 h .. 168 h (12 x +1) plus the 10 above, over 7 days.
    assert r["sbe_rate_7d"] == pytest.approx(22 / 7)
    # 30 d window: the GPU has been around for 8 days only, so the rate is over 8 days.
    assert r["sbe_rate_30d"] == pytest.approx(24 / 8)
    assert r["sbe_growth"] == pytest.approx((10 + 1) / (22 / 7 + 1))
    # It counts samples with new SBEs (hours at hourly sampling): 36 h .. 192 h.
    assert r["sbe_active_hours_7d"] == pytest.approx(14)


def test_sbe_from_volatile_when_the_column_is_absent() -> None:
    r = row(build_features(ecc_fleet(with_aggregate_column=False), CUT_8D), "GPU-vol")
    assert (r["sbe_rate_1d"], r["sbe_rate_7d"]) == (pytest.approx(10.0), pytest.approx(22 / 7))


def test_gpu_without_ecc_data_is_unknown_not_healthy() -> None:
    f = build_features(ecc_fleet(), CUT_8D)
    none = row(f, "GPU-none")
    for name in ("sbe_rate_1d", "sbe_rate_7d", "sbe_rate_30d", "sbe_growth", "sbe_active_hours_7d", "dbe_7d"):
        assert np.isnan(none[name]), name
    assert row(f, "GPU-agg")["dbe_7d"] == pytest.approx(22)  # same increments in the DBE aggregate
    assert row(f, "GPU-agg")["dbe_30d"] == pytest.approx(24)


def test_gpu_without_remap_or_violation_data_is_unknown() -> None:
    hours = [0.0, 1.0, 2.0]
    frame = history(
        gpu("GPU-a", hours, remapped_rows_correctable=[1, 3, 4], thermal_violation_us=[0, 10, 20]),
        gpu("GPU-b", hours, index=1, remapped_rows_correctable=np.nan, thermal_violation_us=np.nan),
    )
    b = row(build_features(frame, at(2)), "GPU-b")
    assert np.isnan(b["remaps_new_7d"]) and np.isnan(b["thermal_violation_share_1d"])


# --- counter resets -------------------------------------------------------------------------


def test_counter_reset_counts_the_new_value_never_a_negative() -> None:
    # One sample two days before (so the GPU's 1 d window is a full day), then a reboot
    # between 6 h and 12 h: the volatile counters restart at 0.
    hours = [-48.0, 0.0, 6.0, 12.0, 18.0]
    frame = history(
        gpu(
            "GPU-r",
            hours,
            ecc_sbe_volatile=[10, 10, 20, 0, 5],
            ecc_dbe_volatile=[10, 10, 20, 0, 5],
            pcie_replay_count=[100, 100, 150, 3, 10],
        )
    )
    r = row(build_features(frame, at(18)), "GPU-r")
    assert r["sbe_rate_1d"] == pytest.approx(10 + 5)  # per day over exactly 1 day
    assert r["dbe_7d"] == pytest.approx(15)
    # Replays: +50 before the reset; the 3 and +7 after it fall within the 12 h the link
    # settles after a reset (predictor.features.errors.SETTLE_S), so they do not count.
    assert r["replay_rate_1d"] == pytest.approx(50 / 24)
    assert r["replay_active_hours_1d"] == pytest.approx(1)
    assert r["link_retrained_1d"] == pytest.approx(1)


def test_counter_gap_is_not_a_reset() -> None:
    # A missing value (NaN) between 10 and 20 is a gap, not a drop to 0.
    frame = history(gpu("GPU-g", [-48.0, 0.0, 6.0, 12.0], ecc_sbe_volatile=[10, 10, np.nan, 20]))
    assert row(build_features(frame, at(12)), "GPU-g")["sbe_rate_1d"] == pytest.approx(10)


# --- irregular sampling, gaps, coverage -----------------------------------------------------

IRREGULAR = [0.0, 1.0, 5.0, 5.5, 30.0]


@pytest.mark.parametrize(
    ("cut_h", "temp", "sbe_new", "days", "seen_h"),
    [
        # Features read hour rows: the hour (H - 1 h, H] is stamped H, the hour the cutoff
        # falls in at its newest sample up to the cutoff (core.hourly).
        (5.0, (50 + 60 + 70) / 3, 1 + 2, 5 / 24, 5.0),  # (.., 5 h]: 0 h, 1 h and 5 h (right end included)
        (5.5, (50 + 60 + 70 + 80) / 4, 1 + 2 + 3, 5.5 / 24, 5.5),  # the hour (5 h, 6 h] so far
        (29.0, 80.0, 3, 1.0, 6.0),  # (5 h, 29 h]: the hour (5 h, 6 h], stamped 6 h
        (29.5, 80.0, 3, 1.0, 6.0),  # (5.5 h, 29.5 h]: that hour still (its end is in the window)
        (30.0, 90.0, 4, 1.0, 30.0),  # (6 h, 30 h]: 30 h only (left end excluded)
    ],
)
def test_windows_use_only_hours_in_the_half_open_window(
    cut_h: float, temp: float, sbe_new: float, days: float, seen_h: float
) -> None:
    frame = history(
        gpu("GPU-i", IRREGULAR, gpu_temp_c=[50, 60, 70, 80, 90], ecc_sbe_aggregate=[0, 1, 3, 6, 10], power_w=300)
    )
    r = row(build_features(frame, at(cut_h)), "GPU-i")
    if np.isnan(temp):
        assert np.isnan(r["temp_mean_1d"])
    else:
        assert r["temp_mean_1d"] == pytest.approx(temp)
    # A GPU younger than the window is rated over the time it has been around.
    assert r["sbe_rate_1d"] == pytest.approx(sbe_new / days)
    assert r["age_days"] == pytest.approx(cut_h / 24)
    assert r["last_seen"] == at(seen_h)


def test_coverage_reflects_missing_samples() -> None:
    hourly = [float(h) for h in range(49)]
    gappy = [h for h in hourly if not 30 <= h <= 35]  # 6 of the last day's 24 samples missing
    frame = history(gpu("GPU-full", hourly, gpu_temp_c=60.0), gpu("GPU-gappy", gappy, gpu_temp_c=60.0, index=1))
    f = build_features(frame, at(48))
    assert row(f, "GPU-full")["coverage_1d"] == pytest.approx(1.0)
    # Expected samples come from the GPU's own mean interval over the week: 48 h / 42 gaps.
    assert row(f, "GPU-gappy")["coverage_1d"] == pytest.approx(18 / (24 / (48 / 42)))


# --- only the past, staleness ---------------------------------------------------------------


def past_fleet() -> pd.DataFrame:
    hourly = [float(h) for h in range(0, 72)]
    n = len(hourly)
    return history(
        gpu("GPU-a", hourly, gpu_temp_c=np.linspace(60, 70, n), power_w=np.linspace(200, 600, n),
            ecc_sbe_aggregate=np.arange(n) * 2.0, pcie_replay_count=np.arange(n) * 1.0, xid=0.0,
            memory_temp_c=70.0, gpu_util_pct=90.0),
        gpu("GPU-b", hourly, index=1, gpu_temp_c=np.linspace(55, 75, n), power_w=np.linspace(250, 650, n),
            ecc_sbe_aggregate=0.0, pcie_replay_count=0.0, xid=0.0, memory_temp_c=72.0, gpu_util_pct=80.0),
    )  # fmt: skip


def test_rows_after_the_cutoff_change_nothing() -> None:
    before = past_fleet()
    later = [float(h) for h in range(72, 120)]
    wild: dict[str, Any] = dict(gpu_temp_c=99.0, power_w=100.0, ecc_sbe_aggregate=1e6, pcie_replay_count=1e6, xid=79.0,
                memory_temp_c=99.0, gpu_util_pct=0.0)  # fmt: skip
    after = history(
        before,
        gpu("GPU-a", later, **wild),
        gpu("GPU-b", later, index=1, **wild),
        gpu("GPU-new", later, index=2, **wild),  # appears after the cutoff
    )
    cut = at(71)
    expected = build_features(before, cut)
    got = build_features(after, cut)
    assert set(got["gpu_uuid"]) == {"GPU-a", "GPU-b"}
    pd.testing.assert_frame_equal(got.reset_index(drop=True), expected.reset_index(drop=True))


def test_denser_sampling_after_the_cutoff_does_not_change_coverage() -> None:
    before = past_fleet()
    minutes = [72 + k / 60 for k in range(1, 300)]  # after the cutoff the GPU is scraped every minute
    after = history(before, gpu("GPU-a", minutes, gpu_temp_c=60.0))
    cut = at(71)
    assert row(build_features(after, cut), "GPU-a")["coverage_1d"] == pytest.approx(
        row(build_features(before, cut), "GPU-a")["coverage_1d"]
    )


def test_gpu_moved_after_the_cutoff_keeps_its_node_at_the_cutoff() -> None:
    before = past_fleet()
    after = history(before, gpu("GPU-a", [80.0, 81.0], host="node-z", gpu_temp_c=60.0))
    assert row(build_features(after, at(71)), "GPU-a")["hostname"] == "node-a"


def test_stale_and_future_gpus_are_left_out() -> None:
    cut = at(100)
    frame = history(
        gpu("GPU-live", [0.0, 50.0, 100.0], gpu_temp_c=60.0),
        gpu("GPU-edge", [0.0, 50.0, 76.0], index=1, gpu_temp_c=60.0),  # exactly 24 h before: kept
        gpu("GPU-gone", [0.0, 50.0, 75.0], index=2, gpu_temp_c=60.0),  # 25 h before: left
        gpu("GPU-late", [100.5, 110.0], index=3, gpu_temp_c=60.0),  # first sample after the cutoff
    )
    f = build_features(frame, cut)
    assert sorted(f["gpu_uuid"]) == ["GPU-edge", "GPU-live"]
    assert row(f, "GPU-edge")["last_seen"] == at(76)
    assert (f["cutoff"] == cut).all()


# --- latest values, XIDs, peers -------------------------------------------------------------


def test_latest_value_features_take_the_last_non_nan() -> None:
    hours = [0.0, 1.0, 2.0]
    frame = history(
        gpu("GPU-a", hours, row_remap_pending=[0, 1, np.nan], pcie_link_width=[16, 8, np.nan],
            pcie_link_width_max=16, pcie_link_gen=[5, 4, np.nan], pcie_link_gen_max=5,
            remapped_rows_correctable=[1, 3, np.nan]),
        # GPU-b sorts right after GPU-a and has nothing: it must not borrow GPU-a's values.
        gpu("GPU-b", hours, index=1, row_remap_pending=np.nan, pcie_link_width=np.nan, pcie_link_width_max=np.nan,
            pcie_link_gen=np.nan, pcie_link_gen_max=np.nan, remapped_rows_correctable=np.nan),
    )  # fmt: skip
    f = build_features(frame, at(2))
    a, b = row(f, "GPU-a"), row(f, "GPU-b")
    assert a["row_remap_pending"] == 1
    assert a["link_width_ratio"] == pytest.approx(0.5)
    assert a["link_gen_ratio"] == pytest.approx(0.8)
    assert a["remapped_rows_correctable"] == 3
    assert a["remaps_new_7d"] == pytest.approx(2)
    for name in ("row_remap_pending", "link_width_ratio", "link_gen_ratio", "remapped_rows_correctable"):
        assert np.isnan(b[name]), name
    # And at an earlier cutoff the latest value is the one before it.
    assert row(build_features(frame, at(0.5)), "GPU-a")["link_width_ratio"] == pytest.approx(1.0)


def test_xid_counts_per_code_within_the_window() -> None:
    xid = {24: 79, 72: 79, 120: 48, 168: 48, 180: 45}  # 24 h is the 7 d window's excluded left end
    frame = history(gpu("GPU-x", EVERY_12H, xid=[float(xid.get(int(h), 0)) for h in EVERY_12H]))
    r = row(build_features(frame, CUT_8D), "GPU-x")
    assert r["xid_79_7d"] == 1
    assert r["xid_79_30d"] == 2
    assert r["xid_48_7d"] == 2
    assert r["xid_48_30d"] == 2
    assert r["xid_other_7d"] == 1  # XID 45 has no feature of its own
    for code in (63, 64, 92, 94, 95):
        assert r[f"xid_{code}_7d"] == 0


def test_temperature_vs_peers_and_node() -> None:
    hours = [0.0, 6.0, 12.0, 18.0, 24.0]
    frame = history(
        gpu("GPU-1", hours, host="n1", index=0, gpu_temp_c=60.0),
        gpu("GPU-2", hours, host="n1", index=1, gpu_temp_c=70.0),
        gpu("GPU-3", hours, host="n2", index=0, gpu_temp_c=80.0),
        gpu("GPU-4", hours, host="n2", index=1, gpu_temp_c=90.0, model=A100),  # the only A100
    )
    f = build_features(frame, at(24)).set_index("gpu_uuid")
    assert f["temp_vs_peers_1d"].to_dict() == {"GPU-1": -10, "GPU-2": 0, "GPU-3": 10, "GPU-4": 0}
    assert f["temp_vs_node_1d"].to_dict() == {"GPU-1": -5, "GPU-2": 5, "GPU-3": -5, "GPU-4": 5}


def test_lone_model_has_zero_peer_difference() -> None:
    frame = history(gpu("GPU-1", [0.0, 1.0], gpu_temp_c=[70.0, 72.0]))
    assert row(build_features(frame, at(1)), "GPU-1")["temp_vs_peers_1d"] == 0


# --- many cutoffs, errors -------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_frame() -> pd.DataFrame:
    frame, _ = simulate(SimConfig(nodes=2, gpus_per_node=4, seed=1), 10)
    return frame


def batch_and_single(frame: pd.DataFrame, cuts: pd.DatetimeIndex) -> tuple[pd.DataFrame, pd.DataFrame]:
    key = ["cutoff", "gpu_uuid"]
    batch = build_features(frame, cuts).sort_values(key).reset_index(drop=True)
    single = pd.concat([build_features(frame, c) for c in cuts], ignore_index=True)
    return batch, single.sort_values(key).reset_index(drop=True)


def sim_cutoffs(frame: pd.DataFrame) -> pd.DatetimeIndex:
    return pd.date_range(frame["timestamp"].min() + pd.Timedelta(days=2), frame["timestamp"].max(), freq="12h")


SLOPE_FEATURES = ["temp_excess_own_z", "temp_excess_vs_node_z", "temp_excess_vs_node_z_1d"]


def test_many_cutoffs_at_once_equal_one_at_a_time(sim_frame: pd.DataFrame) -> None:
    cuts = sim_cutoffs(sim_frame)
    batch, single = batch_and_single(sim_frame, cuts)
    assert len(cuts) == 16 and len(batch) == len(single) == 8 * len(cuts)
    # The features on the fitted temperature-per-watt slope are checked on their own below.
    pd.testing.assert_frame_equal(batch.drop(columns=SLOPE_FEATURES), single.drop(columns=SLOPE_FEATURES))


def test_slope_features_do_not_depend_on_the_other_cutoffs(sim_frame: pd.DataFrame) -> None:
    batch, single = batch_and_single(sim_frame, sim_cutoffs(sim_frame))
    pd.testing.assert_frame_equal(batch[SLOPE_FEATURES], single[SLOPE_FEATURES])


def test_empty_history_raises() -> None:
    empty = ecc_fleet().iloc[:0]
    with pytest.raises(HistoryError, match="no rows"):
        build_features(empty, CUT_8D)


def test_cutoff_before_all_data_raises() -> None:
    with pytest.raises(HistoryError, match=r"no GPU has samples within 24 h .*data begins 2026-03-01"):
        build_features(ecc_fleet(), T0 - pd.Timedelta(days=1))


def test_cutoff_long_after_all_data_raises() -> None:
    with pytest.raises(HistoryError, match="no GPU has samples within 24 h"):
        build_features(ecc_fleet(), CUT_8D + pd.Timedelta(days=2))


def test_naive_cutoff_is_utc() -> None:
    f = build_features(ecc_fleet(), CUT_8D.tz_localize(None))
    assert (f["cutoff"] == CUT_8D).all()


def test_missing_inputs_lists_absent_and_all_nan_columns() -> None:
    frame = ecc_fleet()
    missing = missing_inputs(frame)
    assert "gpu_temp_c" in missing  # absent
    assert "ecc_sbe_aggregate" not in missing  # present for some GPUs
    frame["xid"] = np.nan
    assert "xid" in missing_inputs(frame)  # present but all NaN
    # And features that need an absent column are NaN, never an exception.
    f = build_features(frame, CUT_8D)
    assert f["temp_mean_1d"].isna().all() and f["replay_rate_1d"].isna().all()


# --- one cutoff (scoring) against many (training, evaluation) on awkward data -----------------


def awkward(frame: pd.DataFrame) -> pd.DataFrame:
    """The sim frame with counter resets, NaN samples in gauges and counters, and a GPU whose
    samples come at other times than the rest: what the one-cutoff shortcuts must survive."""
    rng = np.random.default_rng(5)
    out = frame.sort_values(["gpu_uuid", "timestamp"], kind="stable", ignore_index=True)
    n = len(out)
    new_gpu = (out["gpu_uuid"] != out["gpu_uuid"].shift()).to_numpy()
    for col in ("ecc_sbe_aggregate", "pcie_replay_count", "thermal_violation_us", "remapped_rows_correctable"):
        # A counter that climbs and restarts at 0 now and then (a reset, or a new GPU).
        restart = new_gpu | (rng.random(n) < 0.02)
        steps = rng.poisson(3.0, n).astype(float)
        run = np.cumsum(restart)
        out[col] = pd.Series(steps).groupby(run).cumsum().to_numpy()
    for col in ("memory_temp_c", "power_w", "gpu_util_pct", "clocks_event_reasons", "pcie_replay_count"):
        out.loc[rng.random(n) < 0.02, col] = np.nan
    out.loc[rng.random(n) < 0.01, "xid"] = 79.0
    first = out["gpu_uuid"] == out["gpu_uuid"].iloc[0]
    out.loc[first, "timestamp"] += pd.Timedelta(minutes=17)
    return validate(out, source="test")


def test_one_cutoff_equals_the_same_cutoff_among_many_on_awkward_data(sim_frame: pd.DataFrame) -> None:
    frame = awkward(sim_frame)
    cuts = sim_cutoffs(frame)
    batch, single = batch_and_single(frame, cuts)
    assert single["sbe_rate_1d"].notna().any() and single["replay_rate_7d"].gt(0).any()
    assert single["xid_79_7d"].gt(0).any() and single["memtemp_mean_1d"].notna().all()
    pd.testing.assert_frame_equal(batch, single, rtol=1e-9, atol=1e-9)


def test_one_cutoff_does_not_depend_on_the_frames_row_order(sim_frame: pd.DataFrame) -> None:
    """A frame already in (GPU, time) order takes no permutation: the same features."""
    frame = awkward(sim_frame)
    cut = frame["timestamp"].max() - pd.Timedelta(hours=30)
    by_gpu = frame.sort_values(["gpu_uuid", "timestamp"], kind="stable", ignore_index=True)
    pd.testing.assert_frame_equal(build_features(by_gpu, cut), build_features(frame, cut), rtol=1e-12)
