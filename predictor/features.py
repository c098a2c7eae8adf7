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

from gpuhealth.history import HistoryError

HOUR = 3600
DAY = 86400
WINDOWS = {"1d": DAY, "7d": 7 * DAY, "30d": 30 * DAY}
STALE_S = DAY
"""A GPU whose last sample is older than this at the cutoff is not scored (it left)."""
_KEY_SHIFT = 40  # key = gpu code << 40 | seconds since t0: 2**40 s is 34,000 years

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
    """A history frame in (GPU, time) order, with running sums for window queries."""

    def __init__(self, frame: pd.DataFrame) -> None:
        if len(frame) == 0:
            raise HistoryError("the history has no rows: nothing to compute features from")
        uuid = frame["gpu_uuid"]
        cat = uuid.astype("category") if not isinstance(uuid.dtype, pd.CategoricalDtype) else uuid
        codes = cat.cat.codes.to_numpy().astype(np.int64)
        ts_ns = frame["timestamp"].dt.as_unit("ns").array.asi8
        self.t0_ns = int(ts_ns.min())
        t = (ts_ns - self.t0_ns) // 1_000_000_000
        # Histories are kept in time order (history.validate): a stable sort by GPU alone
        # then gives (GPU, time) order, several times faster than a two-key sort.
        order = np.argsort(codes, kind="stable") if bool(np.all(t[1:] >= t[:-1])) else np.lexsort((t, codes))
        self.codes = codes[order]
        self.t = t[order]
        self.key = (self.codes << _KEY_SHIFT) | self.t
        self.order = order
        self.n = len(order)
        self.frame = frame
        self.columns = set(frame.columns)
        self._cols: dict[str, np.ndarray] = {}
        self.new_gpu = np.ones(self.n, dtype=bool)
        self.new_gpu[1:] = self.codes[1:] != self.codes[:-1]
        self.uuids = np.asarray(cat.cat.categories, dtype=object)
        # Per GPU: first/last sample time, hostname and model (from its last row).
        starts = np.flatnonzero(self.new_gpu)
        ends = np.append(starts[1:], self.n) - 1
        self.gpu_codes = self.codes[starts]
        self.first_t = self.t[starts]
        self.last_t = self.t[ends]
        # Identity per row in sorted order; a query takes its GPU's row at the cutoff (a GPU
        # moved to another node later is reported where it was).
        host = frame["hostname"].astype("category")
        model = frame["model_name"].astype("category")
        self.host_code = host.cat.codes.to_numpy()[order]
        self.host_names = np.asarray(host.cat.categories.astype(str), dtype=object)
        self.model_code = model.cat.codes.to_numpy()[order]
        self.model_names = np.asarray(model.cat.categories.astype(str), dtype=object)
        self.gpu_index = frame["gpu_index"].to_numpy()[order]

    def col(self, name: str) -> np.ndarray | None:
        """A column in (GPU, time) order as float64, or None when the frame lacks it (read once)."""
        if name not in self.columns:
            return None
        if name not in self._cols:
            self._cols[name] = self.frame[name].to_numpy(dtype=np.float64, na_value=np.nan)[self.order]
        return self._cols[name]

    def valid_rows(self, x: np.ndarray) -> np.ndarray:
        """Positions of the non-NaN values of a column (sorted)."""
        return np.flatnonzero(~np.isnan(x))

    def per_gpu_any(self, flag: np.ndarray) -> np.ndarray:
        """Per row: whether any row of the same GPU has the flag set."""
        starts = np.flatnonzero(self.new_gpu)
        per_gpu = np.logical_or.reduceat(flag, starts)
        return np.repeat(per_gpu, np.diff(np.append(starts, self.n)))

    def increments(self, x: np.ndarray) -> np.ndarray:
        """Per-sample increase of a counter; a drop is a reset, and counts the new value.

        NaN samples are skipped: the increase is taken between a GPU's consecutive
        readings, so a missing sample neither loses nor invents counts.
        """
        vi = self.valid_rows(x)
        out = np.zeros(self.n)
        if len(vi) < 2:
            return out
        v = x[vi]
        d = v[1:] - v[:-1]
        d = np.where(d < 0, v[1:], d)  # reset: the counter restarted at 0 and reached v
        same = self.codes[vi[1:]] == self.codes[vi[:-1]]
        out[vi[1:]] = np.where(same, d, 0.0)
        return out

    def running(self, per_sample: np.ndarray) -> _Sums:
        """A per-sample quantity, ready for window sums (running sums made when needed)."""
        return _Sums(per_sample)


