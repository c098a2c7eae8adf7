"""The history frame: one row per GPU per sample, the common language of gpuhealth.

Columns are the identity columns plus catalogue short names (docs/history-format.md).
Files are Parquet (pyarrow) or CSV. Reading validates: a missing identity column,
a non-numeric or infinite metric, a gpu_index that is not a whole int32, an unparseable
timestamp or one outside datetime64[ns] each raise HistoryError naming the file, the
column and the first bad value; out-of-order rows are sorted; rows that repeat a
(gpu_uuid, timestamp) are dropped with a warning. NaN is allowed in metrics.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from core import catalog
from core.catalog import IDENTITY_COLUMNS
from core.shared_map import SharedMap

log = logging.getLogger(__name__)

FAILURE_MODES = ("ecc", "thermal", "pcie", "other")
BUS_IDS_ATTR = "gpuhealth_pci_bus_ids"
"""A history frame's `attrs` key: GPU UUID -> its PCI bus id (00000000:41:00.0), where the frame's source
knows it (the store's GPU records, as `BusIds`): with the host, a GPU's slot (`predictor.features.slots`)."""


class BusIds(SharedMap):
    """GPU UUID -> its PCI bus id (`BUS_IDS_ATTR`), read-only and shared with every frame taken."""


FAILURE_COLUMNS = ("gpu_uuid", "failed_at", "mode")
STRING_COLUMNS = ("hostname", "gpu_uuid", "model_name")
PARQUET_SUFFIXES = (".parquet", ".pq")
CSV_SUFFIXES = (".csv", ".csv.gz")
# The frame holds times as datetime64[ns]; a file may carry any time in another unit
# (Parquet us/ms, CSV year 1 or 9999), which pandas cannot convert.
TIME_MIN = pd.Timestamp.min.tz_localize("UTC")  # 1677-09-21
TIME_MAX = pd.Timestamp.max.tz_localize("UTC")  # 2262-04-11


class HistoryError(ValueError):
    """A history or failures file (or frame) is not usable; the message says why and where."""


class HistoryWarning(UserWarning):
    """Something in a history was repaired (duplicates dropped); the data is still usable."""


def metric_dtype(name: str) -> np.dtype:
    """float64 for counters (they grow large and must stay exact), float32 for gauges."""
    f = catalog.BY_NAME.get(name)
    return np.dtype(np.float64 if f is None or f.kind == "counter" else np.float32)


def all_nan(x: np.ndarray) -> bool:
    """Whether a float array holds no value (True when empty); a value near its end answers at once."""
    return bool(np.isnan(x[-64:]).all() and np.isnan(x).all())


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """The frame's metric columns: everything but the identity columns."""
    return [c for c in frame.columns if c not in IDENTITY_COLUMNS]


def _suffix(path: Path) -> str:
    name = path.name.lower()
    return ".csv.gz" if name.endswith(".csv.gz") else path.suffix.lower()


def read(path: str | Path, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """Read and validate a history file (Parquet or CSV).

    `columns`: read only these metric columns (those the file has; the identity columns
    always), for a caller that needs a few of many: a Parquet file then decodes only them.
    """
    p = Path(path)
    if not p.exists():
        raise HistoryError(f"{p}: no such file")
    kind = _suffix(p)
    wanted = None if columns is None else {*IDENTITY_COLUMNS, *columns}
    try:
        if kind in PARQUET_SUFFIXES:
            names = None if wanted is None else [c for c in pq.read_schema(p).names if c in wanted]
            # split_blocks/self_destruct: one array per column, each Arrow column freed once
            # converted, so reading does not hold the table and a consolidated copy at once.
            frame = pq.read_table(p, columns=names).to_pandas(split_blocks=True, self_destruct=True)
        elif kind in CSV_SUFFIXES:
            frame = pd.read_csv(p, low_memory=False, usecols=None if wanted is None else lambda c: c in wanted)
        else:
            raise HistoryError(f"{p}: unknown format {kind!r}: use .parquet or .csv")
    except HistoryError:
        raise
    except (pa.ArrowException, OSError, ValueError, pd.errors.ParserError) as err:
        raise HistoryError(f"{p}: cannot be read as {kind[1:]}: {' '.join(str(err).split())}") from err
    return validate(frame, source=str(p))


def validate(frame: pd.DataFrame, source: str = "history") -> pd.DataFrame:
    """Check and normalise a frame: types, time order, duplicates. Returns a new frame."""
    missing = [c for c in IDENTITY_COLUMNS if c not in frame.columns]
    if missing:
        raise HistoryError(
            f"{source}: missing identity column(s) {', '.join(missing)}; a history needs {', '.join(IDENTITY_COLUMNS)}"
        )
    index = frame.index
    if not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1):
        # The result gets a fresh RangeIndex: columns of a slice or a shuffled frame must
        # not be realigned onto it by their old labels.
        frame = frame.reset_index(drop=True)
    out: dict[str, pd.Series | np.ndarray] = {}
    out["timestamp"] = _timestamps(frame["timestamp"], source)
    for col in STRING_COLUMNS:
        s = frame[col]
        if s.isna().any():
            row = int(np.flatnonzero(s.isna().to_numpy())[0])
            raise HistoryError(f"{source}: column {col!r} is empty in row {row}")
        out[col] = _categorical(s)
    out["gpu_index"] = _numeric(frame["gpu_index"], "gpu_index", source, np.dtype(np.int32), allow_nan=False)
    for col in metric_columns(frame):
        out[col] = _numeric(frame[col], col, source, metric_dtype(col))
    ordered = {c: out[c] for c in IDENTITY_COLUMNS} | out
    # copy=False: columns already converted are new arrays, unchanged ones are shared
    # copy-on-write (pandas >= 3), so validating a 7 M-row frame does not double it.
    result = pd.DataFrame(ordered, index=pd.RangeIndex(len(frame)), copy=False)
    return _order(result, source)


def _timestamps(s: pd.Series, source: str, col: str = "timestamp") -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(s):
        ts = s if getattr(s.dt, "tz", None) is not None else s.dt.tz_localize("UTC")
        ts = ts.dt.tz_convert("UTC")
    elif pd.api.types.is_numeric_dtype(s):
        ts = pd.to_datetime(s, unit="s", utc=True, errors="coerce")  # Unix seconds
    else:
        ts = pd.to_datetime(s, utc=True, errors="coerce", format="mixed")
    bad = ts.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise HistoryError(
            f"{source}: unparseable timestamp {_shown(s.iloc[row])} in row {row} "
            f"({int(bad.sum())} bad in all); use ISO 8601 (2026-01-31T12:00:00Z) or Unix seconds"
        )
    if getattr(ts.dtype, "unit", "ns") != "ns":
        outside = ((ts < TIME_MIN) | (ts > TIME_MAX)).to_numpy()
        if outside.any():
            rule = f"must lie between {TIME_MIN:%Y-%m-%d} and {TIME_MAX:%Y-%m-%d}, the range of a nanosecond time"
            raise _reject(source, col, s, outside, rule, "out of range")
    return ts.astype("datetime64[ns, UTC]")


def _categorical(s: pd.Series) -> pd.Series:
    """Identity strings as categoricals: millions of rows share a few thousand values."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        cats = s.cat.categories
        return s if pd.api.types.is_string_dtype(cats) else s.cat.rename_categories(cats.astype(str))
    return s.astype(str).astype("category")


def _numeric(
    s: pd.Series, col: str, source: str, dtype: np.dtype | str = "float64", allow_nan: bool = True
) -> pd.Series:
    """`s` as `dtype`; HistoryError at the first value that is not a number, infinite, or does not fit."""
    v = _to_number(s, col, source)
    if not allow_nan and v.isna().any():
        row = int(np.flatnonzero(v.isna().to_numpy())[0])
        raise HistoryError(f"{source}: column {col!r} is empty in row {row}")
    given = pd.api.types.pandas_dtype(dtype)
    target = np.dtype(getattr(given, "numpy_dtype", given))  # "Int64" holds int64
    x = v.to_numpy()
    if x.dtype.kind not in "iuf":  # a nullable extension array: pd.NA becomes NaN
        x = v.to_numpy(dtype=np.float64, na_value=np.nan)
    if target.kind in "iu":
        _check_whole(s, x, col, source, target)
    elif x.dtype.kind == "f":
        _check_finite(s, x, col, source, target)
    return v.astype(dtype)


def _to_number(s: pd.Series, col: str, source: str) -> pd.Series:
    """`s` as a numeric series (bools as 0/1, text parsed); HistoryError at the first text that is no number."""
    if pd.api.types.is_bool_dtype(s):
        return s.astype(np.float64)
    if pd.api.types.is_numeric_dtype(s):
        return s
    v = pd.to_numeric(s, errors="coerce")
    bad = v.isna().to_numpy() & s.notna().to_numpy() & (s.astype(str).str.strip() != "").to_numpy()
    if bad.any():
        raise _reject(source, col, s, bad, "must be numeric", "non-numeric")
    return v


def _check_whole(s: pd.Series, x: np.ndarray, col: str, source: str, target: np.dtype) -> None:
    """HistoryError at the first value of `x` that is not a whole number within the integer `target`."""
    info = np.iinfo(target)
    # float(max + 1) is exact where float(max) rounds up to it (int64).
    bad = (x < info.min) | (x >= float(info.max) + 1)
    if x.dtype.kind == "f":
        bad |= (x != np.trunc(x)) & ~np.isnan(x)
    if bad.any():
        raise _reject(source, col, s, bad, f"must be a whole number from {info.min} to {info.max}", "bad")


def _check_finite(s: pd.Series, x: np.ndarray, col: str, source: str, target: np.dtype) -> None:
    """HistoryError at the first float of `x` that is infinite or too large for `target`."""
    # NaN is "no data"; an infinity is a broken writer and would poison every mean.
    bad = np.isinf(x)
    if bad.any():
        raise _reject(source, col, s, bad, "must be finite (NaN for no data)", "infinite")
    if x.dtype.itemsize > target.itemsize:
        big = np.abs(x) > np.finfo(target).max
        if big.any():
            raise _reject(source, col, s, big, f"must fit {target} (|x| <= {np.finfo(target).max:.3g})", "too large")


def _reject(source: str, col: str, s: pd.Series, bad: np.ndarray, rule: str, what: str) -> HistoryError:
    """The error for the first row flagged in `bad`: file, column, rule, value, row and how many in all."""
    row = int(np.flatnonzero(bad)[0])
    return HistoryError(
        f"{source}: column {col!r} {rule}; {_shown(s.iloc[row])} in row {row} ({int(bad.sum())} {what} in all)"
    )


def _shown(value: object) -> str:
    """A bad value as a message quotes it: text quoted, numbers and times as written."""
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, float | np.floating):
        return repr(float(value))  # 1.5, inf, 1000000000000.0: not np.float64(1.5)
    if isinstance(value, int | np.integer):
        return str(int(value))
    return str(value)


def _order(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    ts = frame["timestamp"].array.asi8  # int64 ns: no per-row Timestamp objects
    if len(frame) > 1 and not bool(np.all(ts[1:] >= ts[:-1])):
        log.info("%s: rows out of time order; sorting", source)
        frame = frame.sort_values(["timestamp", "gpu_uuid"], kind="stable", ignore_index=True)
        ts = frame["timestamp"].array.asi8
    if not _may_repeat(frame, ts):
        return frame
    dup = frame.duplicated(["gpu_uuid", "timestamp"], keep="first").to_numpy()
    if dup.any():
        n = int(dup.sum())
        first = int(np.flatnonzero(dup)[0])
        msg = (
            f"{source}: dropped {n} row(s) repeating a (gpu_uuid, timestamp) pair, "
            f"first {frame['gpu_uuid'].iloc[first]} at {pd.Timestamp(ts[first], tz='UTC').isoformat()}"
        )
        warnings.warn(msg, HistoryWarning, stacklevel=3)
        frame = frame.loc[~dup].reset_index(drop=True)
    return frame


def _may_repeat(frame: pd.DataFrame, ts: np.ndarray) -> bool:
    """False when a time-ordered frame surely holds no (gpu_uuid, timestamp) twice.

    A fast check for the usual frame (a few thousand GPUs sampled at shared times):
    number the distinct times and count each (time, GPU) cell with one bincount.
    True where that grid would be too big; the caller then runs the exact check.
    """
    if len(ts) < 2:
        return False
    uuid = frame["gpu_uuid"]
    if not isinstance(uuid.dtype, pd.CategoricalDtype):
        return True
    codes = uuid.cat.codes.to_numpy()
    n_gpus = len(uuid.cat.categories)
    step = np.empty(len(ts), dtype=np.int64)
    step[0] = 0
    np.not_equal(ts[1:], ts[:-1], out=step[1:])
    n_times = int(step.sum()) + 1
    if n_times * n_gpus > 4 * len(ts) + 1_000_000:
        return True
    cell = np.cumsum(step, out=step)
    cell *= n_gpus
    cell += codes
    seen = np.zeros(n_times * n_gpus, dtype=bool)
    seen[cell] = True
    return int(np.count_nonzero(seen)) != len(ts)  # fewer distinct cells than rows: a repeat


def xid_last_seen(frame: pd.DataFrame) -> np.ndarray:
    """The `xid` column as DCGM_FI_DEV_XID_ERRORS reports it: the last code ever seen, per GPU.

    The history's `xid` is the last code within each interval (0 for none); dcgm-exporter's
    gauge keeps the last code until another comes. Expects a time-ordered frame.
    """
    x = frame["xid"].to_numpy(dtype=np.float64, na_value=np.nan)
    seen = pd.Series(np.where(x > 0, x, np.nan)).groupby(frame["gpu_uuid"].to_numpy()).ffill()
    return np.where(np.isnan(x), np.nan, seen.fillna(0.0).to_numpy())


def xid_from_last_seen(frame: pd.DataFrame, last_seen: pd.Series | np.ndarray) -> np.ndarray:
    """Per-interval codes from DCGM's last-seen gauge: a code counts where the gauge changed.

    Lossy by nature: the gauge cannot show the same code twice in a row, and a GPU's first
    sample cannot tell an old code from a new one, so it counts as none.
    """
    v = np.asarray(last_seen, dtype=np.float64)
    prev = pd.Series(v).groupby(frame["gpu_uuid"].to_numpy()).shift().to_numpy()
    changed = ~np.isnan(prev) & (v != prev) & (v > 0)
    return np.where(np.isnan(v), np.nan, np.where(changed, v, 0.0))


def write(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write a frame as Parquet or CSV by the file's suffix (validated first)."""
    p = Path(path)
    kind = _suffix(p)
    if kind not in PARQUET_SUFFIXES + CSV_SUFFIXES:
        raise HistoryError(f"{p}: unknown format {kind!r}: use .parquet or .csv")
    p.parent.mkdir(parents=True, exist_ok=True)
    if kind in PARQUET_SUFFIXES:
        pq.write_table(to_arrow(frame), p, compression="zstd")
    else:
        out = frame.copy()
        out["timestamp"] = out["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
        out.to_csv(p, index=False)
    return p


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """The frame as an Arrow table with the file schema (no pandas index)."""
    return pa.Table.from_pandas(frame, preserve_index=False)


def empty(columns: Iterable[str] = catalog.HISTORY_COLUMNS) -> pd.DataFrame:
    """A frame with no rows and the given metric columns."""
    data: dict[str, pd.Series] = {
        "timestamp": pd.Series([], dtype="datetime64[ns, UTC]"),
        "hostname": pd.Series([], dtype=str).astype("category"),
        "gpu_uuid": pd.Series([], dtype=str).astype("category"),
        "gpu_index": pd.Series([], dtype=np.int32),
        "model_name": pd.Series([], dtype=str).astype("category"),
    }
    for c in columns:
        data[c] = pd.Series([], dtype=metric_dtype(c))
    return pd.DataFrame(data)


def read_failures(path: str | Path) -> pd.DataFrame:
    """Read failure labels: CSV with gpu_uuid, failed_at, mode (+ optional hostname, xid)."""
    p = Path(path)
    if not p.exists():
        raise HistoryError(f"{p}: no such file")
    try:
        frame = pd.read_csv(p)
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise HistoryError(f"{p}: cannot be read as CSV: {' '.join(str(err).split())}") from err
    return validate_failures(frame, str(p))


def validate_failures(frame: pd.DataFrame, source: str = "failures") -> pd.DataFrame:
    """Check failure labels: required columns, parseable times, known modes."""
    missing = [c for c in FAILURE_COLUMNS if c not in frame.columns]
    if missing:
        raise HistoryError(f"{source}: missing column(s) {', '.join(missing)}; need {', '.join(FAILURE_COLUMNS)}")
    out = frame.copy()
    out["failed_at"] = _timestamps(frame["failed_at"], source, "failed_at")
    out["gpu_uuid"] = frame["gpu_uuid"].astype(str)
    mode = frame["mode"].astype(str).str.strip().str.lower()
    bad = ~mode.isin(FAILURE_MODES)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise HistoryError(
            f"{source}: unknown mode {frame['mode'].iloc[row]!r} in row {row}; use {', '.join(FAILURE_MODES)}"
        )
    out["mode"] = mode
    if "xid" in out.columns:
        out["xid"] = _numeric(frame["xid"], "xid", source, "Int64")
    return out.sort_values("failed_at", kind="stable", ignore_index=True)


def write_failures(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write failure labels as CSV (ISO 8601 UTC times)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    out = frame.copy()
    for col in out.columns:
        if col == "failed_at" or pd.api.types.is_datetime64_any_dtype(out[col]):
            out[col] = pd.to_datetime(out[col], utc=True).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    out.to_csv(p, index=False)
    return p
