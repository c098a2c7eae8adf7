"""Write a history frame as OpenMetrics text, e.g. to backfill Prometheus with promtool.

`promtool tsdb create-blocks-from openmetrics FILE DIR` turns the file into TSDB blocks.
Names and labels are the exporter's (dcgm-exporter compatible), so dashboards and
`gpuhealth history import` read the backfilled data like scraped data.

Speed: a 120-day hourly history of 512 GPUs is ~50-70M samples (~10 GB of text). Lines
are built column by column with Arrow's C string kernels (float formatting, take,
join) and written straight from Arrow's string buffer, never one Python string per
sample.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from core import catalog, history
from core.history import metric_columns
from core.labels import HOSTNAME

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
MAX_CHUNK_ROWS = 1 << 20
"""Rows formatted at once: bounds memory, and keeps one chunk's text inside Arrow's 2 GiB
string-array limit."""


def _escape(value: str) -> str:
    """A label value or HELP text escaped as OpenMetrics requires (backslash, quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _timestamps(ns: np.ndarray) -> pa.Array:
    """Unix seconds as text followed by a newline; millisecond precision (Prometheus's own)."""
    ms = ns // 1_000_000
    secs = pa.array(ms // 1000)
    frac = ms % 1000
    text = pc.cast(secs, pa.string())
    if frac.any():
        with_frac = pc.binary_join_element_wise(text, pc.utf8_lpad(pc.cast(pa.array(frac), pa.string()), 3, "0"), ".")
        text = pc.if_else(pa.array(frac != 0), with_frac, text)
    return pc.binary_join_element_wise(text, "\n", "")


def _values(v: np.ndarray) -> pa.Array:
    """Shortest round-trip text of each value (float32 gauges as float32), +Inf/-Inf spelt out."""
    text = pc.cast(pa.array(v), pa.string())
    inf = np.isinf(v)
    if inf.any():
        spelt = pa.array(np.where(v > 0, "+Inf", "-Inf"))
        text = pc.if_else(pa.array(inf), spelt, text)
    return text


def _buffer(lines: pa.Array) -> memoryview:
    """The bytes of all strings of a string array back to back (no copy)."""
    width = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    offsets = np.frombuffer(
        lines.buffers()[1], dtype=width, count=len(lines) + 1, offset=lines.offset * np.dtype(width).itemsize
    )
    data = lines.buffers()[2]
    return memoryview(data)[int(offsets[0]) : int(offsets[-1])]


def _family_text(
    name: str, help_text: str, prefixes: pa.Array, series: np.ndarray, values: np.ndarray, ts: pa.Array
) -> Iterator[memoryview | bytes]:
    """Metadata and sample lines of one family, in row order (series by series, time order)."""
    yield f"# HELP {name} {_escape(help_text)}\n# TYPE {name} gauge\n".encode()
    for lo in range(0, len(values), MAX_CHUNK_ROWS):
        v = values[lo : lo + MAX_CHUNK_ROWS]
        keep = ~np.isnan(v)
        if not keep.any():
            continue
        idx = np.flatnonzero(keep) + lo
        lines = pc.binary_join_element_wise(
            pc.take(prefixes, pa.array(series[idx])), _values(v[keep]), ts.take(pa.array(idx)), " "
        )
        yield _buffer(lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines)


def write_openmetrics(frame: pd.DataFrame, out: TextIO | BinaryIO | str | Path, hostname_label: str = HOSTNAME) -> int:
    """Write a validated history frame as OpenMetrics text; returns the number of series written."""
    if not _LABEL_NAME.match(hostname_label):
        raise ValueError(f"invalid label name {hostname_label!r}: use e.g. Hostname or hostname")
    if isinstance(out, str | Path):
        with Path(out).open("wb") as fh:
            return write_openmetrics(frame, fh, hostname_label)
    binary = isinstance(out, io.RawIOBase | io.BufferedIOBase) or "b" in getattr(out, "mode", "")

    def emit(chunk: memoryview | bytes) -> None:
        if binary:
            cast(BinaryIO, out).write(chunk)
        else:
            cast(TextIO, out).write(bytes(chunk).decode())

    ident = ["hostname", "gpu_index", "gpu_uuid", "model_name"]
    # A series is one label set; group on all identity labels so that a GPU that moved
    # host or slot mid-history gets one series per label set, as Prometheus would.
    series = frame.groupby(ident, sort=True, observed=True).ngroup().to_numpy()
    ns = frame["timestamp"].to_numpy(dtype="datetime64[ns]").view(np.int64)
    order = np.lexsort((ns, series))  # OpenMetrics: a series' samples together, in time order
    series = series[order]
    ts = _timestamps(ns[order])
    first_rows = order[np.flatnonzero(np.diff(series, prepend=-1) != 0)]
    label_text = [
        f'{{gpu="{int(i)}",UUID="{_escape(u)}",device="nvidia{int(i)}",'
        f'modelName="{_escape(m)}",{hostname_label}="{_escape(h)}"}}'
        for h, i, u, m in frame[ident].iloc[first_rows].itertuples(index=False, name=None)
    ]
    written = 0
    for col in metric_columns(frame):
        field = catalog.BY_NAME.get(col)
        if field is None:
            continue  # not a catalogue signal: it has no metric name
        # The history's xid is per interval; DCGM_FI_DEV_XID_ERRORS is the last code seen.
        raw = history.xid_last_seen(frame) if col == "xid" else frame[col].to_numpy()
        values = raw[order]
        present = ~np.isnan(values)
        if not present.any():
            continue
        written += int(np.count_nonzero(np.diff(series[present], prepend=-1)))  # series is sorted
        name = field.metric_name
        # Every family is typed gauge: OpenMetrics requires counter samples to end in
        # _total, and the DCGM names (DCGM_FI_DEV_PCIE_REPLAY_COUNTER, ...) do not. Typed
        # counter they would be rejected or renamed; as gauges they keep the exact names
        # the exporter, dashboards and `history import` use, and rate() works the same.
        prefixes = pa.array([name + t for t in label_text])
        for chunk in _family_text(name, field.help, prefixes, series, values, ts):
            emit(chunk)
    emit(b"# EOF\n")
    return written
