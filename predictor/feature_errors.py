"""Error features: ECC errors, row remapping, page retirement, PCIe replays and link, XIDs.

Each function is a feature family (`features.SPECS` names it for its features): it gets
the shared `FeatureContext` and returns its columns, leaving out those it has no data for.
"""

from __future__ import annotations

import numpy as np

from predictor.feature_context import Columns, FeatureContext, family
from predictor.feature_windows import DAY, MONTH, WEEK, WINDOWS, Sums

XID_FEATURES = (48, 63, 64, 79, 92, 94, 95)
"""XIDs counted one by one (the ECC, remap and off-bus codes of REFERENCE.md's table);
every other nonzero code counts in xid_other_7d."""
XID_30D = (48, 79)
"""XIDs also counted over 30 days."""
LATEST_AS_IS = (
    "remapped_rows_correctable", "remapped_rows_uncorrectable", "row_remap_pending", "row_remap_failure",
    "retired_pages_dbe", "retired_pages_pending",
)  # fmt: skip
"""Columns whose last reported value is a feature of the same name."""


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


@family("pcie_replay_count")
def pcie_replays(ctx: FeatureContext) -> Columns:
    """PCIe replays per hour, their growth, and how many samples saw new ones."""
    rep = ctx.counter("pcie_replay_count", windows=(DAY, WEEK))
    if rep is None:
        return {}
    out = {
        "replay_rate_1d": rep.sum(DAY) / (ctx.days(DAY) * 24),
        "replay_rate_7d": rep.sum(WEEK) / (ctx.days(WEEK) * 24),
    }
    out["replay_growth"] = (out["replay_rate_1d"] + 1.0) / (out["replay_rate_7d"] + 1.0)
    out["replay_active_hours_1d"] = rep.rising(DAY)
    return ctx.unknown_where_missing(rep, out)


@family("pcie_link_width", "pcie_link_width_max", "pcie_link_gen", "pcie_link_gen_max")
def pcie_link(ctx: FeatureContext) -> Columns:
    """The PCIe link's width and generation as shares of their maximum (a degraded link is below 1)."""
    out: Columns = {}
    for feat, now, most in (("link_width_ratio", "pcie_link_width", "pcie_link_width_max"),
                            ("link_gen_ratio", "pcie_link_gen", "pcie_link_gen_max")):  # fmt: skip
        cur, top = ctx.latest(now), ctx.latest(most)
        if cur is not None and top is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                out[feat] = cur / top
    return out


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
    return out
