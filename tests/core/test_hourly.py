"""The one roll-up into hours (core.hourly): what each column becomes, and how rows are stamped."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from core.hourly import HOURLY_ATTR, SHARE, is_hourly, rollup, to_hours
from simulator.fleet import SimConfig
from simulator.run import simulate
from tests.frames import T0, rows


def test_an_hour_covers_its_samples_after_the_hour_and_is_stamped_at_its_end() -> None:
    f = rows(
        [0, 20, 50, 70],
        gpu_temp_c=[40.0, 50.0, 60.0, 70.0],
        ecc_sbe_volatile=[1.0, 2.0, 5.0, 6.0],
        xid=[0.0, 92.0, 48.0, 0.0],
        pcie_link_width=[16.0, 16.0, 8.0, 8.0],
        clocks_event_reasons=[0.0, 0x40, 0x4, 0x20],
    )
    h = to_hours(f)
    # 0 min closes the hour before; 20 and 50 min are (0, 1 h]; 70 min is the hour still open
    # at the frame's end, stamped at its newest sample.
    assert list(h["timestamp"]) == [T0, T0 + pd.Timedelta(hours=1), T0 + pd.Timedelta(minutes=70)]
    assert h["gpu_temp_c"].tolist() == [40.0, 55.0, 70.0]  # gauges: the hour's mean
    assert h["ecc_sbe_volatile"].tolist() == [1.0, 5.0, 6.0]  # counters: the value at the hour's end
    assert h["xid"].tolist() == [0.0, 48.0, 0.0]  # the last code seen in the hour
    assert h["pcie_link_width"].tolist() == [16.0, 8.0, 8.0]  # a state: its value at the hour's end
    assert h[SHARE].tolist() == [0.0, 0.5, 1.0]  # 0x40 and 0x20 are heat, 0x4 is not
    assert (h["hostname"].astype(str).tolist(), int(h["gpu_index"].iloc[0])) == (["node-a"] * 3, 3)
    assert h.attrs[HOURLY_ATTR] and to_hours(h) is h


def test_samples_after_the_cutoff_belong_to_no_row() -> None:
    f = rows([10, 20, 50], gpu_temp_c=[40.0, 50.0, 90.0], ecc_sbe_volatile=[1.0, 2.0, 9.0])
    h = to_hours(f, until=T0 + pd.Timedelta(minutes=30))
    assert list(h["timestamp"]) == [T0 + pd.Timedelta(minutes=20)]
    assert h["gpu_temp_c"].tolist() == [45.0] and h["ecc_sbe_volatile"].tolist() == [2.0]


def test_a_frame_on_the_hour_comes_back_as_it_was_with_its_share() -> None:
    frame, _ = simulate(SimConfig(nodes=1, gpus_per_node=4, seed=2), days=2)
    assert is_hourly(frame)
    h = to_hours(frame)
    pd.testing.assert_frame_equal(h[frame.columns], frame)
    flags = ((frame["clocks_event_reasons"].to_numpy().astype(np.int64) & 0x68) > 0).astype(float)
    assert h[SHARE].to_numpy() == pytest.approx(flags)


def test_rolling_the_same_samples_in_any_order_gives_the_same_hours() -> None:
    rng = np.random.default_rng(3)
    n = 500
    u = rng.choice(np.array(["GPU-a", "GPU-b"], dtype=object), n)
    ts = rng.integers(0, 10 * 3_600_000_000, n)
    v = pd.DataFrame({"gpu_temp_c": rng.normal(60, 5, n), "pcie_replay_count": np.sort(rng.integers(0, 99, n))})
    a = rollup(u, ts, v)
    perm = rng.permutation(n)
    b = rollup(u[perm], ts[perm], v.iloc[perm])
    pd.testing.assert_frame_equal(a, b)
    assert a["n"].sum() == n
