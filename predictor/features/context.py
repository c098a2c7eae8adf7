"""What every feature family is handed: the ordered history, the queries and shared helpers.

A family is a function that computes a few features together (they share big per-row
arrays, which die when it returns) from a `FeatureContext`; `features.SPECS` names the
family of each feature. The context runs each family once and keeps its columns, so a
family may read another's features (`feature`) whatever their order in the table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from predictor.features.frame import OrderedFrame
from predictor.features.windows import DAY, CounterIncreases, Queries, Sums

Columns = dict[str, np.ndarray]
"""Feature values by name, one per query; a family leaves out those it has no data for."""
NODE_MIN_GPUS = 3
"""A node with fewer GPUs scored at a cutoff has no median worth comparing a GPU with."""


@dataclass(frozen=True)
class Family:
    """A function computing a group of features, and the history columns it reads."""

    compute: Callable[[FeatureContext], Columns]
    inputs: tuple[str, ...]
    heavy: bool = False
    """Started first when families run side by side (`FeatureContext.run_all`): about half of the work."""

    @property
    def name(self) -> str:
        """The computing function's name (for messages)."""
        return self.compute.__name__


def family(*inputs: str, heavy: bool = False) -> Callable[[Callable[[FeatureContext], Columns]], Family]:
    """Declare a function as a feature family that reads the given history columns."""

    def wrap(compute: Callable[[FeatureContext], Columns]) -> Family:
        return Family(compute, inputs, heavy)

    return wrap


class FeatureContext:
    """One build's ordered history and (GPU, cutoff) queries, with the helpers families share.

    Families may run side by side in threads (`run_all`): numpy does their work with the GIL
    released. What they share is read only (the frame's columns in order are not writeable) or
    memoised (a value two threads both compute is the same value), and each family runs once,
    under its own lock, so one that reads another's features waits for it rather than running
    it again.
    """

    def __init__(
        self,
        f: OrderedFrame,
        q: Queries,
        ident: pd.DataFrame,
        family_of: Mapping[str, Family],
        failures: pd.DataFrame | None = None,
    ) -> None:
        self.f = f
        self.failures = failures
        """Recorded failures and RMAs (gpu_uuid, hostname, failed_at, ...), or None if none were given."""
        self.q = q
        self.ident = ident
        """Identity columns of each query (gpu_uuid, hostname, model_name, cutoff, ...)."""
        self.nan = np.full(len(q.c), np.nan)
        self._family_of = family_of
        self._done: Columns = {}
        self._ran: set[Family] = set()
        self._locks = {fam: threading.Lock() for fam in family_of.values()}
        self._latest: dict[str, np.ndarray] = {}
        self._days: dict[int, np.ndarray] = {}

    def feature(self, name: str) -> np.ndarray:
        """A feature's values (NaN where unknown), running its family first if it has not run."""
        if name not in self._done:
            self._run(self._family_of[name])
        return self._done[name]

    def run_all(self, lanes: int = 1) -> Columns:
        """Every family's features, the families run by `lanes` threads (heavy ones first, then
        in the table's order). A family's error is raised once the families running then have
        stopped; those still queued are not started."""
        families = sorted(dict.fromkeys(self._family_of.values()), key=lambda fam: not fam.heavy)
        if lanes <= 1:
            for fam in families:
                self._run(fam)
            return self._done
        pool = ThreadPoolExecutor(lanes, thread_name_prefix="features")
        try:
            finished, _ = wait([pool.submit(self._run, fam) for fam in families], return_when=FIRST_EXCEPTION)
            for one in finished:
                one.result()  # raises the family's error
        finally:
            pool.shutdown(cancel_futures=True)
        return self._done

    def _run(self, fam: Family) -> None:
        with self._locks[fam]:
            if fam in self._ran:  # another thread ran it while this one waited
                return
            names = [n for n, f in self._family_of.items() if f is fam]
            cols = fam.compute(self)
            stray = sorted(set(cols) - set(names))
            if stray:
                raise ValueError(f"feature family {fam.name} made {stray}, which no spec names it for")
            for n in names:
                self._done[n] = cols.get(n, self.nan)
            self._ran.add(fam)

    def days(self, w: int) -> np.ndarray:
        """Days of window w each query's GPU was around for (the denominator of its rates)."""
        if w not in self._days:
            self._days[w] = self.q.covered_s(w) / DAY
        return self._days[w]

    def latest(self, name: str) -> np.ndarray | None:
        """The GPU's last value of a column at or before the cutoff, or None if the frame lacks it."""
        if name not in self.f.columns:
            return None
        if name not in self._latest:
            self._latest[name] = self.q.latest_valid_col(name)
        return self._latest[name]

    # -- counters ----------------------------------------------------------------------------

    def counter(self, *names: str, windows: tuple[int, ...]) -> CounterIncreases | None:
        """Increments of a counter, per GPU from the first of `names` that GPU reports.

        Aggregate ECC counters never reset, so they are preferred; a GPU that reports only
        the volatile one uses that. Which GPUs had none at all is kept in the result's
        `covered`, so their features become NaN (unknown) rather than 0 (healthy); None if
        no GPU reports any. `windows`: the windows its sums will be asked for.
        """
        f = self.f
        chosen: np.ndarray | None = None
        covered: np.ndarray | None = None
        for name in names:
            if not f.usable(name):
                continue  # absent or all NaN: no GPU reports it
            if covered is None and not f.nan_state(name)[0]:
                # Every row has a value, so every GPU uses this one and no later name counts.
                return self._complete_counter(name, windows)
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
        return CounterIncreases(self.q, inc=chosen, covered=covered)

    def _complete_counter(self, name: str, windows: tuple[int, ...]) -> CounterIncreases:
        """A counter with a value in every row; a single cutoff's short windows read only their rows."""
        if all(self.q.window(w) is not None for w in windows):
            return CounterIncreases(self.q, name=name)
        x = self.f.col(name)
        assert x is not None
        return CounterIncreases(self.q, inc=self.f.increments(x, overwrite=True))

    def unknown_where_missing(self, counter: CounterIncreases, cols: Columns) -> Columns:
        """`cols` with NaN for the queries whose GPU does not report the counter."""
        if counter.covered is None:
            return cols
        missing = ~counter.covered[self.q.end_row]
        return {k: np.where(missing, np.nan, v) for k, v in cols.items()}

    # -- gauges ------------------------------------------------------------------------------

    def window_means(
        self, x: np.ndarray | Sums | None, *ws: int, name: str | None = None, owned: bool = False
    ) -> list[np.ndarray]:
        """Means of a column over windows, NaN samples left out.

        `x`: the column in (GPU, time) order, or its Sums if it has no NaN; or None and
        `name`: a frame column, put in order whole only if a window needs most of its rows.
        A short window (single cutoff) takes just its rows. `owned`: x may be overwritten.
        All windows of a column are taken in one call, so its helper arrays die right after.
        """
        if x is None and (name is None or name not in self.f.columns):
            return [self.nan] * len(ws)
        q = self.q
        if isinstance(x, Sums):
            return [mean(q.window_sum(x, w), q.window_count(None, w)) for w in ws]
        column = _ColumnMeans(self.f, q, x, name, owned)
        return [column.mean(w) for w in ws]


