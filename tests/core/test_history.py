from __future__ import annotations

from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from core import history
from core.history import HistoryError, HistoryWarning
from gpuhealth.cli import app


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


_HEADER = "timestamp,hostname,gpu_uuid,gpu_index,model_name,gpu_temp_c,ecc_sbe_volatile\n"


def _csv(tmp_path, second_row: str) -> Path:
    """A two-row history CSV: a good first row, then `second_row` (the bad one is row 1)."""
    p = tmp_path / "bad.csv"
    p.write_text(_HEADER + "2026-01-01T00:00:00Z,n1,GPU-a,0,m,40,0\n" + second_row + "\n")
    return p


def _parquet_with_time(tmp_path, when: datetime, unit: str, tz: str | None) -> Path:
    p = tmp_path / "bad.parquet"
    n = 2
    table = pa.table(
        {
            "timestamp": pa.array([datetime(2026, 1, 1), when], pa.timestamp(unit, tz=tz)),
            "hostname": ["n1"] * n,
            "gpu_uuid": ["GPU-a"] * n,
            "gpu_index": [0] * n,
            "model_name": ["m"] * n,
            "gpu_temp_c": [40.0] * n,
        }
    )
    pq.write_table(table, p)
    return p


@pytest.mark.parametrize(
    ("second_row", "message"),
    [
        (
            "0001-01-01T00:00:00Z,n1,GPU-a,0,m,41,0",
            r"bad\.csv: column 'timestamp' must lie between 1677-09-21 and 2262-04-11.*"
            r"'0001-01-01T00:00:00Z' in row 1",
        ),
        (
            "9999-12-31T23:59:59Z,n1,GPU-a,0,m,41,0",
            r"bad\.csv: column 'timestamp' must lie .*'9999-12-31T23:59:59Z' in row 1",
        ),
        (
            "2026-01-01T01:00:00Z,n1,GPU-a,1.5,m,41,0",
            r"bad\.csv: column 'gpu_index' must be a whole number .*; 1\.5 in row 1",
        ),
        (
            "2026-01-01T01:00:00Z,n1,GPU-a,1e12,m,41,0",
            r"bad\.csv: column 'gpu_index' must be a whole number from -2147483648 to 2147483647; "
            r"1000000000000\.0 in row 1",
        ),
        ("2026-01-01T01:00:00Z,n1,GPU-a,0,m,inf,0", r"bad\.csv: column 'gpu_temp_c' must be finite .*; inf in row 1"),
        (
            "2026-01-01T01:00:00Z,n1,GPU-a,0,m,41,-inf",
            r"bad\.csv: column 'ecc_sbe_volatile' must be finite .*; -inf in row 1",
        ),
        (
            "2026-01-01T01:00:00Z,n1,GPU-a,0,m,1e39,0",
            r"bad\.csv: column 'gpu_temp_c' must fit float32 .*; 1e\+39 in row 1",
        ),
    ],
    ids=["year-1", "year-9999", "index-1.5", "index-1e12", "gauge-inf", "counter-minus-inf", "gauge-1e39"],
)
def test_bad_values_in_a_csv_are_one_line_errors(tmp_path, second_row: str, message: str) -> None:
    """Out-of-range times, a fractional or huge gpu_index, infinite metrics: file, column, row, value."""
    with pytest.raises(HistoryError, match=message) as caught:
        history.read(_csv(tmp_path, second_row))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("when", "unit", "tz"),
    [(datetime(1, 1, 1), "us", "UTC"), (datetime(9999, 1, 1), "ms", None), (datetime(1500, 6, 1), "s", "UTC")],
)
def test_parquet_times_outside_nanoseconds_are_one_line_errors(
    tmp_path, when: datetime, unit: str, tz: str | None
) -> None:
    with pytest.raises(HistoryError, match=rf"bad\.parquet: column 'timestamp' must lie .*{when.year:04d}-.* in row 1"):
        history.read(_parquet_with_time(tmp_path, when, unit, tz))


