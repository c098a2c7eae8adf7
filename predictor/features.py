"""Features: from a history frame and cutoff times, one row per GPU and cutoff.

Only data at or before each cutoff is used. Everything is vectorised: rows are put in
(GPU, time) order once, every per-sample quantity becomes a running sum, and a window
(cutoff - w, cutoff] is the difference of two running sums found with one
`np.searchsorted` over a combined (GPU, time) key. So features for thousands of
cutoffs cost little more than for one, and irregular sampling needs no resampling.

Counters are made reset-proof first: a drop (the driver reloaded and a volatile
counter restarted at 0) counts as an increase of the new value, never a negative one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from core.history import HistoryError

HOUR = 3600
DAY = 86400
WINDOWS = {"1d": DAY, "7d": 7 * DAY, "30d": 30 * DAY}
STALE_S = DAY
"""A GPU whose last sample is older than this at the cutoff is not scored (it left)."""
_KEY_SHIFT = 40  # key = gpu code << 40 | seconds since t0: 2**40 s is 34,000 years
_T_MASK = (1 << _KEY_SHIFT) - 1

THERMAL_THROTTLE = 0x8 | 0x20 | 0x40  # hw slowdown, sw thermal, hw thermal (NVML reasons)
XID_FEATURES = (48, 63, 64, 79, 92, 94, 95)
"""XIDs counted one by one (the ECC, remap and off-bus codes of REFERENCE.md's table);
every other nonzero code counts in xid_other_7d."""


@dataclass(frozen=True)
class FeatureSpec:
    """One feature: its name, what it means (for reasons) and its unit for display."""

    name: str
    label: str
    unit: str = ""
    mode: str = "any"
    """The failure mode it speaks to: ecc, thermal, pcie or any."""


SPECS: tuple[FeatureSpec, ...] = (
    # ECC / HBM
    FeatureSpec("sbe_rate_1d", "SBE rate", "/day", "ecc"),
    FeatureSpec("sbe_rate_7d", "SBE rate (7 d)", "/day", "ecc"),
    FeatureSpec("sbe_rate_30d", "SBE rate (30 d)", "/day", "ecc"),
    FeatureSpec("sbe_growth", "SBE rate vs its 7-day average", "x", "ecc"),
    FeatureSpec("sbe_active_hours_7d", "hours with new SBEs in 7 days", "h", "ecc"),
    FeatureSpec("dbe_7d", "DBEs in 7 days", "", "ecc"),
    FeatureSpec("dbe_30d", "DBEs in 30 days", "", "ecc"),
    FeatureSpec("remapped_rows_correctable", "correctable remapped rows", "", "ecc"),
    FeatureSpec("remapped_rows_uncorrectable", "uncorrectable remapped rows", "", "ecc"),
    FeatureSpec("remaps_new_7d", "rows remapped in 7 days", "", "ecc"),
    FeatureSpec("row_remap_pending", "remap pending a reset", "", "ecc"),
    FeatureSpec("row_remap_failure", "row remap failure", "", "ecc"),
    FeatureSpec("retired_pages", "retired pages (SBE+DBE)", "", "ecc"),
    FeatureSpec("retired_pages_dbe", "retired pages (DBE)", "", "ecc"),
    FeatureSpec("retired_pages_dbe_new_7d", "DBE pages retired in 7 days", "", "ecc"),
    FeatureSpec("retired_pages_pending", "page retirement pending", "", "ecc"),
    # thermal
    FeatureSpec("temp_mean_1d", "core temperature (1 d mean)", "C", "thermal"),
    FeatureSpec("temp_vs_own_30d", "core temperature vs its own 30-day mean", "C", "thermal"),
    FeatureSpec("temp_vs_peers_1d", "core temperature vs same-model GPUs", "C", "thermal"),
    FeatureSpec("temp_vs_node_1d", "core temperature vs its node", "C", "thermal"),
    FeatureSpec(
        "temp_per_load_vs_own",
        "temperature beyond what its power explains, vs its own 30 days",
        "C",
        "thermal",
    ),
    FeatureSpec("temp_excess_6h", "temperature beyond its power (6 h), vs its own 30 days", "C", "thermal"),
    FeatureSpec("memtemp_mean_1d", "memory temperature (1 d mean)", "C", "thermal"),
    FeatureSpec("mem_minus_core_1d", "memory minus core temperature", "C", "thermal"),
    FeatureSpec("mem_minus_core_vs_own", "memory-core spread vs its own 30 days", "C", "thermal"),
    FeatureSpec("throttle_share_1d", "share of samples thermally throttled (1 d)", "", "thermal"),
    FeatureSpec("throttle_share_7d", "share of samples thermally throttled (7 d)", "", "thermal"),
    FeatureSpec("thermal_violation_share_1d", "share of time in thermal violation (1 d)", "", "thermal"),
    FeatureSpec("power_violation_share_1d", "share of time in power violation (1 d)", "", "any"),
    FeatureSpec("temp_trend_7d", "core temperature 1 d vs 7 d mean", "C", "thermal"),
    # PCIe
    FeatureSpec("replay_rate_1d", "PCIe replay rate", "/h", "pcie"),
    FeatureSpec("replay_rate_7d", "PCIe replay rate (7 d)", "/h", "pcie"),
    FeatureSpec("replay_growth", "PCIe replay rate vs its 7-day average", "x", "pcie"),
    FeatureSpec("replay_active_hours_1d", "hours with new PCIe replays in 1 day", "h", "pcie"),
    FeatureSpec("link_width_ratio", "PCIe link width / max", "", "pcie"),
    FeatureSpec("link_gen_ratio", "PCIe link generation / max", "", "pcie"),
    # XID by code and class
    *(FeatureSpec(f"xid_{c}_7d", f"XID {c} in 7 days", "", "any") for c in XID_FEATURES),
    FeatureSpec("xid_79_30d", "XID 79 (fell off the bus) in 30 days", "", "any"),
    FeatureSpec("xid_48_30d", "XID 48 (DBE) in 30 days", "", "ecc"),
    FeatureSpec("xid_other_7d", "other XIDs in 7 days", "", "any"),
    # power and use
    FeatureSpec("power_mean_1d", "power (1 d mean)", "W", "any"),
    FeatureSpec("power_vs_peers_1d", "power vs same-model GPUs at their load", "W", "any"),
    FeatureSpec("util_mean_1d", "utilisation (1 d mean)", "%", "any"),
    # data coverage
    FeatureSpec("coverage_1d", "share of expected samples present (1 d)", "", "any"),
    FeatureSpec("age_days", "days since the GPU first reported", "d", "any"),
)
FEATURES: tuple[str, ...] = tuple(s.name for s in SPECS)
BY_NAME = {s.name: s for s in SPECS}

COUNTERS = (
    "ecc_sbe_volatile", "ecc_sbe_aggregate", "ecc_dbe_volatile", "ecc_dbe_aggregate",
    "pcie_replay_count", "thermal_violation_us", "power_violation_us",
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "retired_pages_dbe",
)  # fmt: skip
LATEST = (
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending",
    "row_remap_failure", "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
    "pcie_link_width", "pcie_link_width_max", "pcie_link_gen", "pcie_link_gen_max",
)  # fmt: skip
USED_COLUMNS = tuple(
    sorted(
        {*COUNTERS, *LATEST} | {"gpu_temp_c", "memory_temp_c", "power_w", "gpu_util_pct", "clocks_event_reasons", "xid"}
    )
)
"""History columns the features read; a frame may lack any of them (the features are NaN)."""


class _Frame:
    """A history frame seen in (GPU, time) order, with window queries over it.

    The frame itself is not reordered: one permutation (`order`) is kept, and a column is
    put in (GPU, time) order as float64 only when a feature needs all of its rows
    (`col`); values at a few rows (the latest per GPU, short windows) are picked from
    the frame's own array (`raw`) through the permutation.
    """

    def __init__(self, frame: pd.DataFrame) -> None:
        if len(frame) == 0:
            raise HistoryError("the history has no rows: nothing to compute features from")
        uuid = frame["gpu_uuid"]
        cat = uuid.astype("category") if not isinstance(uuid.dtype, pd.CategoricalDtype) else uuid
        codes = cat.cat.codes.to_numpy()  # int8/int16 for a fleet: numpy sorts these by radix
        ts = frame["timestamp"]
        ts_ns = (ts if ts.dt.unit == "ns" else ts.dt.as_unit("ns")).array.asi8  # as_unit copies even to ns
        in_time_order = bool(np.all(ts_ns[1:] >= ts_ns[:-1]))
        self.t0_ns = int(ts_ns[0]) if in_time_order else int(ts_ns.min())
        # Histories are kept in time order (history.validate): a stable sort by GPU alone
        # then gives (GPU, time) order, several times faster than a two-key sort.
        if in_time_order:
            order = np.argsort(codes, kind="stable")
        else:
            order = np.lexsort(((ts_ns - self.t0_ns) // 1_000_000_000, codes))
        self.n = len(order)
        head = order[:256]
        self.identity = bool(np.array_equal(head, np.arange(len(head))) and np.all(order[1:] > order[:-1]))
        """The frame is already in (GPU, time) order: columns need no reordering."""
        self.order = order
        n_rows = np.bincount(codes, minlength=len(cat.cat.categories))
        present = np.flatnonzero(n_rows)
        self.gpu_codes = present.astype(np.int64)
        rows_per_gpu = n_rows[present]
        # The (GPU, time) key of each row in order: seconds, then the GPU's code above them
        # (in order the codes are runs, so they come from a repeat instead of a gather).
        key = ts_ns.copy() if self.identity else np.take(ts_ns, order)
        key -= self.t0_ns
        key //= 1_000_000_000
        key |= np.repeat(present.astype(np.int64) << _KEY_SHIFT, rows_per_gpu)
        self.key = key
        self.gpu_start = np.zeros(len(present), dtype=np.int64)
        np.cumsum(rows_per_gpu[:-1], out=self.gpu_start[1:])
        self.gpu_end = self.gpu_start + rows_per_gpu
        self.new_gpu = np.zeros(self.n, dtype=bool)
        self.new_gpu[self.gpu_start] = True
        self.first_t = self.t_at(self.gpu_start)
        self.last_t = self.t_at(self.gpu_end - 1)
        self.frame = frame
        self.columns = set(frame.columns)
        self.uuids = np.asarray(cat.cat.categories, dtype=object)
        self.frame_codes = codes
        self.ts_ns = ts_ns
        """Row times in the frame's own order (ns since the epoch)."""
        """GPU codes in the frame's own row order."""
        self._raw: dict[str, np.ndarray] = {}
        self._nan: dict[str, tuple[bool, bool]] = {}

    def t_at(self, rows: np.ndarray) -> np.ndarray:
        """Seconds since t0 of rows in (GPU, time) order."""
        return self.key[rows] & _T_MASK

    def code_at(self, rows: np.ndarray) -> np.ndarray:
        """GPU code of rows in (GPU, time) order."""
        return self.key[rows] >> _KEY_SHIFT

    # -- columns ---------------------------------------------------------------------------

    def raw(self, name: str) -> np.ndarray | None:
        """A column in the frame's own row order and dtype (floats: no copy), or None if absent."""
        if name not in self.columns:
            return None
        if name not in self._raw:
            s = self.frame[name]
            floating = s.dtype in (np.float32, np.float64)
            self._raw[name] = s.to_numpy() if floating else s.to_numpy(dtype=np.float64, na_value=np.nan)
        return self._raw[name]

    def nan_state(self, name: str) -> tuple[bool, bool]:
        """(any NaN, all NaN) of a column the frame has."""
        if name not in self._nan:
            x = self.raw(name)
            assert x is not None
            if len(x) and np.isfinite(np.sum(x)):  # a finite sum: no NaN (one pass, nothing allocated)
                self._nan[name] = (False, False)
            else:
                nan = np.isnan(x)
                some = bool(nan.any())
                self._nan[name] = (some, some and bool(nan.all()))
        return self._nan[name]

    def usable(self, name: str) -> bool:
        """The frame has the column and it is not all NaN."""
        return name in self.columns and not self.nan_state(name)[1]

    def col(self, name: str, native: bool = False) -> np.ndarray | None:
        """A column in (GPU, time) order as float64, or None when the frame lacks it.

        `native`: in the frame's own dtype (float32 gauges: half the memory; the window
        sums add them up in float64 all the same).
        """
        x = self.raw(name)
        if x is None:
            return None
        if self.identity:
            return x.copy() if native else x.astype(np.float64)  # a copy: callers may write to it
        ordered = np.take(x, self.order)
        return ordered if native else ordered.astype(np.float64, copy=False)

    def at_rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Values of a column at rows given in (GPU, time) order, as float64."""
        return self.at_frame_rows(name, self.frame_rows(rows))

    def frame_rows(self, rows: np.ndarray) -> np.ndarray:
        """The frame's own row numbers of rows given in (GPU, time) order."""
        return rows if self.identity else np.take(self.order, rows)

    def at_frame_rows(self, name: str, frame_rows: np.ndarray) -> np.ndarray:
        """Values of a column at rows of the frame's own order, as float64."""
        x = self.raw(name)
        assert x is not None
        return np.take(x, frame_rows).astype(np.float64, copy=False)

    def sorted_positions(self, file_rows: np.ndarray) -> np.ndarray:
        """Positions in (GPU, time) order of a few rows given in the frame's order."""
        if self.identity:
            return file_rows
        code = self.frame_codes[file_rows].astype(np.int64)
        t = (self.ts_ns[file_rows] - self.t0_ns) // 1_000_000_000
        return np.searchsorted(self.key, (code << _KEY_SHIFT) | t, side="left")

    def ident(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Identity column values (hostname, model_name, gpu_index) at rows in (GPU, time) order."""
        s = self.frame[name]
        file_rows = rows if self.identity else np.take(self.order, rows)
        if name == "gpu_index":
            return s.to_numpy()[file_rows]
        cat = s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")
        names = np.asarray(cat.cat.categories.astype(str), dtype=object)
        return names[cat.cat.codes.to_numpy()[file_rows]]

    # -- per-row helpers -------------------------------------------------------------------

    def valid_rows(self, x: np.ndarray) -> np.ndarray:
        """Positions of the non-NaN values of a column (sorted)."""
        return np.flatnonzero(~np.isnan(x))

    def per_gpu_any(self, flag: np.ndarray) -> np.ndarray:
        """Per row: whether any row of the same GPU has the flag set."""
        per_gpu = np.logical_or.reduceat(flag, self.gpu_start)
        return np.repeat(per_gpu, self.gpu_end - self.gpu_start)

    def increments(self, x: np.ndarray, overwrite: bool = False) -> np.ndarray:
        """Per-sample increase of a counter; a drop is a reset, and counts the new value.

        NaN samples are skipped: the increase is taken between a GPU's consecutive
        readings, so a missing sample neither loses nor invents counts. `overwrite`: x
        (float64) is not needed after, so the increases may be written over it.
        """
        if not np.isnan(x).any():  # the usual case: consecutive rows, no index arrays
            if overwrite and x.dtype == np.float64:
                return self._increments_in_place(x)
            out = np.empty(self.n)
            d = np.subtract(x[1:], x[:-1], out=out[1:])
            drop = np.flatnonzero(d < 0)  # few: resets, and the first row of each GPU (zeroed below)
            d[drop] = x[drop + 1]  # reset: the counter restarted at 0 and reached x
            out[self.gpu_start] = 0.0
            return out
        vi = self.valid_rows(x)
        out = np.zeros(self.n)
        if len(vi) < 2:
            return out
        v = x[vi]
        d = v[1:] - v[:-1]
        d = np.where(d < 0, v[1:], d)  # reset: the counter restarted at 0 and reached v
        code = self.code_at(vi)
        same = code[1:] == code[:-1]
        out[vi[1:]] = np.where(same, d, 0.0)
        return out

    def _increments_in_place(self, x: np.ndarray, block: int = 1 << 20) -> np.ndarray:
        """increments() of a column without NaN, written over it block by block from the end
        (a block needs the values just before it, which are still unchanged)."""
        for hi in range(self.n, 1, -block):
            lo = max(hi - block, 1)
            cur = x[lo:hi].copy()
            d = np.subtract(cur, x[lo - 1 : hi - 1], out=x[lo:hi])
            drop = np.flatnonzero(d < 0)
            d[drop] = cur[drop]  # reset: the counter restarted at 0 and reached x
        x[self.gpu_start] = 0.0
        x[0] = 0.0
        return x

    def running(self, per_sample: np.ndarray) -> _Sums:
        """A per-sample quantity, ready for window sums (running sums made when needed)."""
        return _Sums(per_sample)


class _Sums:
    """A per-sample quantity (in (GPU, time) order) whose window sums are asked for.

    With many cutoffs a window is the difference of two running sums (built once); with a
    single cutoff each GPU's window is one contiguous run of rows, summed directly by
    `np.add.reduceat`, which reads the column once instead of writing a running sum.
    """

    def __init__(self, x: np.ndarray) -> None:
        self.x = x
        self._cum: np.ndarray | None = None
        self.memo: dict[int, np.ndarray] = {}
        """Window sums already asked for, by window (a _Sums serves one set of queries)."""

    def cum(self) -> np.ndarray:
        if self._cum is None:
            self._cum = np.empty(len(self.x) + 1)
            self._cum[0] = 0.0
            np.cumsum(self.x, out=self._cum[1:], dtype=np.float64)
        return self._cum


def _segment_sums(x: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Sums of x[start[i]:end[i]] for disjoint, ordered runs (one per GPU)."""
    out = np.zeros(len(start))
    nonempty = start < end
    if not nonempty.any():
        return out
    idx = np.empty(2 * int(nonempty.sum()), dtype=np.intp)
    idx[0::2], idx[1::2] = start[nonempty], end[nonempty]
    if idx[-1] == len(x):  # reduceat's last run already ends at the end of x
        idx = idx[:-1]
    out[nonempty] = np.add.reduceat(x, idx, dtype=np.float64)[0::2]
    return out


class _Window:
    """A single cutoff's window: its rows (one run per GPU, in order) gathered into one block.

    Summing a short window over the gathered rows touches only them, not the whole
    column; the sums are the same additions in the same order as `_segment_sums`.
    """

    def __init__(self, f: _Frame, start: np.ndarray, end: np.ndarray) -> None:
        self.f = f
        length = end - start
        self.nonempty = length > 0
        self.length = length[self.nonempty]
        offsets = np.zeros(len(self.length), dtype=np.int64)
        np.cumsum(self.length[:-1], out=offsets[1:])
        self.offsets = offsets
        total = int(self.length.sum())
        # rows = start of each run + position within it
        self.rows = np.arange(total, dtype=np.int64)
        self.rows += np.repeat(start[self.nonempty] - offsets, self.length)
        self.n = len(start)
        self.frame_rows = f.frame_rows(self.rows)
        self._prev: np.ndarray | None = None

    def values(self, name: str) -> np.ndarray:
        """A column's values at the window's rows (float64)."""
        return self.f.at_frame_rows(name, self.frame_rows)

    def previous_values(self, name: str, values: np.ndarray) -> np.ndarray:
        """A column's values at the row before each of the window's rows (any GPU's: see
        new_gpu), given its `values` at them: within a run the previous row is the run's
        own, so only the row before each run is read."""
        if self._prev is None:
            self._prev = self.f.frame_rows(np.maximum(self.rows[self.offsets] - 1, 0))
        prev = np.empty_like(values)
        prev[1:] = values[:-1]
        prev[self.offsets] = self.f.at_frame_rows(name, self._prev)
        return prev

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per run, the sum of `values` (already taken at self.rows)."""
        out = np.zeros(self.n)
        if len(values):
            out[self.nonempty] = np.add.reduceat(values, self.offsets, dtype=np.float64)
        return out


class _Queries:
    """(GPU, cutoff) pairs and the positions of their windows in a _Frame."""

    def __init__(self, f: _Frame, gpu_pos: np.ndarray, cutoff_s: np.ndarray) -> None:
        self.f = f
        self.gpu_pos = gpu_pos  # index into f.gpu_codes
        self.code = f.gpu_codes[gpu_pos]
        self.c = cutoff_s
        self._pos: dict[int, np.ndarray] = {}
        self._windows: dict[int, _Window | None] = {}
        self.single = len(cutoff_s) > 0 and bool(np.all(cutoff_s == cutoff_s[0]))
        self.end = self.pos(0)
        self.end_row = np.maximum(self.end - 1, 0)
        """The GPU's last row at or before the cutoff (queries are only made for GPUs that have one)."""

    def pos(self, back_s: int) -> np.ndarray:
        """Insertion point after the GPU's last row at or before cutoff - back_s."""
        if back_s not in self._pos:
            t = self.c - back_s
            p = np.searchsorted(self.f.key, (self.code << _KEY_SHIFT) | np.maximum(t, 0), side="right")
            # t < 0: the window begins before all data; the GPU's first row is the bound.
            first = self.f.gpu_start[self.gpu_pos]
            self._pos[back_s] = np.where(t < 0, first, p)
        return self._pos[back_s]

    def window(self, w: int) -> _Window | None:
        """The rows of window w gathered, for a single cutoff whose window is short (else None)."""
        if w not in self._windows:
            start, end = self.pos(w), self.end
            short = self.single and int((end - start).sum()) < self.f.n // 2
            self._windows[w] = _Window(self.f, start, end) if short else None
        return self._windows[w]

    def window_sum(self, sums: _Sums, w: int) -> np.ndarray:
        """Sum of a quantity over each query's window (cutoff - w, cutoff]."""
        if w not in sums.memo:
            sums.memo[w] = self._window_sum(sums, w)
        return sums.memo[w]

    def _window_sum(self, sums: _Sums, w: int) -> np.ndarray:
        if self.single:
            win = self.window(w)
            if win is not None:
                return win.sums(sums.x[win.rows])
            return _segment_sums(sums.x, self.pos(w), self.end)
        cum = sums.cum()
        return cum[self.end] - cum[self.pos(w)]

    def window_count(self, rows: np.ndarray | None, w: int) -> np.ndarray:
        """How many of the given rows (sorted positions; None: every row) lie in each window."""
        if rows is None:
            return (self.end - self.pos(w)).astype(float)
        return (np.searchsorted(rows, self.end) - np.searchsorted(rows, self.pos(w))).astype(float)

    def last_seen(self) -> np.ndarray:
        """Seconds since t0 of the GPU's last row at or before the cutoff (NaN if none)."""
        i = np.maximum(self.end - 1, 0)
        ok = (self.end >= 1) & (self.f.code_at(i) == self.code)
        return np.where(ok, self.f.t_at(i), np.nan)

    def latest_valid(self, x: np.ndarray) -> np.ndarray:
        """The GPU's last non-NaN value at or before the cutoff (NaN if it has none)."""
        vi = self.f.valid_rows(x)
        if len(vi) == 0:
            return np.full(len(self.c), np.nan)
        k = np.searchsorted(vi, self.end, side="left") - 1
        row = vi[np.maximum(k, 0)]
        ok = (k >= 0) & (self.f.code_at(row) == self.code)
        return np.where(ok, x[row], np.nan)

    def latest_valid_col(self, name: str) -> np.ndarray:
        """latest_valid of a frame column, reading only the queries' last rows when those hold values."""
        last = self.f.at_rows(name, self.end_row)
        if not np.isnan(last).any():
            return last  # every last row holds a value: it is the latest
        if self.f.nan_state(name)[1]:
            return last  # all NaN
        x = self.f.col(name)
        assert x is not None
        return self.latest_valid(x)

    def covered_s(self, w: int) -> np.ndarray:
        """Seconds of the window the GPU was around for (a new GPU has less than w)."""
        first = self.f.first_t[self.gpu_pos]
        return np.clip(self.c - np.maximum(first, self.c - w), HOUR, w).astype(float)


class _Counter:
    """A counter's per-sample increases, asked for as window sums.

    Either all of them (`inc`, in (GPU, time) order), or, for a single cutoff whose
    windows are all short and a column without NaN, only those of the windows' rows:
    each row's increase needs just that row and the one before it, so the column is
    never put in order whole. The values are the same as `_Frame.increments` gives.
    """

    def __init__(self, q: _Queries, inc: np.ndarray | None = None, name: str | None = None) -> None:
        self.q = q
        self.inc = inc
        self.name = name
        self._run: _Sums | None = None
        self._rising: np.ndarray | None = None
        self._win: dict[int, np.ndarray] = {}

    def _window_increments(self, w: int) -> tuple[_Window, np.ndarray]:
        win = self.q.window(w)
        assert win is not None and self.name is not None
        if w not in self._win:
            x = win.values(self.name)
            d = x - win.previous_values(self.name, x)
            drop = d < 0
            d[drop] = x[drop]  # reset: the counter restarted at 0 and reached x
            d[self.q.f.new_gpu[win.rows]] = 0.0
            self._win[w] = d
        return win, self._win[w]

    def sum(self, w: int) -> np.ndarray:
        """Increase over each query's window."""
        if self.inc is None:
            win, d = self._window_increments(w)
            return win.sums(d)
        if self._run is None:
            self._run = _Sums(self.inc)
        return self.q.window_sum(self._run, w)

    def rising(self, w: int) -> np.ndarray:
        """Samples in each query's window where the counter went up."""
        if self.inc is None:
            win, d = self._window_increments(w)
            return win.sums((d > 0).astype(float))
        if self._rising is None:
            self._rising = np.flatnonzero(self.inc > 0)
        return self.q.window_count(self._rising, w)


def build_features(
    frame: pd.DataFrame,
    cutoffs: pd.Timestamp | Sequence[pd.Timestamp] | pd.DatetimeIndex,
    stale_s: int = STALE_S,
) -> pd.DataFrame:
    """Features of every GPU still reporting at each cutoff, using only data up to it.

    Returns one row per (GPU, cutoff) with the identity columns `gpu_uuid, hostname,
    gpu_index, model_name, cutoff, last_seen` followed by FEATURES (NaN where the
    history lacks the columns a feature needs).
    """
    f = _Frame(frame)
    cuts = pd.DatetimeIndex([cutoffs] if isinstance(cutoffs, pd.Timestamp) else cutoffs)
    if cuts.tz is None:
        cuts = cuts.tz_localize("UTC")
    cuts = cuts.tz_convert("UTC").as_unit("ns")  # pandas may hand out us or s resolution
    cut_s = (cuts.asi8 - f.t0_ns) // 1_000_000_000
    # Pairs (GPU, cutoff) where the GPU had reported by the cutoff and not gone stale.
    g_grid, c_grid = np.meshgrid(np.arange(len(f.gpu_codes)), np.arange(len(cuts)), indexing="ij")
    g_idx, c_idx = g_grid.ravel(), c_grid.ravel()
    c = cut_s[c_idx]
    q = _Queries(f, g_idx, c)
    last_seen = q.last_seen()
    keep = ~np.isnan(last_seen) & (c - last_seen <= stale_s)
    if not keep.any():
        first = pd.Timestamp(f.t0_ns, tz="UTC")
        raise HistoryError(
            f"no GPU has samples within {stale_s / 3600:g} h before the cutoff(s) "
            f"{cuts.min().isoformat()}..{cuts.max().isoformat()} (data begins {first.isoformat()})"
        )
    q = _Queries(f, g_idx[keep], c[keep])
    out = _compute(f, q)
    ident = pd.DataFrame(
        {
            "gpu_uuid": f.uuids[f.gpu_codes[q.gpu_pos]],
            "hostname": f.ident("hostname", q.end_row),
            "gpu_index": f.ident("gpu_index", q.end_row),
            "model_name": f.ident("model_name", q.end_row),
            "cutoff": pd.DatetimeIndex(cuts.asi8[c_idx[keep]], tz="UTC"),
            "last_seen": pd.to_datetime(last_seen[keep] * 1e9 + f.t0_ns, utc=True),
        }
    )
    feats = pd.DataFrame(out, columns=list(FEATURES))
    _peer_features(ident, feats)
    return pd.concat([ident, feats], axis=1)


def _compute(f: _Frame, q: _Queries) -> dict[str, np.ndarray]:
    """The features of each query. Big per-row arrays live only while their features are made."""
    out: dict[str, np.ndarray] = {}
    n = len(q.c)
    nan = np.full(n, np.nan)
    days = {k: q.covered_s(w) / DAY for k, w in WINDOWS.items()}

    has_data: dict[str, np.ndarray | None] = {}

    def counter_increase(*names: str, windows: tuple[int, ...]) -> _Counter | None:
        """Increments of a counter, per GPU from the first of `names` that GPU reports.

        Aggregate ECC counters never reset, so they are preferred; a GPU that reports only
        the volatile one uses that. Which GPUs had none at all is kept in `has_data`, so
        their features become NaN (unknown) rather than 0 (healthy); None there: all had.
        `windows`: the windows its sums will be asked for.
        """
        chosen: np.ndarray | None = None
        covered: np.ndarray | None = None
        for name in names:
            if not f.usable(name):
                continue  # absent or all NaN: no GPU reports it
            if covered is None and not f.nan_state(name)[0]:
                # Every row has a value, so every GPU uses this one and no later name counts.
                has_data[names[0]] = None
                if all(q.window(w) is not None for w in windows):
                    return _Counter(q, name=name)
                x = f.col(name)
                assert x is not None
                return _Counter(q, inc=f.increments(x, overwrite=True))
            x = f.col(name)
            assert x is not None
            gpu_has = f.per_gpu_any(~np.isnan(x))
            use = gpu_has if covered is None else gpu_has & ~covered
            if use.any():
                inc = f.increments(x)
                chosen = np.where(use, inc, chosen if chosen is not None else 0.0)
                covered = use if covered is None else covered | use
        if chosen is None:
            return None
        has_data[names[0]] = covered
        return _Counter(q, inc=chosen)

    def unknown_where_missing(name: str, *feats: str) -> None:
        if name not in has_data:
            return
        covered = has_data[name]
        if covered is None:
            return
        missing = ~covered[q.end_row]
        for feat in feats:
            if feat in out:
                out[feat] = np.where(missing, np.nan, out[feat])

    # ECC: SBE rate from the aggregate counter where present (it never resets).
    sbe = counter_increase("ecc_sbe_aggregate", "ecc_sbe_volatile", windows=tuple(WINDOWS.values()))
    if sbe is not None:
        for k, w in WINDOWS.items():
            out[f"sbe_rate_{k}"] = sbe.sum(w) / days[k]
        out["sbe_growth"] = (out["sbe_rate_1d"] + 1.0) / (out["sbe_rate_7d"] + 1.0)
        out["sbe_active_hours_7d"] = sbe.rising(WINDOWS["7d"])
        del sbe
    dbe = counter_increase("ecc_dbe_aggregate", "ecc_dbe_volatile", windows=(WINDOWS["7d"], WINDOWS["30d"]))
    if dbe is not None:
        out["dbe_7d"] = dbe.sum(WINDOWS["7d"])
        out["dbe_30d"] = dbe.sum(WINDOWS["30d"])
        del dbe
    remaps = [
        counter_increase(c, windows=(WINDOWS["7d"],))
        for c in ("remapped_rows_correctable", "remapped_rows_uncorrectable")
    ]
    present = [r.sum(WINDOWS["7d"]) for r in remaps if r is not None]
    if present:
        out["remaps_new_7d"] = np.sum(present, axis=0)
    del remaps
    latest = {name: q.latest_valid_col(name) for name in LATEST if name in f.columns}
    for name in ("remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending",
                 "row_remap_failure", "retired_pages_dbe", "retired_pages_pending"):  # fmt: skip
        if name in latest:
            out[name] = latest[name]
    if "retired_pages_sbe" in latest or "retired_pages_dbe" in latest:
        r_sbe, r_dbe = latest.get("retired_pages_sbe", nan), latest.get("retired_pages_dbe", nan)
        out["retired_pages"] = np.where(np.isnan(r_sbe) & np.isnan(r_dbe), np.nan, np.nansum([r_sbe, r_dbe], axis=0))
    if f.usable("retired_pages_dbe"):
        rdbe = f.col("retired_pages_dbe")
        assert rdbe is not None
        out["retired_pages_dbe_new_7d"] = q.window_sum(f.running(f.increments(rdbe)), WINDOWS["7d"])
        del rdbe

    # Thermal: window means from sums of values and of "present" flags. All windows of a
    # column are taken in one call, so its helper arrays die right after (7 M rows each).
    def window_means(
        x: np.ndarray | _Sums | None, *ws: int, name: str | None = None, owned: bool = False
    ) -> list[np.ndarray]:
        """Means of a column over windows, NaN samples left out.

        `x`: the column in (GPU, time) order, or its _Sums if it has no NaN; or None and
        `name`: a frame column, put in order whole only if a window needs most of its rows.
        A short window (single cutoff) takes just its rows. `owned`: x may be overwritten.
        """
        if x is None and (name is None or name not in f.columns):
            return [nan] * len(ws)
        full: tuple[_Sums, np.ndarray | None] | None = None  # for long windows: sums, rows without a value
        means = []
        for w in ws:
            win = None if isinstance(x, _Sums) else q.window(w)
            if isinstance(x, _Sums):
                s, k = q.window_sum(x, w), q.window_count(None, w)
            elif win is not None:
                v = win.values(name) if x is None else x[win.rows]  # type: ignore[arg-type]
                miss = np.isnan(v)
                if miss.any():
                    s, k = win.sums(np.where(miss, 0.0, v)), win.sums((~miss).astype(float))
                else:
                    s, k = win.sums(v), q.window_count(None, w)
            else:
                if full is None:
                    if x is None:
                        x, owned = f.col(name, native=True), True  # type: ignore[arg-type]
                    assert x is not None
                    missing = np.isnan(x)
                    if not missing.any():
                        full = (f.running(x), None)
                    else:  # few rows lack a value, as a rule: count those and subtract
                        gaps = np.flatnonzero(missing)
                        if owned:
                            x[gaps] = 0.0
                        full = (f.running(x if owned else np.where(missing, 0.0, x)), gaps)
                    del missing
                s = q.window_sum(full[0], w)
                k = q.window_count(None, w) - (0.0 if full[1] is None else q.window_count(full[1], w))
            with np.errstate(invalid="ignore", divide="ignore"):
                means.append(np.where(k > 0, s / k, np.nan))
        return means

    temp, power = f.col("gpu_temp_c", native=True), f.col("power_w", native=True)
    # Without NaN, a column's window sums are shared by the features below (kept in its _Sums).
    run_t = None if temp is None or f.nan_state("gpu_temp_c")[0] else f.running(temp)
    run_p = None if power is None or f.nan_state("power_w")[0] else f.running(power)
    t1, t7, t30 = window_means(run_t or temp, WINDOWS["1d"], WINDOWS["7d"], WINDOWS["30d"])
    out["temp_mean_1d"] = t1
    out["temp_vs_own_30d"] = t1 - t30
    out["temp_trend_7d"] = t1 - t7
    # Temperature the GPU's power does not explain: steady state is inlet + slot + R*P, so
    # temp - R*P is constant for healthy cooling whatever the load. R is fitted per model
    # over the 30 days before each cutoff; the excess is compared with the GPU's own 30 days.
    if temp is not None and power is not None:
        slope = _thermal_slope(f, q, temp, power, run_t, run_p)
        ws = (WINDOWS["30d"], WINDOWS["1d"], 6 * HOUR)
        if run_t is None or run_p is None:
            both = ~np.isnan(temp) & ~np.isnan(power)
            t_30, t_1, t_6 = window_means(np.where(both, temp, np.nan), *ws)
            p_30, p_1, p_6 = window_means(np.where(both, power, np.nan), *ws)
        else:
            t_30, t_1, t_6 = window_means(run_t, *ws)
            p_30, p_1, p_6 = window_means(run_p, *ws)
        own = t_30 - slope * p_30
        out["temp_per_load_vs_own"] = t_1 - slope * p_1 - own
        out["temp_excess_6h"] = t_6 - slope * p_6 - own
    del power, run_t, run_p
    mem = f.col("memory_temp_c", native=True)
    (out["memtemp_mean_1d"],) = window_means(mem, WINDOWS["1d"])
    if temp is not None and mem is not None:
        spread = np.subtract(mem, temp, dtype=np.float64)
        s1, s30 = window_means(spread, WINDOWS["1d"], WINDOWS["30d"], owned=True)
        del spread
        out["mem_minus_core_1d"] = s1
        out["mem_minus_core_vs_own"] = s1 - s30
    del temp, mem
    if "clocks_event_reasons" in f.columns:
        full: tuple[np.ndarray, np.ndarray] | None = None  # throttled rows, rows without a value
        for k in ("1d", "7d"):
            w = WINDOWS[k]
            win = q.window(w)
            if win is not None:  # a short window: only its rows
                r = win.values("clocks_event_reasons")
                valid = ~np.isnan(r)
                thr = ((np.nan_to_num(r).astype(np.int64) & THERMAL_THROTTLE) > 0) & valid
                hits, cnt = win.sums(thr.astype(float)), win.sums(valid.astype(float))
            else:
                if full is None:
                    col = f.col("clocks_event_reasons")
                    assert col is not None
                    valid = ~np.isnan(col)
                    thr = ((np.nan_to_num(col).astype(np.int64) & THERMAL_THROTTLE) > 0) & valid
                    full = (np.flatnonzero(thr), np.flatnonzero(~valid))
                hits, cnt = q.window_count(full[0], w), q.window_count(None, w) - q.window_count(full[1], w)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f"throttle_share_{k}"] = np.where(cnt > 0, hits / cnt, np.nan)
        del full
    for name, feat in (("thermal_violation_us", "thermal_violation_share_1d"),
                       ("power_violation_us", "power_violation_share_1d")):  # fmt: skip
        viol = counter_increase(name, windows=(DAY,))
        if viol is not None:
            out[feat] = viol.sum(DAY) / (days["1d"] * DAY * 1e6)
        del viol

    # PCIe
    rep = counter_increase("pcie_replay_count", windows=(DAY, WINDOWS["7d"]))
    if rep is not None:
        out["replay_rate_1d"] = rep.sum(DAY) / (days["1d"] * 24)
        out["replay_rate_7d"] = rep.sum(WINDOWS["7d"]) / (days["7d"] * 24)
        out["replay_growth"] = (out["replay_rate_1d"] + 1.0) / (out["replay_rate_7d"] + 1.0)
        out["replay_active_hours_1d"] = rep.rising(DAY)
        del rep
    with np.errstate(invalid="ignore", divide="ignore"):
        if "pcie_link_width" in latest and "pcie_link_width_max" in latest:
            out["link_width_ratio"] = latest["pcie_link_width"] / latest["pcie_link_width_max"]
        if "pcie_link_gen" in latest and "pcie_link_gen_max" in latest:
            out["link_gen_ratio"] = latest["pcie_link_gen"] / latest["pcie_link_gen_max"]

    # XID counts: the history's xid is the last code within each interval. Codes are
    # rare, so each is counted from the positions of its rows.
    if "xid" in f.columns:
        raw = f.raw("xid")
        assert raw is not None
        nz_file = np.flatnonzero((raw >= 1) | (raw <= -1))  # rows whose code (as an integer) is not 0
        nz = f.sorted_positions(nz_file)
        by_pos = np.argsort(nz, kind="stable")
        nz = nz[by_pos]
        codes = np.nan_to_num(raw[nz_file[by_pos]].astype(np.float64)).astype(np.int64)
        for code in XID_FEATURES:
            rows = nz[codes == code]
            out[f"xid_{code}_7d"] = q.window_count(rows, WINDOWS["7d"])
            if code in (48, 79):
                out[f"xid_{code}_30d"] = q.window_count(rows, WINDOWS["30d"])
        out["xid_other_7d"] = q.window_count(nz[~np.isin(codes, XID_FEATURES)], WINDOWS["7d"])

    unknown_where_missing("ecc_sbe_aggregate", "sbe_rate_1d", "sbe_rate_7d", "sbe_rate_30d", "sbe_growth",
                          "sbe_active_hours_7d")  # fmt: skip
    unknown_where_missing("ecc_dbe_aggregate", "dbe_7d", "dbe_30d")
    unknown_where_missing("remapped_rows_correctable", "remaps_new_7d")
    unknown_where_missing("thermal_violation_us", "thermal_violation_share_1d")
    unknown_where_missing("power_violation_us", "power_violation_share_1d")
    unknown_where_missing("pcie_replay_count", "replay_rate_1d", "replay_rate_7d", "replay_growth",
                          "replay_active_hours_1d")  # fmt: skip
    (out["power_mean_1d"],) = window_means(None, DAY, name="power_w")
    (out["util_mean_1d"],) = window_means(None, DAY, name="gpu_util_pct")
    # Coverage against the GPU's own mean sampling interval over the week before (no look-ahead).
    n7 = q.window_count(None, WINDOWS["7d"])
    with np.errstate(invalid="ignore", divide="ignore"):
        interval_s = q.covered_s(WINDOWS["7d"]) / np.maximum(n7 - 1, 1)
        expected = q.covered_s(DAY) / interval_s
        out["coverage_1d"] = np.where(n7 > 1, np.minimum(q.window_count(None, DAY) / expected, 1.0), np.nan)
    out["age_days"] = (q.c - f.first_t[q.gpu_pos]) / DAY
    return {k: out.get(k, nan) for k in FEATURES}


def _thermal_slope(
    f: _Frame, q: _Queries, temp: np.ndarray, power: np.ndarray, run_t: _Sums | None, run_p: _Sums | None
) -> np.ndarray:
    """Per query, degrees per watt of its GPU model, fitted on the 30 days before its cutoff.

    A within-GPU least-squares slope (each GPU's own inlet and slot offset removed),
    pooled over the model's GPUs at the same cutoff, from running sums: only data up
    to the cutoff, and the same value whether one cutoff or thousands are asked for.
    `run_t`, `run_p`: the columns' _Sums when they have no NaN (None: they have).
    """
    w = WINDOWS["30d"]
    if run_t is None or run_p is None:
        both = ~np.isnan(temp) & ~np.isnan(power)
        t, p = np.where(both, temp, 0.0), np.where(both, power, 0.0)
        n = q.window_count(None, w) - q.window_count(np.flatnonzero(~both), w)
        run_t, run_p = f.running(t), f.running(p)
    else:
        t, p = temp, power
        n = q.window_count(None, w)
    sp, st = q.window_sum(run_p, w), q.window_sum(run_t, w)
    prod = np.multiply(p, p, dtype=np.float64)  # float64 products of (maybe float32) values
    spp = q.window_sum(f.running(prod), w)
    np.multiply(p, t, out=prod, dtype=np.float64)  # the same buffer: one fewer big array
    spt = q.window_sum(f.running(prod), w)
    del prod
    with np.errstate(invalid="ignore", divide="ignore"):
        sxy = np.where(n > 1, spt - sp * st / n, 0.0)
        sxx = np.where(n > 1, spp - sp * sp / n, 0.0)
    model_code = f.frame["model_name"].astype("category").cat.codes.to_numpy()
    rows = q.end_row if f.identity else f.order[q.end_row]
    key = pd.DataFrame({"c": q.c, "m": model_code[rows], "sxy": sxy, "sxx": sxx})
    sums = key.groupby(["c", "m"])[["sxy", "sxx"]].transform("sum")
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(sums["sxx"] > 1.0, sums["sxy"] / sums["sxx"], 0.0)  # no spread of power: no correction
    return np.asarray(k, dtype=float)


def _peer_features(ident: pd.DataFrame, feats: pd.DataFrame) -> None:
    """Comparisons with same-model GPUs and with the node, at the same cutoff."""
    by_model = [ident["cutoff"], ident["model_name"]]
    t = feats["temp_mean_1d"]
    feats["temp_vs_peers_1d"] = t - t.groupby(by_model).transform("median")
    feats["temp_vs_node_1d"] = t - t.groupby([ident["cutoff"], ident["hostname"]]).transform("median")
    # Power against peers at a similar load: residual of power after the peers' load slope.
    p, u = feats["power_mean_1d"], feats["util_mean_1d"]
    load_bin = (u // 20).fillna(-1)
    feats["power_vs_peers_1d"] = p - p.groupby([*by_model, load_bin]).transform("median")


def missing_inputs(frame: pd.DataFrame) -> list[str]:
    """History columns the features would use that this frame lacks or holds only NaN in."""
    return [c for c in USED_COLUMNS if c not in frame.columns or _all_missing(frame[c])]


def _all_missing(s: pd.Series) -> bool:
    """Whether a column holds no value; a float column with a value near its end answers at once."""
    if s.dtype in (np.float32, np.float64):
        x = s.to_numpy()
        if len(x) and not np.isnan(x[-64:]).all():
            return False
        return bool(np.isnan(x).all())
    return bool(s.isna().all())


def feature_label(name: str) -> FeatureSpec:
    """The spec of a feature (for reasons)."""
    return BY_NAME[name]


def iter_specs(mode: str) -> Iterable[FeatureSpec]:
    """Features that speak to one failure mode (and the general ones)."""
    return (s for s in SPECS if s.mode in (mode, "any"))
