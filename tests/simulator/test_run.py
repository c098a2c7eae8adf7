from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core import history
from simulator.fleet import SimConfig
from simulator.run import HISTORY_COLUMNS, simulate

MIX = {"NVIDIA A100-SXM4-80GB": 0.3, "NVIDIA H100 80GB HBM3": 0.5, "NVIDIA H200": 0.2}


@pytest.fixture(scope="module")
def fleet() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The issue's reference fleet: 512 GPUs x 120 days hourly (about 3 s)."""
    return simulate(SimConfig(nodes=64, gpus_per_node=8, seed=7, models=MIX, random_failures=True), 120)


def test_frame_is_a_valid_history(fleet) -> None:
    frame, failures = fleet
    assert list(frame.columns[:5]) == ["timestamp", "hostname", "gpu_uuid", "gpu_index", "model_name"]
    assert set(HISTORY_COLUMNS) <= set(frame.columns)
    again = history.validate(frame)
    assert list(again.dtypes) == list(frame.dtypes)
    assert again.equals(frame), "the simulator writes the canonical form validate() gives"
    history.validate_failures(failures)
    assert set(frame["model_name"].unique()) == set(MIX)


def test_enough_failures_of_every_mode(fleet) -> None:
    _, failures = fleet
    assert len(failures) >= 60
    share = failures["mode"].value_counts(normalize=True)
    assert share["other"] >= 0.30, "at least 30 % of failures come without precursor"
    for mode in ("ecc", "thermal", "pcie"):
        assert share[mode] >= 0.05


def test_failed_gpus_stop_reporting_and_are_replaced(fleet) -> None:
    frame, failures = fleet
    last = frame.groupby("gpu_uuid", observed=True)["timestamp"].max()
    for f in failures.itertuples():
        assert last[f.gpu_uuid] < f.failed_at
        assert last[f.gpu_uuid] >= f.failed_at - pd.Timedelta(hours=6)
    # Replacements: the fleet holds more UUIDs than slots, and a slot's new GPU starts later.
    assert frame["gpu_uuid"].nunique() > 512
    first = frame.groupby("gpu_uuid", observed=True)["timestamp"].min()
    late = first[first > frame["timestamp"].min() + pd.Timedelta(days=1)]
    assert len(late) >= 0.5 * len(failures[failures["failed_at"] < frame["timestamp"].max() - pd.Timedelta(days=6)])


def test_counters_monotonic_between_reboots(fleet) -> None:
    frame, _ = fleet
    g = frame.sort_values(["gpu_uuid", "timestamp"])
    same = g["gpu_uuid"].to_numpy()[1:] == g["gpu_uuid"].to_numpy()[:-1]
    agg = np.diff(g["ecc_sbe_aggregate"].to_numpy())[same]
    assert np.all(agg >= 0), "aggregate ECC never resets"
    vol = np.diff(g["ecc_sbe_volatile"].to_numpy())[same]
    # The energy counter restarts at a reboot too, to a small value (the features see resets by it).
    energy = np.diff(g["energy_mj"].to_numpy())[same]
    assert (energy < 0).any()
    drops = vol < 0
    assert drops.any(), "volatile counters reset at reboots"
    # Every drop of a volatile counter is a reset to zero (a reboot), never a partial decrease.
    after = g["ecc_sbe_volatile"].to_numpy()[1:][same][drops]
    assert np.all(after <= np.diff(g["ecc_sbe_aggregate"].to_numpy())[same][drops])


def test_precursor_lead_times_follow_config(fleet) -> None:
    _, failures = fleet
    lead_days = (failures["failed_at"] - failures["precursor_onset"]).dt.total_seconds() / 86400
    by_mode = lead_days.groupby(failures["fault"]).median()
    assert 2.5 <= by_mode["ecc"] <= 9, "configured median 5 days (lognormal)"
    assert 1.0 <= by_mode["pcie"] <= 5, "configured median 2 days"
    assert (lead_days[failures["mode"] == "other"] < 1 / 24).all(), "sudden failures give no warning"
    spread = lead_days[failures["fault"] == "ecc"]
    assert spread.max() > 3 * spread.min(), "speeds vary"


def test_healthy_confounders_exist(fleet) -> None:
    frame, failures = fleet
    failed = set(failures["gpu_uuid"])
    healthy = frame[~frame["gpu_uuid"].isin(failed)]
    per_gpu = healthy.groupby("gpu_uuid", observed=True)
    sbe = per_gpu["ecc_sbe_aggregate"].max()
    assert (sbe >= 10).sum() >= 5, "some healthy GPUs log bursts of SBEs"
    assert (sbe == 0).mean() > 0.8, "most GPUs never log an SBE (Titan: ~95 %)"
    assert per_gpu["gpu_temp_c"].max().max() >= 70, "hot slots run warm without failing"
    replays = per_gpu["pcie_replay_count"].max()
    assert (replays >= 20).sum() >= 5, "replay bursts after reboots on healthy GPUs"
    assert frame["memory_temp_c"].isna().any(), "unsupported/missing fields are NaN"
    assert frame["retired_pages_sbe"].isna().all(), "page retirement is pre-Ampere"


def test_missing_samples(fleet) -> None:
    frame, _ = fleet
    per_gpu = frame.groupby("gpu_uuid", observed=True)["timestamp"]
    span_h = (per_gpu.max() - per_gpu.min()).dt.total_seconds() / 3600 + 1
    coverage = per_gpu.size().sum() / span_h.sum()
    assert 0.97 < coverage < 0.999


def test_healthy_temperatures_inside_limits(fleet) -> None:
    frame, failures = fleet
    healthy = frame[~frame["gpu_uuid"].isin(set(failures["gpu_uuid"]))]
    assert healthy["gpu_temp_c"].max() < 87, "max operating temperature (H100 87, A100 85 C)"
    a100 = healthy[healthy["model_name"] == "NVIDIA A100-SXM4-80GB"]
    assert a100["gpu_temp_c"].max() < 85


def test_deterministic_and_seed_dependent() -> None:
    a, fa = simulate(SimConfig(nodes=2, gpus_per_node=4, seed=1, random_failures=True, acceleration=50), 10)
    b, fb = simulate(SimConfig(nodes=2, gpus_per_node=4, seed=1, random_failures=True, acceleration=50), 10)
    c, _ = simulate(SimConfig(nodes=2, gpus_per_node=4, seed=2, random_failures=True, acceleration=50), 10)
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(fa, fb)
    assert not a["gpu_temp_c"].equals(c["gpu_temp_c"])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="positive"):
        simulate(SimConfig(), 0)
    with pytest.raises(ValueError, match="less than one sample"):
        simulate(SimConfig(), 0.01, 3600)