def test_unix_seconds_outside_nanoseconds_are_an_error() -> None:
    with pytest.raises(HistoryError, match=r"x\.csv: column 'timestamp' must lie .*; 1000000000000\.0 in row 2"):
        history.validate(_frame(timestamp=[1767225600, 1767225600, 1e12]), source="x.csv")


def test_in_range_parquet_times_of_any_unit_are_kept(tmp_path) -> None:
    f = history.read(_parquet_with_time(tmp_path, datetime(2262, 1, 1), "ms", "UTC"))
    assert str(f["timestamp"].dtype) == "datetime64[ns, UTC]" and f["timestamp"].iloc[1].year == 2262


@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_infinite_metric_in_a_frame_is_an_error_but_nan_is_not(value: float) -> None:
    with pytest.raises(HistoryError, match=rf"x\.parquet: column 'gpu_temp_c' must be finite .*; {value!r} in row 2"):
        history.validate(_frame(gpu_temp_c=[40.0, np.nan, value]), source="x.parquet")
    f = history.validate(_frame(gpu_temp_c=[np.nan, np.nan, np.nan]))
    assert f["gpu_temp_c"].isna().all()


@pytest.mark.parametrize(
    "index",
    [[0, 1, 2**31], [0, 1.0, 2.5], pd.array([0, 1, 3_000_000_000], dtype="Int64")],
    ids=["int64-2**31", "float-2.5", "Int64-3e9"],
)
def test_gpu_index_must_fit_int32_and_be_whole(index: object) -> None:
    with pytest.raises(
        HistoryError, match=r"x\.csv: column 'gpu_index' must be a whole number .* in row 2 \(1 bad in all\)"
    ):
        history.validate(_frame(gpu_index=index), source="x.csv")


def test_whole_float_and_unknown_gpu_index_are_kept() -> None:
    """1.0 from a CSV with a NaN elsewhere is a fine index; -1 is prom_import's "unknown"."""
    f = history.validate(_frame(gpu_index=[0.0, 1.0, -1.0]))
    assert f["gpu_index"].dtype == np.int32 and list(f["gpu_index"]) == [0, 1, -1]


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("GPU-a,0001-01-02T00:00:00Z,ecc,48", r"f\.csv: column 'failed_at' must lie .*'0001-01-02T00:00:00Z' in row 0"),
        ("GPU-a,2026-01-02T00:00:00Z,ecc,48.5", r"f\.csv: column 'xid' must be a whole number .*; 48\.5 in row 0"),
    ],
    ids=["failed-at-year-1", "xid-48.5"],
)
def test_bad_failure_labels_are_one_line_errors(tmp_path, rows: str, message: str) -> None:
    p = tmp_path / "f.csv"
    p.write_text("gpu_uuid,failed_at,mode,xid\n" + rows + "\n")
    with pytest.raises(HistoryError, match=message):
        history.read_failures(p)


@pytest.mark.parametrize(
    ("second_row", "needle"),
    [
        ("0001-01-01T00:00:00Z,n1,GPU-a,0,m,41,0", "column 'timestamp' must lie between 1677-09-21 and 2262-04-11"),
        ("2026-01-01T01:00:00Z,n1,GPU-a,1e12,m,41,0", "column 'gpu_index' must be a whole number"),
        ("2026-01-01T01:00:00Z,n1,GPU-a,0,m,inf,0", "column 'gpu_temp_c' must be finite"),
    ],
    ids=["year-1", "index-1e12", "gauge-inf"],
)
def test_cli_score_prints_one_line_for_a_bad_history(tmp_path, second_row: str, needle: str) -> None:
    """The reader's error reaches the user as the CLI's one error line, not a traceback."""
    bad = _csv(tmp_path, second_row)
    result = CliRunner().invoke(app, ["score", "--history", str(bad)])
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0] and "in row 1" in lines[0]


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


def test_all_nan_looks_at_every_value_not_only_the_end() -> None:
    x = np.full(1000, np.nan, dtype=np.float32)
    assert history.all_nan(x) and history.all_nan(np.empty(0))
    x[3] = 1.0  # far from the end: the end alone would say "no value"
    assert not history.all_nan(x)
    assert not history.all_nan(np.array([np.nan, 2.0]))
