"""The `replay` backend: a recorded history frame served as if it were live GPUs.

History time starts at the frame's first timestamp when the backend is created and
advances `speed` history seconds per wall second (`speed=3600`: an hour per second).
Each `read()` returns, per GPU that has appeared by then, its latest row at or before
the history time. The frame is flattened at start into per-GPU blocks sorted by time,
so a read is a few `searchsorted` calls plus one small dict per GPU, whatever the
history's length.

XID: the history format's `xid` column is "the last XID seen in the interval, 0 for
none", so every nonzero row crossed since the previous read becomes one XidEvent (with
the row's own timestamp), and `gpuhealth_xid_errors_total` counts them. With `loop`,
replay starts again from the first rows one sampling interval after the last ones;
XID counting continues across laps (a counter never goes back, so each lap adds its
events again), events keep their recorded timestamps, and a GPU lost in one lap
answers again from the start of the next.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from collector.backends.base import BackendError, CommonOptions, GpuInfo, GpuReading, ProbeRunner, XidEvent
from core import catalog
from core.history import HistoryError, metric_columns, validate
from core.history import read as read_history

LOST_AFTER_INTERVALS = 2
"""A GPU whose rows end early is lost once replay passes its last row by this many of its
sampling intervals: one missed sample can be jitter, two in a row is a GPU gone."""


@dataclass(frozen=True)
class ReplayOptions:
    """The `replay` backend's options (--history, --speed, --loop)."""

    history: Path | None = None
    """The history file to serve (Parquet or CSV); required."""
    speed: float = 1.0
    """History seconds per real second."""
    loop: bool = True
    """Start over at the end."""


def _ns(timestamps: pd.Series) -> np.ndarray:
    """Validated UTC timestamps as int64 nanoseconds since the epoch."""
    return np.asarray(timestamps.to_numpy(dtype="datetime64[ns]").view(np.int64))


