"""utc_ns: the frame's timestamps from µs in one multiply are pandas' own conversion, bit for bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from store.samples import utc_ns


def pandas_way(ts: np.ndarray) -> pd.DatetimeIndex:
    return pd.to_datetime(ts, unit="us", utc=True).astype("datetime64[ns, UTC]")


def test_times_are_pandas_conversion_exactly() -> None:
    rng = np.random.default_rng(3)
    lo, hi = pd.Timestamp.min.value // 1000 + 1, pd.Timestamp.max.value // 1000
    ts = np.concatenate([rng.integers(-(2**50), 2**50, 10_000), [lo, hi, 0, -1, 1_700_000_000_123_456]])
    got, want = utc_ns(ts), pandas_way(ts)
    assert got.dtype == want.dtype == "datetime64[ns, UTC]"
    assert np.array_equal(got.asi8, want.asi8)
    pd.testing.assert_index_equal(got, want)


def test_a_time_past_what_nanoseconds_hold_is_refused_as_before() -> None:
    late = np.array([0, pd.Timestamp.max.value // 1000 + 1], dtype=np.int64)
    with pytest.raises(pd.errors.OutOfBoundsDatetime):
        pandas_way(late)
    with pytest.raises(pd.errors.OutOfBoundsDatetime):
        utc_ns(late)


def test_no_times() -> None:
    assert len(utc_ns(np.empty(0, np.int64))) == 0