def tail_as_z(p: np.ndarray) -> np.ndarray:
    """An upper-tail probability as the normal z-score that is as rare: z with P(Z >= z) = p.

    Probabilities under 1e-300 count as 1e-300 (z about 37), so the rarest stay finite."""
    return -special.ndtri(np.clip(p, 1e-300, 1.0))


def mean(s: np.ndarray, k: np.ndarray) -> np.ndarray:
    """s / k where k > 0, else NaN (no sample)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k > 0, s / k, np.nan)


class _ColumnMeans:
    """Window means of one column with NaN samples: short windows from their rows, long ones
    from one running sum of the column (built when the first long window asks for it)."""

    def __init__(self, f: OrderedFrame, q: Queries, x: np.ndarray | None, name: str | None, owned: bool) -> None:
        self.f, self.q = f, q
        self.x, self.name, self.owned = x, name, owned
        self._full: tuple[Sums, np.ndarray | None] | None = None  # sums, rows without a value

    def mean(self, w: int) -> np.ndarray:
        win = self.q.window(w)
        if win is None:
            return mean(*self._long(w))
        v = win.values(self.name) if self.x is None else self.x[win.rows]  # type: ignore[arg-type]
        miss = np.isnan(v)
        if miss.any():
            return mean(win.sums(np.where(miss, 0.0, v)), win.sums((~miss).astype(float)))
        return mean(win.sums(v), self.q.window_count(None, w))

    def _long(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        if self._full is None:
            self._full = self._running()
        sums, gaps = self._full
        s = self.q.window_sum(sums, w)
        return s, self.q.window_count(None, w) - (0.0 if gaps is None else self.q.window_count(gaps, w))

    def _running(self) -> tuple[Sums, np.ndarray | None]:
        if self.x is None:
            self.x = self.f.col(self.name, native=True)  # type: ignore[arg-type]  # shared: never written
        x = self.x
        assert x is not None
        missing = np.isnan(x)
        if not missing.any():
            return Sums(x), None
        # Few rows lack a value, as a rule: count those and subtract.
        gaps = np.flatnonzero(missing)
        if self.owned:
            x[gaps] = 0.0
        return Sums(x if self.owned else np.where(missing, 0.0, x)), gaps