class _Sums:
    """A per-sample quantity whose window sums are asked for.

    With many cutoffs a window is the difference of two running sums (built once); with a
    single cutoff each GPU's window is one contiguous run of rows, summed directly by
    `np.add.reduceat`, which reads the column once instead of writing a running sum.
    """

    def __init__(self, x: np.ndarray) -> None:
        self.x = x
        self._cum: np.ndarray | None = None

    def cum(self) -> np.ndarray:
        if self._cum is None:
            self._cum = np.empty(len(self.x) + 1)
            self._cum[0] = 0.0
            np.cumsum(self.x, out=self._cum[1:])
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
    out[nonempty] = np.add.reduceat(x, idx)[0::2]
    return out


class _Queries:
    """(GPU, cutoff) pairs and the positions of their windows in a _Frame."""

    def __init__(self, f: _Frame, gpu_pos: np.ndarray, cutoff_s: np.ndarray) -> None:
        self.f = f
        self.gpu_pos = gpu_pos  # index into f.gpu_codes
        self.code = f.gpu_codes[gpu_pos]
        self.c = cutoff_s
        self._pos: dict[int, np.ndarray] = {}
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
            first = np.searchsorted(self.f.key, self.code << _KEY_SHIFT, side="left")
            self._pos[back_s] = np.where(t < 0, first, p)
        return self._pos[back_s]

    def window_sum(self, sums: _Sums, w: int) -> np.ndarray:
        """Sum of a quantity over each query's window (cutoff - w, cutoff]."""
        if self.single:
            return _segment_sums(sums.x, self.pos(w), self.end)
        cum = sums.cum()
        return cum[self.end] - cum[self.pos(w)]

    def latest(self, x: np.ndarray) -> np.ndarray:
        """Value of the GPU's last row at or before the cutoff (NaN rows included)."""
        i = self.end - 1
        ok = (i >= 0) & (self.f.codes[np.maximum(i, 0)] == self.code)
        return np.where(ok, x[np.maximum(i, 0)], np.nan)

    def latest_valid(self, x: np.ndarray) -> np.ndarray:
        """The GPU's last non-NaN value at or before the cutoff (NaN if it has none)."""
        vi = self.f.valid_rows(x)
        if len(vi) == 0:
            return np.full(len(self.c), np.nan)
        k = np.searchsorted(vi, self.end, side="left") - 1
        row = vi[np.maximum(k, 0)]
        ok = (k >= 0) & (self.f.codes[row] == self.code)
        return np.where(ok, x[row], np.nan)

    def covered_s(self, w: int) -> np.ndarray:
        """Seconds of the window the GPU was around for (a new GPU has less than w)."""
        first = self.f.first_t[self.gpu_pos]
        return np.clip(self.c - np.maximum(first, self.c - w), HOUR, w).astype(float)


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
    last_seen = q.latest(f.t.astype(float))
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
            "hostname": f.host_names[f.host_code[q.end_row]],
            "gpu_index": f.gpu_index[q.end_row],
            "model_name": f.model_names[f.model_code[q.end_row]],
            "cutoff": pd.DatetimeIndex(cuts.asi8[c_idx[keep]], tz="UTC"),
            "last_seen": pd.to_datetime(last_seen[keep] * 1e9 + f.t0_ns, utc=True),
        }
    )
    feats = pd.DataFrame(out, columns=list(FEATURES))
    _peer_features(ident, feats)
    return pd.concat([ident, feats], axis=1)


