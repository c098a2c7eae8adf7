from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuhealth import history
from gpuhealth.history import HistoryError, HistoryWarning


def _frame(**over: object) -> pd.DataFrame:
    data: dict[str, object] = {
        "timestamp": ["2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"],
        "hostname": ["n1", "n1", "n1"],
        "gpu_uuid": ["GPU-a", "GPU-b", "GPU-a"],
        "gpu_index": [0, 1, 0],
        "model_name": ["NVIDIA H100 80GB HBM3"] * 3,
        "gpu_temp_c": [40.0, 41.5, np.nan],
        "ecc_sbe_volatile": [0, 3, 5],
    }
    data.update(over)
    return pd.DataFrame(data)


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".csv.gz"])
def test_round_trip(tmp_path, suffix: str) -> None:
    f = history.validate(_frame())
    back = history.read(history.write(f, tmp_path / f"h{suffix}"))
    pd.testing.assert_frame_equal(back, f)
    assert str(back["timestamp"].dtype) == "datetime64[ns, UTC]"
    assert back["gpu_temp_c"].dtype == np.float32 and back["ecc_sbe_volatile"].dtype == np.float64
    assert np.isnan(back["gpu_temp_c"].iloc[2]), "NaN survives"


def test_sorts_out_of_order_rows() -> None:
    f = history.validate(_frame(timestamp=["2026-01-01T02:00:00Z", "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"]))
    assert list(f["timestamp"].dt.hour) == [0, 1, 2]
    assert list(f["gpu_uuid"]) == ["GPU-b", "GPU-a", "GPU-a"]


@pytest.mark.parametrize("reindex", ["slice", "shuffled", "labels"])
def test_any_index_keeps_rows_together(reindex: str) -> None:
    raw = _frame()
    if reindex == "slice":
        raw = raw.iloc[1:]
    elif reindex == "shuffled":
        raw = raw.iloc[[2, 0, 1]]
    else:
        raw.index = pd.Index(["x", "y", "z"])
    f = history.validate(raw)
    expected = history.validate(raw.reset_index(drop=True))
    pd.testing.assert_frame_equal(f, expected)
    assert not f[["hostname", "gpu_uuid", "model_name"]].isna().any().any()
    row = f[f["gpu_uuid"] == "GPU-b"]
    assert len(raw) == 2 or (row["ecc_sbe_volatile"].tolist() == [3.0] and row["gpu_temp_c"].tolist() == [41.5])


def test_drops_duplicates_with_warning() -> None:
    raw = _frame(
        gpu_uuid=["GPU-a", "GPU-a", "GPU-a"],
        timestamp=["2026-01-01T00:00:00Z"] * 2 + ["2026-01-01T01:00:00Z"],
    )
    with pytest.warns(HistoryWarning, match=r"dropped 1 row\(s\) repeating .* first GPU-a at 2026-01-01T00:00:00"):
        f = history.validate(raw)
    assert len(f) == 2 and f["gpu_temp_c"].iloc[0] == 40.0, "the first of the repeats is kept"


def test_accepts_unix_seconds_and_naive_datetimes() -> None:
    a = history.validate(_frame(timestamp=[1767225600, 1767225600, 1767229200]))
    b = history.validate(_frame(timestamp=pd.to_datetime(["2026-01-01 00:00", "2026-01-01 00:00", "2026-01-01 01:00"])))
    pd.testing.assert_series_equal(a["timestamp"], b["timestamp"])


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (
            _frame().drop(columns=["gpu_uuid", "hostname"]),
            "missing identity column\\(s\\) hostname, gpu_uuid",
        ),
        (
            _frame(timestamp=["2026-01-01", "yesterday", "2026-01-02"]),
            "unparseable timestamp 'yesterday' in row 1",
        ),
        (_frame(gpu_temp_c=["40", "hot", "42"]), "column 'gpu_temp_c' must be numeric; 'hot' in row 1"),
        (_frame(gpu_index=[0, None, 0]), "column 'gpu_index' is empty in row 1"),
        (_frame(gpu_uuid=["GPU-a", None, "GPU-a"]), "column 'gpu_uuid' is empty in row 1"),
    ],
)
def test_clear_errors(frame: pd.DataFrame, message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        history.validate(frame, source="x.csv")


def test_file_errors(tmp_path) -> None:
    with pytest.raises(HistoryError, match="no such file"):
        history.read(tmp_path / "nope.parquet")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(HistoryError, match=r"bad\.parquet: cannot be read as parquet"):
        history.read(bad)
    (tmp_path / "h.xlsx").write_text("x")
    with pytest.raises(HistoryError, match=r"unknown format '\.xlsx'"):
        history.read(tmp_path / "h.xlsx")
    with pytest.raises(HistoryError, match="unknown format"):
        history.write(_frame(), tmp_path / "h.json")


def test_empty_frame_validates() -> None:
    f = history.validate(history.empty())
    assert len(f) == 0 and "gpu_temp_c" in f.columns


def test_failures(tmp_path) -> None:
    p = tmp_path / "f.csv"
    p.write_text(
        "gpu_uuid,failed_at,mode,xid\nGPU-b,2026-01-03T00:00:00Z,thermal,79\nGPU-a,2026-01-02T00:00:00Z,ECC,48\n"
    )
    f = history.read_failures(p)
    assert list(f["gpu_uuid"]) == ["GPU-a", "GPU-b"] and list(f["mode"]) == ["ecc", "thermal"]
    assert list(f["xid"]) == [48, 79]
    back = history.read_failures(history.write_failures(f, tmp_path / "g.csv"))
    pd.testing.assert_frame_equal(back, f)
    p.write_text("gpu_uuid,failed_at,mode\nGPU-a,2026-01-02,melted\n")
    with pytest.raises(HistoryError, match="unknown mode 'melted' in row 0"):
        history.read_failures(p)
    p.write_text("gpu_uuid,mode\nGPU-a,ecc\n")
    with pytest.raises(HistoryError, match="missing column\\(s\\) failed_at"):
        history.read_failures(p)


def test_xid_between_interval_codes_and_dcgm_last_seen_gauge() -> None:
    f = history.validate(
        pd.DataFrame(
            {
                "timestamp": [f"2026-01-01T0{h}:00:00Z" for h in range(6)] * 2,
                "hostname": ["n1"] * 12,
                "gpu_uuid": ["GPU-a"] * 6 + ["GPU-b"] * 6,
                "gpu_index": [0] * 6 + [1] * 6,
                "model_name": ["m"] * 12,
                "xid": [0, 79, 0, 0, 48, 0, 0, 0, 0, 0, 0, 0],  # GPU-a, then GPU-b
            }
        )
    )
    a = f["gpu_uuid"] == "GPU-a"
    last_seen = history.xid_last_seen(f)
    assert list(last_seen[a.to_numpy()]) == [0, 79, 79, 79, 48, 48], "the gauge keeps the last code"
    assert list(last_seen[~a.to_numpy()]) == [0] * 6, "one GPU's code never leaks into another's"
    back = history.xid_from_last_seen(f, last_seen)
    assert list(back) == list(f["xid"]), "per-interval codes survive the round trip through the gauge"
    # A GPU whose first sample already shows a code: it may be old, so it is not counted.
    assert list(history.xid_from_last_seen(f.iloc[:3], np.array([95.0, 95.0, 95.0]))) == [0.0, 0.0, 0.0]
