"""Window queries over an OrderedFrame: sums and counts over (cutoff - w, cutoff] per (GPU, cutoff).

Every per-sample quantity becomes a running sum, and a window is the difference of two
running sums found with one `np.searchsorted` over the frame's (GPU, time) key. So
features for thousands of cutoffs cost little more than for one, and irregular sampling
needs no resampling. A single cutoff takes shortcuts that give the same numbers: only its
windows' rows are read when those are few.
"""

from __future__ import annotations

import numpy as np

from predictor.features.frame import KEY_SHIFT, OrderedFrame

HOUR = 3600
DAY = 86400
WEEK = 7 * DAY
MONTH = 30 * DAY
WINDOWS = {"1d": DAY, "7d": WEEK, "30d": MONTH}


class Sums:
    """A per-sample quantity (in (GPU, time) order) whose window sums are asked for.

    With many cutoffs a window is the difference of two running sums (built once); with a
    single cutoff each GPU's window is one contiguous run of rows, summed directly by
    `np.add.reduceat`, which reads the column once instead of writing a running sum.
    """

    def __init__(self, x: np.ndarray) -> None:
        self.x = x
        self._cum: np.ndarray | None = None
        self.memo: dict[int, np.ndarray] = {}
        """Window sums already asked for, by window (a Sums serves one set of queries)."""

    def cum(self) -> np.ndarray:
        """The running sum, with a 0 in front (made on first use)."""
        if self._cum is None:
            self._cum = np.empty(len(self.x) + 1)
            self._cum[0] = 0.0
            np.cumsum(self.x, out=self._cum[1:], dtype=np.float64)
        return self._cum


def segment_sums(x: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
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


class WindowRows:
    """A single cutoff's window: its rows (one run per GPU, in order) gathered into one block.

    Summing a short window over the gathered rows touches only them, not the whole
    column; the sums are the same additions in the same order as `segment_sums`.
    """

    def __init__(self, f: OrderedFrame, start: np.ndarray, end: np.ndarray) -> None:
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


class Queries:
    """(GPU, cutoff) pairs and the positions of their windows in an OrderedFrame."""

    def __init__(self, f: OrderedFrame, gpu_pos: np.ndarray, cutoff_s: np.ndarray) -> None:
        self.f = f
        self.gpu_pos = gpu_pos  # index into f.gpu_codes
        self.code = f.gpu_codes[gpu_pos]
        self.c = cutoff_s
        self._pos: dict[int, np.ndarray] = {}
        self._windows: dict[int, WindowRows | None] = {}
        self.single = len(cutoff_s) > 0 and bool(np.all(cutoff_s == cutoff_s[0]))
        self.end = self.pos(0)
        self.end_row = np.maximum(self.end - 1, 0)
        """The GPU's last row at or before the cutoff (queries are only made for GPUs that have one)."""

    def pos(self, back_s: int) -> np.ndarray:
        """Insertion point after the GPU's last row at or before cutoff - back_s."""
        if back_s not in self._pos:
            t = self.c - back_s
            p = np.searchsorted(self.f.key, (self.code << KEY_SHIFT) | np.maximum(t, 0), side="right")
            # t < 0: the window begins before all data; the GPU's first row is the bound.
            first = self.f.gpu_start[self.gpu_pos]
            self._pos[back_s] = np.where(t < 0, first, p)
        return self._pos[back_s]

    def window(self, w: int) -> WindowRows | None:
        """The rows of window w gathered, for a single cutoff whose window is short (else None)."""
        if w not in self._windows:
            start, end = self.pos(w), self.end
            short = self.single and int((end - start).sum()) < self.f.n // 2
            self._windows[w] = WindowRows(self.f, start, end) if short else None
        return self._windows[w]

    def window_sum(self, sums: Sums, w: int) -> np.ndarray:
        """Sum of a quantity over each query's window (cutoff - w, cutoff]."""
        if w not in sums.memo:
            sums.memo[w] = self._window_sum(sums, w)
        return sums.memo[w]

    def _window_sum(self, sums: Sums, w: int) -> np.ndarray:
        if self.single:
            win = self.window(w)
            if win is not None:
                return win.sums(sums.x[win.rows])
            return segment_sums(sums.x, self.pos(w), self.end)
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


class CounterIncreases:
    """A counter's per-sample increases, asked for as window sums.

    Either all of them (`inc`, in (GPU, time) order), or, for a single cutoff whose
    windows are all short and a column without NaN, only those of the windows' rows:
    each row's increase needs just that row and the one before it, so the column is
    never put in order whole. The values are the same as `OrderedFrame.increments` gives.
    """

    def __init__(
        self, q: Queries, inc: np.ndarray | None = None, name: str | None = None, covered: np.ndarray | None = None
    ) -> None:
        self.q = q
        self.inc = inc
        self.name = name
        self.covered = covered
        """Per row (GPU, time order), whether its GPU reports the counter; None: every GPU does."""
        self._run: Sums | None = None
        self._rising: np.ndarray | None = None
        self._win: dict[int, np.ndarray] = {}

    def _window_increments(self, w: int) -> tuple[WindowRows, np.ndarray]:
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
            self._run = Sums(self.inc)
        return self.q.window_sum(self._run, w)

    def rising(self, w: int) -> np.ndarray:
        """Samples in each query's window where the counter went up."""
        if self.inc is None:
            win, d = self._window_increments(w)
            return win.sums((d > 0).astype(float))
        if self._rising is None:
            self._rising = np.flatnonzero(self.inc > 0)
        return self.q.window_count(self._rising, w)