def _compute(f: _Frame, q: _Queries) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    n = len(q.c)
    nan = np.full(n, np.nan)
    days = {k: q.covered_s(w) / DAY for k, w in WINDOWS.items()}

    has_data: dict[str, np.ndarray] = {}

    def counter_increase(*names: str) -> np.ndarray | None:
        """Increments of a counter, per GPU from the first of `names` that GPU reports.

        Aggregate ECC counters never reset, so they are preferred; a GPU that reports only
        the volatile one uses that. Which GPUs had none at all is kept in `has_data`, so
        their features become NaN (unknown) rather than 0 (healthy).
        """
        chosen: np.ndarray | None = None
        covered = np.zeros(f.n, dtype=bool)
        for name in names:
            x = f.col(name)
            if x is None:
                continue
            gpu_has = f.per_gpu_any(~np.isnan(x))
            use = gpu_has & ~covered
            if use.any():
                inc = f.increments(x)
                chosen = np.where(use, inc, chosen if chosen is not None else 0.0)
                covered |= use
        if chosen is not None:
            has_data[names[0]] = covered
        return chosen

    def unknown_where_missing(name: str, *feats: str) -> None:
        covered = has_data.get(name)
        if covered is None:
            return
        missing = ~q.latest(covered.astype(float)).astype(bool)
        for feat in feats:
            if feat in out:
                out[feat] = np.where(missing, np.nan, out[feat])

    # ECC: SBE rate from the aggregate counter where present (it never resets).
    sbe = counter_increase("ecc_sbe_aggregate", "ecc_sbe_volatile")
    if sbe is not None:
        run = f.running(sbe)
        for k, w in WINDOWS.items():
            out[f"sbe_rate_{k}"] = q.window_sum(run, w) / days[k]
        out["sbe_growth"] = (out["sbe_rate_1d"] + 1.0) / (out["sbe_rate_7d"] + 1.0)
        out["sbe_active_hours_7d"] = q.window_sum(f.running((sbe > 0).astype(float)), WINDOWS["7d"])
    dbe = counter_increase("ecc_dbe_aggregate", "ecc_dbe_volatile")
    if dbe is not None:
        run = f.running(dbe)
        out["dbe_7d"] = q.window_sum(run, WINDOWS["7d"])
        out["dbe_30d"] = q.window_sum(run, WINDOWS["30d"])
    incs = [counter_increase(c) for c in ("remapped_rows_correctable", "remapped_rows_uncorrectable")]
    present = [x for x in incs if x is not None]
    if present:
        out["remaps_new_7d"] = q.window_sum(f.running(np.sum(present, axis=0)), WINDOWS["7d"])
    for name in LATEST:
        x = f.col(name)
        if x is not None:
            out[f"_latest_{name}"] = q.latest_valid(x)
    for name in ("remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending",
                 "row_remap_failure", "retired_pages_dbe", "retired_pages_pending"):  # fmt: skip
        if f"_latest_{name}" in out:
            out[name] = out[f"_latest_{name}"]
    if "_latest_retired_pages_sbe" in out or "_latest_retired_pages_dbe" in out:
        out["retired_pages"] = np.nansum(
            [out.get("_latest_retired_pages_sbe", nan), out.get("_latest_retired_pages_dbe", nan)], axis=0
        )
        both_nan = np.isnan(out.get("_latest_retired_pages_sbe", nan)) & np.isnan(
            out.get("_latest_retired_pages_dbe", nan)
        )
        out["retired_pages"][both_nan] = np.nan
    rdbe = f.col("retired_pages_dbe")
    if rdbe is not None and not np.isnan(rdbe).all():
        out["retired_pages_dbe_new_7d"] = q.window_sum(f.running(f.increments(rdbe)), WINDOWS["7d"])

    # Thermal: window means from sums of values and of "present" flags. All windows of a
    # column are taken in one call, so its helper arrays die right after (7 M rows each).
    def window_means(x: np.ndarray | None, *ws: int) -> list[np.ndarray]:
        if x is None:
            return [nan] * len(ws)
        present = ~np.isnan(x)
        run_x, run_n = f.running(np.where(present, x, 0.0)), f.running(present.astype(float))
        means = []
        for w in ws:
            s, k = q.window_sum(run_x, w), q.window_sum(run_n, w)
            with np.errstate(invalid="ignore", divide="ignore"):
                means.append(np.where(k > 0, s / k, np.nan))
        return means

    temp, mem, power = f.col("gpu_temp_c"), f.col("memory_temp_c"), f.col("power_w")
    util = f.col("gpu_util_pct")
    t1, t7, t30 = window_means(temp, WINDOWS["1d"], WINDOWS["7d"], WINDOWS["30d"])
    out["temp_mean_1d"] = t1
    out["temp_vs_own_30d"] = t1 - t30
    out["temp_trend_7d"] = t1 - t7
    # Temperature the GPU's power does not explain: steady state is inlet + slot + R*P, so
    # temp - R*P is constant for healthy cooling whatever the load. R is fitted per model
    # over the 30 days before each cutoff; the excess is compared with the GPU's own 30 days.
    if temp is not None and power is not None:
        slope = _thermal_slope(f, q, temp, power)
        both = ~np.isnan(temp) & ~np.isnan(power)
        ws = (WINDOWS["30d"], WINDOWS["1d"], 6 * HOUR)
        t_30, t_1, t_6 = window_means(np.where(both, temp, np.nan), *ws)
        p_30, p_1, p_6 = window_means(np.where(both, power, np.nan), *ws)
        own = t_30 - slope * p_30
        out["temp_per_load_vs_own"] = t_1 - slope * p_1 - own
        out["temp_excess_6h"] = t_6 - slope * p_6 - own
    (out["memtemp_mean_1d"],) = window_means(mem, WINDOWS["1d"])
    if temp is not None and mem is not None:
        s1, s30 = window_means(mem - temp, WINDOWS["1d"], WINDOWS["30d"])
        out["mem_minus_core_1d"] = s1
        out["mem_minus_core_vs_own"] = s1 - s30
    reasons = f.col("clocks_event_reasons")
    if reasons is not None:
        thr = np.where(np.isnan(reasons), np.nan, (np.nan_to_num(reasons).astype(np.int64) & THERMAL_THROTTLE) > 0)
        out["throttle_share_1d"], out["throttle_share_7d"] = window_means(thr, WINDOWS["1d"], WINDOWS["7d"])
    for name, feat in (("thermal_violation_us", "thermal_violation_share_1d"),
                       ("power_violation_us", "power_violation_share_1d")):  # fmt: skip
        inc = counter_increase(name)
        if inc is not None:
            out[feat] = q.window_sum(f.running(inc), DAY) / (days["1d"] * DAY * 1e6)

    # PCIe
    rep = counter_increase("pcie_replay_count")
    if rep is not None:
        run = f.running(rep)
        out["replay_rate_1d"] = q.window_sum(run, DAY) / (days["1d"] * 24)
        out["replay_rate_7d"] = q.window_sum(run, WINDOWS["7d"]) / (days["7d"] * 24)
        out["replay_growth"] = (out["replay_rate_1d"] + 1.0) / (out["replay_rate_7d"] + 1.0)
        out["replay_active_hours_1d"] = q.window_sum(f.running((rep > 0).astype(float)), DAY)
    with np.errstate(invalid="ignore", divide="ignore"):
        if "_latest_pcie_link_width" in out and "_latest_pcie_link_width_max" in out:
            out["link_width_ratio"] = out["_latest_pcie_link_width"] / out["_latest_pcie_link_width_max"]
        if "_latest_pcie_link_gen" in out and "_latest_pcie_link_gen_max" in out:
            out["link_gen_ratio"] = out["_latest_pcie_link_gen"] / out["_latest_pcie_link_gen_max"]

    # XID counts: the history's xid is the last code within each interval.
    xid = f.col("xid")
    if xid is not None:
        codes = np.nan_to_num(xid).astype(np.int64)
        for code in XID_FEATURES:
            run = f.running((codes == code).astype(float))
            out[f"xid_{code}_7d"] = q.window_sum(run, WINDOWS["7d"])
            if code in (48, 79):
                out[f"xid_{code}_30d"] = q.window_sum(run, WINDOWS["30d"])
        other = (codes != 0) & ~np.isin(codes, XID_FEATURES)
        out["xid_other_7d"] = q.window_sum(f.running(other.astype(float)), WINDOWS["7d"])

    unknown_where_missing("ecc_sbe_aggregate", "sbe_rate_1d", "sbe_rate_7d", "sbe_rate_30d", "sbe_growth",
                          "sbe_active_hours_7d")  # fmt: skip
    unknown_where_missing("ecc_dbe_aggregate", "dbe_7d", "dbe_30d")
    unknown_where_missing("remapped_rows_correctable", "remaps_new_7d")
    unknown_where_missing("thermal_violation_us", "thermal_violation_share_1d")
    unknown_where_missing("power_violation_us", "power_violation_share_1d")
    unknown_where_missing("pcie_replay_count", "replay_rate_1d", "replay_rate_7d", "replay_growth",
                          "replay_active_hours_1d")  # fmt: skip
    (out["power_mean_1d"],) = window_means(power, DAY)
    (out["util_mean_1d"],) = window_means(util, DAY)
    # Coverage against the GPU's own mean sampling interval over the week before (no look-ahead).
    ones = f.running(np.ones(f.n))
    n7 = q.window_sum(ones, WINDOWS["7d"])
    with np.errstate(invalid="ignore", divide="ignore"):
        interval_s = q.covered_s(WINDOWS["7d"]) / np.maximum(n7 - 1, 1)
        expected = q.covered_s(DAY) / interval_s
        out["coverage_1d"] = np.where(n7 > 1, np.minimum(q.window_sum(ones, DAY) / expected, 1.0), np.nan)
    out["age_days"] = (q.c - f.first_t[q.gpu_pos]) / DAY
    return {k: out.get(k, nan) for k in FEATURES}


