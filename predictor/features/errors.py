"""Error features: ECC errors, row remapping, page retirement, PCIe replays and link, XIDs.

Each function is a feature family (`features.SPECS` names it for its features): it gets
the shared `FeatureContext` and returns its columns, leaving out those it has no data for.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import special

from predictor.features import slots
from predictor.features.context import Columns, FeatureContext, family, mean, tail_as_z
from predictor.features.frame import OrderedFrame
from predictor.features.windows import DAY, HOUR, MONTH, WEEK, WINDOWS, CounterIncreases, Sums

XID_FEATURES = (48, 63, 64, 79, 92, 94, 95)
"""XIDs counted one by one (the ECC, remap and off-bus codes of REFERENCE.md's table);
every other nonzero code counts in xid_other_7d."""
XID_30D = (48, 79)
"""XIDs also counted over 30 days."""
XID_CONTEXT = (119, 120)
"""XIDs also counted one by one for the rules (GSP errors: their documented resolution is a reset), as
context: they still count in xid_other_7d, so what the heads learn from is unchanged."""
LATEST_AS_IS = (
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending", "row_remap_failure",
    "retired_pages_dbe", "retired_pages_pending", "recovery_action",
)  # fmt: skip
"""Columns whose last reported value is a feature of the same name."""
RESET_COUNTERS = ("energy_mj", "pcie_replay_count", "ecc_sbe_volatile", "ecc_dbe_volatile",
                  "thermal_violation_us", "power_violation_us")  # fmt: skip
"""Counters that restart at a reset: a drop of any of them means the GPU or its node was reset."""


@family("ecc_sbe_aggregate", "ecc_sbe_volatile")
def sbe_rates(ctx: FeatureContext) -> Columns:
    """Single-bit ECC errors per day, and how many samples saw new ones."""
    # The aggregate counter never resets, so it is preferred where the GPU reports it.
    sbe = ctx.counter("ecc_sbe_aggregate", "ecc_sbe_volatile", windows=tuple(WINDOWS.values()))
    if sbe is None:
        return {}
    out = {f"sbe_rate_{k}": sbe.sum(w) / ctx.days(w) for k, w in WINDOWS.items()}
    out["sbe_growth"] = (out["sbe_rate_1d"] + 1.0) / (out["sbe_rate_7d"] + 1.0)
    out["sbe_active_hours_7d"] = sbe.rising(WEEK)
    out["sbe_active_hours_1d"] = sbe.rising(DAY)
    return ctx.unknown_where_missing(sbe, out)


@family("ecc_dbe_aggregate", "ecc_dbe_volatile")
def dbe_counts(ctx: FeatureContext) -> Columns:
    """Double-bit ECC errors over a week and a month."""
    dbe = ctx.counter("ecc_dbe_aggregate", "ecc_dbe_volatile", windows=(WEEK, MONTH))
    if dbe is None:
        return {}
    return ctx.unknown_where_missing(dbe, {"dbe_7d": dbe.sum(WEEK), "dbe_30d": dbe.sum(MONTH)})


@family("remapped_rows_correctable", "remapped_rows_uncorrectable")
def new_remaps(ctx: FeatureContext) -> Columns:
    """Rows remapped in the last 7 days, correctable and uncorrectable together."""
    correctable = ctx.counter("remapped_rows_correctable", windows=(WEEK,))
    uncorrectable = ctx.counter("remapped_rows_uncorrectable", windows=(WEEK,))
    present = [r.sum(WEEK) for r in (correctable, uncorrectable) if r is not None]
    if not present:
        return {}
    out = {"remaps_new_7d": np.sum(present, axis=0)}
    # Unknown where the GPU reports no correctable count (every remapping GPU reports one).
    return out if correctable is None else ctx.unknown_where_missing(correctable, out)


@family(*LATEST_AS_IS)
def latest_values(ctx: FeatureContext) -> Columns:
    """Counts and flags as the GPU last reported them at or before the cutoff."""
    return {name: v for name in LATEST_AS_IS if (v := ctx.latest(name)) is not None}


@family("retired_pages_sbe", "retired_pages_dbe")
def retired_pages(ctx: FeatureContext) -> Columns:
    """Pages retired so far (SBE and DBE together), and DBE pages retired in 7 days."""
    out: Columns = {}
    r_sbe, r_dbe = ctx.latest("retired_pages_sbe"), ctx.latest("retired_pages_dbe")
    if r_sbe is not None or r_dbe is not None:
        r_sbe, r_dbe = ctx.nan if r_sbe is None else r_sbe, ctx.nan if r_dbe is None else r_dbe
        out["retired_pages"] = np.where(np.isnan(r_sbe) & np.isnan(r_dbe), np.nan, np.nansum([r_sbe, r_dbe], axis=0))
    if ctx.f.usable("retired_pages_dbe"):
        rdbe = ctx.f.col("retired_pages_dbe")
        assert rdbe is not None
        out["retired_pages_dbe_new_7d"] = ctx.q.window_sum(Sums(ctx.f.increments(rdbe)), WEEK)
    return out


@family("pcie_replay_count", *RESET_COUNTERS[1:], "energy_mj", heavy=True)
def pcie_replays(ctx: FeatureContext) -> Columns:
    """PCIe replays per hour, their growth, and how many samples saw new ones, once the link
    has settled after a reset.

    After a reset (a reboot, a driver reload) the link trains again, which often costs a
    burst of replays, on several GPUs of the node at once; so replays in the first
    SETTLE_S after a reset are left out of these features (a degrading link keeps
    replaying after), and the resets themselves and the node's other replaying GPUs are
    features of their own.
    """
    f, q = ctx.f, ctx.q
    rep = ctx.counter("pcie_replay_count", windows=(6 * HOUR, DAY, WEEK, MONTH))
    if rep is None:
        return {}
    reset_rows = f.resets_of(RESET_COUNTERS)
    # The replays of the settling rows, taken off the counter's window sums (they are few).
    settle = _settling_rows(f, reset_rows)
    # Only those rows and the ones before them are read, not the whole column.
    cur = f.at_rows("pcie_replay_count", settle)
    prev = f.at_rows("pcie_replay_count", np.maximum(settle - 1, 0))
    d = np.where(cur < prev, cur, cur - prev)
    d = np.where(f.new_gpu[settle] | np.isnan(d), 0.0, d)
    sparse = np.zeros(f.n)
    sparse[settle] = d
    settled = Sums(sparse)
    rising_rows = settle[d > 0]

    def total(w: int) -> np.ndarray:
        return rep.sum(w) - q.window_sum(settled, w)

    def active(w: int) -> np.ndarray:
        return rep.rising(w) - q.window_count(rising_rows, w)

    out = {
        "replay_rate_1d": total(DAY) / (ctx.days(DAY) * 24),
        "replay_rate_7d": total(WEEK) / (ctx.days(WEEK) * 24),
    }
    out["replay_growth"] = (out["replay_rate_1d"] + 1.0) / (out["replay_rate_7d"] + 1.0)
    week = active(WEEK)
    for key, w in (("6h", 6 * HOUR), ("1d", DAY)):
        out[f"replay_active_hours_{key}"] = active(w)
    # The same against the GPU's own habit: a healthy link may replay now and then all its
    # life, and how often differs from link to link and fleet to fleet. The habit is the
    # link's month before the last week: a link degrading for days is not its own norm.
    before = active(MONTH) - week
    before_h = np.maximum((ctx.days(MONTH) - ctx.days(WEEK)) * 24, 0.0)
    # A link's habit is its slot's: a GPU that replaced another takes in its hours (`features.slots`).
    before, before_h = _with_predecessors(ctx, rep, rising_rows, before, before_h)
    for key, w in (("6h", 6 * HOUR), ("1d", DAY)):
        out[f"replay_surprise_{key}"] = surprise(out[f"replay_active_hours_{key}"], before, before_h, ctx.days(w) * 24)
    # A degrading link replays a little every hour, then more and more; a flaky healthy one
    # now and then replays hundreds at once: replays per hour that saw any tell them apart.
    with np.errstate(invalid="ignore", divide="ignore"):
        out["replays_per_active_hour_7d"] = np.where(week > 0, total(WEEK) / week, 0.0)
    out["link_retrained_1d"] = q.window_count(reset_rows, DAY)
    ident = ctx.ident
    replaying = pd.Series(out["replay_active_hours_6h"] > 0)
    node_count = replaying.groupby([ident["cutoff"], ident["hostname"]]).transform("sum").to_numpy(dtype=float)
    out["node_replaying_gpus_6h"] = node_count - replaying.to_numpy(dtype=float)
    return ctx.unknown_where_missing(rep, out)


def _with_predecessors(
    ctx: FeatureContext, rep: CounterIncreases, rising_rows: np.ndarray, before: np.ndarray, before_h: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The habit's replaying hours and hours, with those of the GPUs that held each GPU's slot before it
    (`slots.predecessors`) over the same month before the last week, less their own last week (a GPU
    pulled for a failing link was degrading then: no habit either). Unchanged where there were none."""
    pairs = slots.predecessors(ctx.f, ctx.q)
    if rep.covered is not None and len(pairs.query):  # a predecessor without the counter tells nothing
        keep = rep.covered[ctx.f.gpu_start[pairs.gpu]]
        pairs = slots.Predecessors(pairs.query[keep], pairs.gpu[keep])
    if len(pairs.query) == 0:
        return before, before_h
    f, c = ctx.f, ctx.q.c[pairs.query]
    lo, hi = slots.rows_in(f, pairs.gpu, c - MONTH, np.minimum(c, f.last_t[pairs.gpu]) - WEEK)
    active = slots.rising_counts(f, rep, "pcie_replay_count", lo, hi, rising_rows)
    n = len(before)
    before = before + np.bincount(pairs.query, weights=active, minlength=n)
    before_h = before_h + np.bincount(pairs.query, weights=(hi - lo).astype(float), minlength=n)  # hour rows
    return before, before_h


PRIOR_ACTIVE_PER_H = 0.01
"""A link's rate of hours with new replays before its own history says otherwise (the prior's mean)."""
PRIOR_HOURS = 48.0
"""How many hours of its own history weigh as much as the prior."""


SURPRISE_MAX = 8.0
"""The most a surprise says (z): beyond it a count is as unusual as counts get."""


def surprise(k: np.ndarray, before: np.ndarray, before_h: np.ndarray, hours: np.ndarray) -> np.ndarray:
    """How unusual `k` hours with new replays among the last `hours` are for this GPU, as a normal z-score.

    Its habit is its rate of such hours over the `before_h` hours before the last week (`before`
    of them), shrunk towards PRIOR_ACTIVE_PER_H with PRIOR_HOURS of weight, so a GPU with
    little history is judged mostly by the prior. The count is taken as Poisson at that rate:
    z of P(X >= k), from 0 (none, or nothing unusual) to SURPRISE_MAX. On links that replay
    at one rate it rises with the count alone; on one that replays often, the same count
    says less.
    """
    rate = (before + PRIOR_ACTIVE_PER_H * PRIOR_HOURS) / (before_h + PRIOR_HOURS)
    z = tail_as_z(special.pdtrc(np.maximum(k, 1.0) - 1.0, rate * hours))  # P(X > k - 1) = P(X >= k)
    return np.where(np.isnan(k), np.nan, np.where(k > 0, np.clip(z, 0.0, SURPRISE_MAX), 0.0))


SETTLE_S = 12 * HOUR
"""Replays within this long after a reset belong to the link training again, not to its health."""


def _settling_rows(f: OrderedFrame, reset_rows: np.ndarray) -> np.ndarray:
    """Positions (GPU, time order) of the rows within SETTLE_S after a reset of their GPU
    (the reset's row included): one search per reset over the frame's (GPU, seconds) key."""
    if len(reset_rows) == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.searchsorted(f.key, f.key[reset_rows] + SETTLE_S, side="left")
    mark = np.zeros(f.n + 1, dtype=np.int32)
    np.add.at(mark, reset_rows, 1)
    np.add.at(mark, ends, -1)
    return np.flatnonzero(np.cumsum(mark[:-1]) > 0)


@family("pcie_link_width", "pcie_link_width_max", "pcie_link_gen", "pcie_link_gen_max")
def pcie_link(ctx: FeatureContext) -> Columns:
    """The PCIe link's width and generation as shares of their maximum (a degraded link is below 1),
    and how much of its bandwidth share it lost within the week (a link trained narrow at boot
    and left so has lost nothing: a confounder, not a degrading link)."""
    out: Columns = {}
    names = ("pcie_link_width", "pcie_link_width_max", "pcie_link_gen", "pcie_link_gen_max")
    latest = [ctx.latest(c) for c in names]
    if all(x is not None for x in latest):
        lw, lwm, lg, lgm = latest
        assert lw is not None and lwm is not None and lg is not None and lgm is not None
        with np.errstate(invalid="ignore", divide="ignore"):
            now = (lw / lwm) * (lg / lgm)
        out["link_drop_7d"] = np.maximum(_week_share(ctx, names) - now, 0.0)
    for feat, now, most in (("link_width_ratio", "pcie_link_width", "pcie_link_width_max"),
                            ("link_gen_ratio", "pcie_link_gen", "pcie_link_gen_max")):  # fmt: skip
        cur, top = ctx.latest(now), ctx.latest(most)
        if cur is not None and top is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                out[feat] = cur / top
    return out


def _week_share(ctx: FeatureContext, names: tuple[str, ...]) -> np.ndarray:
    """Mean over the week of the link's bandwidth share (width and generation over their
    maxima); one cutoff reads only the week's rows, many take the whole columns."""
    win = ctx.q.window(WEEK)
    full = [ctx.f.col(c) for c in names] if win is None else []
    cols = [win.values(c) for c in names] if win is not None else [c for c in full if c is not None]
    if len(cols) != len(names):
        return ctx.nan
    w, wm, g, gm = cols
    with np.errstate(invalid="ignore", divide="ignore"):
        share = (w / wm) * (g / gm)
    if win is None:
        return ctx.window_means(share, WEEK, owned=True)[0]
    valid = ~np.isnan(share)
    return mean(win.sums(np.where(valid, share, 0.0)), win.sums(valid.astype(float)))


@family("xid")
def xid_counts(ctx: FeatureContext) -> Columns:
    """XIDs by code over 7 (and for some 30) days, and all other codes together."""
    # The history's xid is the last code within each interval. Codes are rare, so each is
    # counted from the positions of its rows.
    f, q = ctx.f, ctx.q
    raw = f.raw("xid")
    if raw is None:
        return {}
    nz_file = np.flatnonzero((raw >= 1) | (raw <= -1))  # rows whose code (as an integer) is not 0
    nz = f.sorted_positions(nz_file)
    by_pos = np.argsort(nz, kind="stable")
    nz = nz[by_pos]
    codes = np.nan_to_num(raw[nz_file[by_pos]].astype(np.float64)).astype(np.int64)
    out: Columns = {}
    for code in XID_FEATURES:
        rows = nz[codes == code]
        out[f"xid_{code}_7d"] = q.window_count(rows, WEEK)
        if code in XID_30D:
            out[f"xid_{code}_30d"] = q.window_count(rows, MONTH)
    out["xid_other_7d"] = q.window_count(nz[~np.isin(codes, XID_FEATURES)], WEEK)
    for code in XID_CONTEXT:
        out[f"xid_{code}_7d"] = q.window_count(nz[codes == code], WEEK)
    return out