class ReplayBackend:
    """Serves a history frame as live telemetry, `speed` history seconds per wall second."""

    name = "replay"

    def __init__(
        self,
        history: pd.DataFrame,
        speed: float = 1.0,
        loop: bool = True,
        clock: Callable[[], float] = time.monotonic,
        *,
        validated: bool = False,
    ) -> None:
        """`validated=True`: the frame already passed history.validate (skips a second pass)."""
        try:
            rate = float(speed)
        except (TypeError, ValueError):
            rate = math.nan
        if not math.isfinite(rate) or rate <= 0:
            raise BackendError(f"replay speed must be a positive number, got {speed!r}")
        if len(history) == 0:
            raise BackendError("history has no rows")
        try:
            # validate sorts, types and de-duplicates; on 1.5M rows it is most of the start-up
            frame = history if validated else validate(history, source="replay history")
        except HistoryError as err:
            raise BackendError(str(err)) from err
        self.speed = rate
        self.loop = loop
        self._clock = clock
        self._prepare(frame)
        self._pending: list[XidEvent] = []
        self._done: tuple[int, int] = (0, -1)  # (lap, time rank) the last read reached
        self._start = clock()

    @classmethod
    def from_file(cls, path: str | Path, **kw: Any) -> ReplayBackend:
        """Replay a history file (Parquet or CSV) read with core.history.read."""
        try:
            frame = read_history(path)
        except HistoryError as err:
            raise BackendError(str(err)) from err
        return cls(frame, validated=True, **kw)

    def _prepare(self, frame: pd.DataFrame) -> None:
        """Flatten the frame into per-GPU blocks sorted by time, plus the XID event table."""
        ts = _ns(frame["timestamp"])
        codes, uuids = pd.factorize(frame["gpu_uuid"], sort=False)
        # Every distinct timestamp gets a rank; keys gpu * stride + rank ascend block by
        # block and are exact integers, so one searchsorted finds every GPU's latest row.
        times, rank = np.unique(ts, return_inverse=True)
        rank = rank.reshape(-1)
        per_uuid = frame.groupby(codes, sort=True).agg(
            hostname=("hostname", "first"),
            gpu_index=("gpu_index", "first"),
            model_name=("model_name", "first"),
            first_seen=("timestamp", "min"),
        )
        # GPU order: by host and slot; a replacement comes after the GPU it replaced.
        order = per_uuid.sort_values(["hostname", "gpu_index", "first_seen"], kind="stable").index.to_numpy()
        self._infos = [
            GpuInfo(
                index=int(per_uuid.at[c, "gpu_index"]),
                uuid=str(uuids[c]),
                model_name=str(per_uuid.at[c, "model_name"]),
                hostname=str(per_uuid.at[c, "hostname"]),
            )
            for c in order
        ]
        n_gpus = len(order)
        gpu_of_code = np.empty(n_gpus, dtype=np.int64)
        gpu_of_code[order] = np.arange(n_gpus)
        gpu = gpu_of_code[codes]
        self._stride = len(times) + 1
        key = gpu * self._stride + rank
        self._row = np.argsort(key, kind="stable")  # sorted position -> frame row
        self._key = key[self._row]
        self._gpu_ids = np.arange(n_gpus, dtype=np.int64)
        self._block_start = np.searchsorted(self._key, self._gpu_ids * self._stride)
        block_end = np.searchsorted(self._key, (self._gpu_ids + 1) * self._stride)

        self._t0 = int(times[0])
        self._rel = times - self._t0  # ns since the first timestamp, ascending
        span = int(self._rel[-1])
        sorted_rel = ts[self._row] - self._t0
        last_rel = sorted_rel[block_end - 1]
        # Sampling interval per GPU: the median gap between its rows (robust to a missed
        # sample); a GPU with a single row borrows the fleet's median gap.
        same_gpu = np.diff(self._key // self._stride) == 0
        gaps = np.diff(sorted_rel)[same_gpu]
        fleet_gap = float(np.median(gaps)) if len(gaps) else 0.0
        interval = np.full(n_gpus, fleet_gap)
        if len(gaps):
            med = pd.Series(gaps).groupby(self._key[1:][same_gpu] // self._stride).median()
            interval[med.index.to_numpy()] = med.to_numpy()
        ended = last_rel < span  # its rows stop before the history does: it failed
        self._lost_after = np.where(ended, last_rel + LOST_AFTER_INTERVALS * interval, np.inf)
        self._last_ts = last_rel + self._t0
        self._span = span
        # A lap lasts the span plus one sampling interval, so the last rows are served for
        # an interval before the first come back. One distinct timestamp: nothing to loop.
        self._cycle = span + fleet_gap if self.loop and fleet_gap > 0 else None

        # Values stay in the frame's own columns (float32 gauges, float64 counters): a
        # sorted float64 copy of 1.5M rows x 35 columns would double the memory.
        self._columns = [c for c in metric_columns(frame) if c in catalog.BY_NAME]
        self._arrays = [frame[c].to_numpy() for c in self._columns]

        # XID events: rows with a nonzero xid, ordered by (time rank, GPU), so the events
        # crossed between two reads are one contiguous slice.
        if "xid" in frame.columns:
            xid = frame["xid"].to_numpy(dtype=np.float64)
            hit = np.flatnonzero(np.nan_to_num(xid) != 0)
        else:
            xid = np.zeros(len(frame))
            hit = np.empty(0, dtype=np.int64)
        hit = hit[np.lexsort((gpu[hit], rank[hit]))]
        self._ev_rank = rank[hit]
        self._ev = [
            XidEvent(self._infos[g].uuid, int(code), t / 1e9)
            for g, code, t in zip(gpu[hit].tolist(), xid[hit].tolist(), ts[hit].tolist(), strict=True)
        ]

    def gpus(self) -> list[GpuInfo]:
        return list(self._infos)

    def _position(self) -> tuple[int, int]:
        """(lap, nanoseconds since the first timestamp) at the current clock."""
        elapsed_ns = max(0.0, self._clock() - self._start) * self.speed * 1e9
        if self._cycle is None:
            return 0, int(min(elapsed_ns, self._span))
        lap = int(elapsed_ns // self._cycle)
        return lap, max(0, int(elapsed_ns - lap * self._cycle))

    def history_time(self) -> pd.Timestamp:
        """The history time a read now serves (within the current lap)."""
        return pd.Timestamp(self._t0 + self._position()[1], unit="ns", tz="UTC")

    def data_time(self) -> float:
        """History time of a read now (epoch seconds): what the readings are stored under."""
        return float(self.history_time().timestamp())

    def probe_runner(self) -> ProbeRunner | None:
        """None: recorded GPUs cannot be probed (and this host's GPUs are not the ones replayed)."""
        return None

    def read(self) -> list[GpuReading]:
        lap, now = self._position()
        # Rank of the latest distinct timestamp at or before now (-1: nothing yet).
        k = int(np.searchsorted(self._rel, now, side="right")) - 1
        self._queue_xids(lap, k)
        pos = np.searchsorted(self._key, self._gpu_ids * self._stride + k, side="right") - 1
        seen = (k >= 0) & (pos >= self._block_start)
        lost = seen & (now > self._lost_after)
        rows = self._row[pos[seen & ~lost]]
        values = (
            np.column_stack([a[rows].astype(np.float64) for a in self._arrays]).tolist()
            if self._arrays
            else [[] for _ in rows]
        )
        cols = self._columns
        live = iter(values)
        out: list[GpuReading] = []
        for g in np.flatnonzero(seen).tolist():
            info = self._infos[g]
            if lost[g]:
                since = pd.Timestamp(int(self._last_ts[g]), unit="ns", tz="UTC").isoformat()
                out.append(GpuReading(info, {}, lost=True, error=f"GPU stopped reporting after {since}"))
            else:
                row = next(live)
                out.append(GpuReading(info, {c: v for c, v in zip(cols, row, strict=True) if v == v}))
        return out

    def _queue_xids(self, lap: int, k: int) -> None:
        """Queue the XID events of rows crossed since the previous read."""
        done_lap, done_k = self._done
        if (lap, k) <= (done_lap, done_k):
            return
        ranks = self._ev_rank
        hi = int(np.searchsorted(ranks, k, side="right"))
        lo = int(np.searchsorted(ranks, done_k, side="right"))
        if lap == done_lap:
            self._pending += self._ev[lo:hi]
        else:
            # The rest of the earlier lap, each lap skipped whole, then this lap so far.
            self._pending += self._ev[lo:] + self._ev * (lap - done_lap - 1) + self._ev[:hi]
        self._done = (lap, k)

    def drain_xid_events(self) -> list[XidEvent]:
        ev, self._pending = self._pending, []
        return ev

    def close(self) -> None:
        return None


def open_replay(options: ReplayOptions, common: CommonOptions) -> ReplayBackend:
    """Replay `options.history`; any trouble with the file is a BackendError."""
    if options.history is None:
        raise BackendError("the replay backend needs a history file (--history)")
    try:
        return ReplayBackend.from_file(options.history, speed=options.speed, loop=options.loop)
    except HistoryError as err:
        raise BackendError(str(err)) from err