def _thermal_slope(f: _Frame, q: _Queries, temp: np.ndarray, power: np.ndarray) -> np.ndarray:
    """Per query, degrees per watt of its GPU model, fitted on the 30 days before its cutoff.

    A within-GPU least-squares slope (each GPU's own inlet and slot offset removed),
    pooled over the model's GPUs at the same cutoff, from running sums: only data up
    to the cutoff, and the same value whether one cutoff or thousands are asked for.
    """
    both = ~np.isnan(temp) & ~np.isnan(power)
    t, p = np.where(both, temp, 0.0), np.where(both, power, 0.0)
    w = WINDOWS["30d"]
    n = q.window_sum(f.running(both.astype(float)), w)
    sp, st = q.window_sum(f.running(p), w), q.window_sum(f.running(t), w)
    spp, spt = q.window_sum(f.running(p * p), w), q.window_sum(f.running(p * t), w)
    with np.errstate(invalid="ignore", divide="ignore"):
        sxy = np.where(n > 1, spt - sp * st / n, 0.0)
        sxx = np.where(n > 1, spp - sp * sp / n, 0.0)
    key = pd.DataFrame({"c": q.c, "m": f.model_code[q.end_row], "sxy": sxy, "sxx": sxx})
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
    return [c for c in USED_COLUMNS if c not in frame.columns or frame[c].isna().all()]


def feature_label(name: str) -> FeatureSpec:
    """The spec of a feature (for reasons)."""
    return BY_NAME[name]


def iter_specs(mode: str) -> Iterable[FeatureSpec]:
    """Features that speak to one failure mode (and the general ones)."""
    return (s for s in SPECS if s.mode in (mode, "any"))
