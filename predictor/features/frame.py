"""A history frame seen in (GPU, time) order: the rows every feature window is cut from.

Rows are ordered once by a (GPU << 40 | seconds since t0) key, so a GPU's rows are one
run and a window (cutoff - w, cutoff] is found with one `np.searchsorted` over the key.
Counters are made reset-proof here: a drop (the driver reloaded and a volatile counter
restarted at 0) counts as an increase of the new value, never a negative one.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core.history import HistoryError

KEY_SHIFT = 40  # key = gpu code << 40 | seconds since t0: 2**40 s is 34,000 years
T_MASK = (1 << KEY_SHIFT) - 1
DROP_BLOCK = 1 << 18
"""Rows per block where counters are compared with their GPU's previous row (`OrderedFrame._dropped`)."""


class OrderedFrame:
    """A history frame seen in (GPU, time) order, and its columns in that order.

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
        elif in_gpu_order(codes, ts_ns):  # a window kept in (GPU, time) order: nothing to sort
            order = np.arange(len(codes))
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
        key |= np.repeat(present.astype(np.int64) << KEY_SHIFT, rows_per_gpu)
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
        """GPU codes in the frame's own row order."""
        self.ts_ns = ts_ns
        """Row times in the frame's own order (ns since the epoch)."""
        self.in_time_order = in_time_order
        """The frame's own rows are in time order (as histories are kept)."""
        self._raw: dict[str, np.ndarray] = {}
        self._nan: dict[str, tuple[bool, bool]] = {}
        self._native: dict[str, np.ndarray] = {}

    def t_at(self, rows: np.ndarray) -> np.ndarray:
        """Seconds since t0 of rows in (GPU, time) order."""
        return self.key[rows] & T_MASK

    def code_at(self, rows: np.ndarray) -> np.ndarray:
        """GPU code of rows in (GPU, time) order."""
        return self.key[rows] >> KEY_SHIFT

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
        """A column in (GPU, time) order as float64 (a copy: callers may write to it), or None
        when the frame lacks it.

        `native`: in the frame's own dtype (float32 gauges: half the memory; the window
        sums add them up in float64 all the same), gathered once and shared by every family
        that asks, so read-only: the heat, memory and temperature families each read the core
        temperature and power, and a gather of millions of rows costs tens of milliseconds.
        """
        if native:
            if name not in self._native:
                x = self.raw(name)
                if x is None:
                    return None
                ordered = x.view() if self.identity else gather(x, self.order)
                ordered.flags.writeable = False
                self._native[name] = ordered
            return self._native[name]
        x = self.raw(name)
        if x is None:
            return None
        if self.identity:
            return x.astype(np.float64)  # a copy: callers may write to it
        return np.take(x.astype(np.float64, copy=False), self.order)

    def codes(self, name: str) -> np.ndarray:
        """A label column's category codes in (GPU, time) order (-1 where missing): the hostname or
        model of each row, to group rows by without comparing strings."""
        c = self.label_codes(name)
        return c if self.identity else np.take(c, self.order)

    def label_codes(self, name: str) -> np.ndarray:
        """A label column's category codes in the frame's own row order (-1 where missing)."""
        s = self.frame[name]
        return (s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")).cat.codes.to_numpy()

    def per_frame_row(self, per_gpu: np.ndarray) -> np.ndarray:
        """A value per GPU (in `gpu_codes` order) at each row of the frame's own order (a new array):
        one gather by the rows' GPU codes."""
        by_code = np.zeros(len(self.uuids), dtype=per_gpu.dtype)
        by_code[self.gpu_codes] = per_gpu
        return np.take(by_code, self.frame_codes)

    def frame_hours(self) -> np.ndarray:
        """Per row of the frame's own order, whole hours since t0 (as the (GPU, time) key counts its
        seconds). A frame in time order is divided once per distinct time: 720 divisions for a month
        of hours instead of one per row."""
        ts = self.ts_ns
        if not self.in_time_order or len(ts) < 2:
            return (ts - self.t0_ns) // (1_000_000_000 * 3600)
        starts = np.flatnonzero(ts[1:] != ts[:-1])
        starts += 1
        starts = np.concatenate(([0], starts))
        hours = (ts[starts] - self.t0_ns) // (1_000_000_000 * 3600)
        return np.repeat(hours, np.diff(starts, append=len(ts)))

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
        return np.searchsorted(self.key, (code << KEY_SHIFT) | t, side="left")

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

    def resets(self, x: np.ndarray) -> np.ndarray:
        """Positions (sorted) of the rows where a GPU's counter fell below its previous reading:
        the GPU or its node was reset (a reboot, a driver reload) and the counter restarted."""
        if not np.isnan(x).any():  # the usual case: consecutive rows are consecutive readings
            return np.flatnonzero((x[1:] < x[:-1]) & ~self.new_gpu[1:]) + 1
        vi = self.valid_rows(x)
        if len(vi) < 2:
            return np.empty(0, dtype=np.int64)
        v = x[vi]
        code = self.code_at(vi)
        drop = (v[1:] < v[:-1]) & (code[1:] == code[:-1])
        return vi[1:][drop]

    def resets_of(self, names: tuple[str, ...]) -> np.ndarray:
        """Positions (sorted) of the rows where any of the named counters the frame has fell below
        its GPU's previous reading: `resets` of each, together.

        A counter with a value in every row is not put in (GPU, time) order whole: each row is
        compared in the frame's own order with its GPU's previous row, which in a history in time
        order lies about an hour of rows back, so that gather reads nearly in sequence (a third
        of the time of one into (GPU, time) order, whose reads are an hour of rows apart)."""
        present = [c for c in names if c in self.columns]
        if self.identity:  # the frame's own columns are in order: read, not copied
            parts = [self.resets(x) for c in present if (x := self.raw(c)) is not None]
            return np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)
        parts = [self.resets(x) for c in present if self.nan_state(c)[0] and (x := self.col(c)) is not None]
        whole = [x for c in present if not self.nan_state(c)[0] and (x := self.raw(c)) is not None]
        if whole:
            parts.append(self._positions_of(np.flatnonzero(self._dropped(whole))))
        return np.unique(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)

    def _dropped(self, columns: list[np.ndarray], block: int = DROP_BLOCK) -> np.ndarray:
        """Per row of the frame's own order, whether any of `columns` (frame order, no NaN) is below
        its value in the GPU's previous row. Block by block: each block of previous rows is read
        once for every column, and no temporary is a column long (7 M rows, 6 counters: 0.10 s,
        against 0.25 s a column at a time; decision 0085)."""
        prev = self._previous_rows()
        dropped = np.zeros(self.n, dtype=bool)
        for lo in range(0, self.n, block):
            before, out = prev[lo : lo + block], dropped[lo : lo + block]
            for x in columns:
                out |= x[lo : lo + block] < np.take(x, before)
        return dropped

    def _previous_rows(self) -> np.ndarray:
        """Per row of the frame's own order, the frame row of its GPU's previous row (its own for a
        GPU's first row, so that no counter falls there)."""
        order = self.order
        prev = np.empty(self.n, dtype=np.int64)
        prev[order[1:]] = order[:-1]
        first = order[self.gpu_start]
        prev[first] = first
        return prev

    def _positions_of(self, frame_rows: np.ndarray) -> np.ndarray:
        """Positions in (GPU, time) order of rows given in the frame's order (sorted), exactly: by their
        (GPU, time) keys, or where two rows share a key, by inverting the order."""
        pos = self.sorted_positions(frame_rows)
        if not np.array_equal(self.frame_rows(pos), frame_rows):  # a repeated (GPU, time): invert
            inverse = np.empty(self.n, dtype=np.int64)
            inverse[self.order] = np.arange(self.n)
            pos = inverse[frame_rows]
        return np.sort(pos)

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


def in_gpu_order(codes: np.ndarray, ts_ns: np.ndarray) -> bool:
    """Whether rows are in (GPU code, time) order already: the order a sort would give (ties keep
    their places), found in one pass instead of a sort of millions of rows (0.3 s)."""
    later = codes[1:] > codes[:-1]
    later |= (codes[1:] == codes[:-1]) & (ts_ns[1:] >= ts_ns[:-1])
    return bool(later.all())


def gather(x: np.ndarray, order: np.ndarray) -> np.ndarray:
    """`np.take(x, order)`, the same values: a float32 column is widened to float64 first and
    narrowed back (exact both ways), since numpy's gather of 7 M float32 rows in (GPU, time)
    order measured 23-28 ms against 15-19 ms through float64 (decision 0085)."""
    if x.dtype != np.float32:
        return np.take(x, order)
    return np.take(x.astype(np.float64), order).astype(np.float32)
