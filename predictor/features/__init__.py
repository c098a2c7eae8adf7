"""Features: from a history frame and cutoff times, one row per GPU and cutoff.

Only data at or before each cutoff is used. `SPECS` is the one table of features: each
row names the feature, what it means, its failure mode, the windows it reads and the
family (a function) that computes it. Families compute a few features together from a
shared `FeatureContext` and live by signal in `features.errors` (ECC, remaps, retired
pages, PCIe, XIDs) and `features.telemetry` (temperatures, power, throttling, peers,
reporting); the history they read is ordered once (`features.frame`) and every window is
a difference of running sums (`features.windows`), so thousands of cutoffs cost little
more than one. Adding a feature: a row here and its column in its family's function.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from core import hourly
from core.history import BUS_IDS_ATTR, BusIds, HistoryError, all_nan
from predictor.features.context import Family, FeatureContext
from predictor.features.errors import (
    XID_FEATURES,
    dbe_counts,
    latest_values,
    new_remaps,
    pcie_link,
    pcie_replays,
    retired_pages,
    sbe_rates,
    xid_counts,
)
from predictor.features.frame import OrderedFrame
from predictor.features.heat import heat, memory_spread, node_relative_heat
from predictor.features.history import repeat_offenders
from predictor.features.telemetry import peers, power_use, reporting, thermal, throttle_shares, violations
from predictor.features.windows import Queries

STALE_S = 86400
"""A GPU whose last sample is older than this at the cutoff is not scored (it left)."""
MODES = ("ecc", "thermal", "pcie", "any")
XID_RISING = (48, 63, 64, 79, 92, 94, 95)
"""XIDs whose count never lowers risk: every one of them is an error of the GPU or its memory."""
WINDOW_NAMES = ("6h", "1d", "7d", "30d", "60d", "180d", "last", "all")
LANES = min(2, len(os.sched_getaffinity(0)))
"""Threads the feature families run in: two where the process may use two cores. The heat families
are about half of the work, so a third lane would shorten little and hold more arrays at once."""
LANE_MIN_ROWS = 300_000
"""Hour rows below which the families run in one thread unless told otherwise: on small arrays their
Python and the GIL outweigh numpy's work (24,000 rows: 0.085 s in one lane, 0.11 s in two; 143,000:
0.135 and 0.142 s; 713,000: 0.37 and 0.28 s)."""


@dataclass(frozen=True)
class FeatureSpec:
    """One feature: its name, what it means (for reasons), unit, mode, windows and family."""

    name: str
    label: str
    unit: str
    mode: str
    """The failure mode it speaks to: ecc, thermal, pcie or any."""
    window: str
    """What it reads: 6h, 1d, 7d, 30d, 60d, 180d, last (the latest value) or all (the GPU's whole
    history); a comparison names both sides, e.g. 1d/30d."""
    family: Family
    """The function that computes it (with the other features of its family)."""
    monotonic: int = 0
    """1: more of it never lowers its head's risk; -1: less of it never does (a link's width);
    0: no constraint. Physics, imposed on the trees (`monotonic_cst`)."""
    head: bool = True
    """Whether the risk heads learn from it (False: context for reasons and findings only)."""


# name, label (reasons), unit, mode, window, family[, monotonic][, head]
# `monotonic` 1: more of it never lowers its head's risk (physics); -1: less of it never
# does. `head=False`: computed (for reasons, the node finding and the API) but no head
# learns from it: raw °C, watts and ages mean different things on different fleets
# (issue 14), so the heads see heat only in units of the GPU's own variability and
# against its node.
SPECS: tuple[FeatureSpec, ...] = (
    # ECC / HBM
    FeatureSpec("sbe_rate_1d", "SBE rate", "/day", "ecc", "1d", sbe_rates, 1),
    FeatureSpec("sbe_rate_7d", "SBE rate (7 d)", "/day", "ecc", "7d", sbe_rates, 1),
    FeatureSpec("sbe_rate_30d", "SBE rate (30 d)", "/day", "ecc", "30d", sbe_rates, 1),
    FeatureSpec("sbe_growth", "SBE rate vs its 7-day average", "x", "ecc", "1d/7d", sbe_rates),
    FeatureSpec("sbe_active_hours_7d", "hours with new SBEs in 7 days", "h", "ecc", "7d", sbe_rates, 1),
    FeatureSpec("sbe_active_hours_1d", "hours with new SBEs in 1 day", "h", "ecc", "1d", sbe_rates, 1),
    FeatureSpec("dbe_7d", "DBEs in 7 days", "", "ecc", "7d", dbe_counts, 1),
    FeatureSpec("dbe_30d", "DBEs in 30 days", "", "ecc", "30d", dbe_counts, 1),
    FeatureSpec("remapped_rows_correctable", "correctable remapped rows", "", "ecc", "last", latest_values, 1),
    FeatureSpec("remapped_rows_uncorrectable", "uncorrectable remapped rows", "", "ecc", "last", latest_values, 1),
    FeatureSpec("remaps_new_7d", "rows remapped in 7 days", "", "ecc", "7d", new_remaps, 1),
    FeatureSpec("row_remap_pending", "remap pending a reset", "", "ecc", "last", latest_values),
    FeatureSpec("row_remap_failure", "row remap failure", "", "ecc", "last", latest_values, 1),
    FeatureSpec("retired_pages", "retired pages (SBE+DBE)", "", "ecc", "last", retired_pages, 1),
    FeatureSpec("retired_pages_dbe", "retired pages (DBE)", "", "ecc", "last", latest_values, 1),
    FeatureSpec("retired_pages_dbe_new_7d", "DBE pages retired in 7 days", "", "ecc", "7d", retired_pages, 1),
    FeatureSpec("retired_pages_pending", "page retirement pending", "", "ecc", "last", latest_values),
    # The driver's own recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): for the rules, not learned from.
    FeatureSpec("recovery_action", "driver's recovery action", "", "any", "last", latest_values, head=False),
    # thermal: what the heads see
    FeatureSpec(
        "heat_excess_z",
        "heat beyond its power (6 h) over both its own 30 days and its node, in its own σ",
        "σ",
        "thermal",
        "6h/30d",
        heat,
        1,
    ),
    FeatureSpec(
        "heat_excess_z_1d",
        "heat beyond its power (1 d) over both its own 30 days and its node, in its own σ",
        "σ",
        "thermal",
        "1d/30d",
        heat,
        1,
    ),
    FeatureSpec(
        "mem_spread_z",
        "memory-core spread vs its own 30 days, in its own σ",
        "σ",
        "thermal",
        "6h/30d",
        memory_spread,
        1,
    ),
    FeatureSpec(
        "throttle_new_1d",
        "thermal throttling (1 d) beyond its own 30 days and its node's",
        "",
        "thermal",
        "1d/30d",
        throttle_shares,
        1,
    ),
    # thermal: context (reasons, the node finding, the API), not learned from
    FeatureSpec(
        "temp_excess_vs_node_z",
        "heat beyond its power (6 h) vs its node, in its own σ",
        "σ",
        "thermal",
        "6h/30d",
        heat,
        head=False,
    ),
    FeatureSpec(
        "temp_excess_vs_node_z_1d",
        "heat beyond its power (1 d) vs its node, in its own σ",
        "σ",
        "thermal",
        "1d/30d",
        heat,
        head=False,
    ),
    FeatureSpec(
        "temp_excess_own_z",
        "heat beyond its power (6 h) vs its own 30 days",
        "σ",
        "thermal",
        "6h/30d",
        heat,
        head=False,
    ),
    FeatureSpec(
        "node_heat_z", "its node's median heat vs their own 30 days", "σ", "thermal", "6h/30d", heat, head=False
    ),
    FeatureSpec(
        "heat_vs_node_own_z",
        "heat over its node's (6 h) beyond its power's, vs its own 30 days of that, in its own σ",
        "σ",
        "thermal",
        "6h/30d",
        node_relative_heat,
        head=False,
    ),
    FeatureSpec(
        "heat_load_share",
        "power (6 h) as a share of its baseline's, the load its heat is judged against",
        "",
        "thermal",
        "6h/30d",
        heat,
        head=False,
    ),
    FeatureSpec(
        "throttle_share_1d",
        "share of samples thermally throttled (1 d)",
        "",
        "thermal",
        "1d",
        throttle_shares,
        head=False,
    ),
    FeatureSpec(
        "throttle_share_7d",
        "share of samples thermally throttled (7 d)",
        "",
        "thermal",
        "7d",
        throttle_shares,
        head=False,
    ),
    FeatureSpec(
        "thermal_violation_share_1d",
        "share of time in thermal violation (1 d)",
        "",
        "thermal",
        "1d",
        violations,
        head=False,
    ),
    FeatureSpec("node_hot_gpus", "GPUs of its node running hot (>= 2 σ)", "", "thermal", "6h/30d", heat, head=False),
    FeatureSpec("node_gpus", "GPUs of its node scored", "", "thermal", "last", heat, head=False),
    FeatureSpec("temp_mean_1d", "core temperature (1 d mean)", "C", "thermal", "1d", thermal, head=False),
    FeatureSpec(
        "temp_vs_own_30d", "core temperature vs its own 30-day mean", "C", "thermal", "1d/30d", thermal, head=False
    ),
    FeatureSpec("temp_vs_peers_1d", "core temperature vs same-model GPUs", "C", "thermal", "1d", peers, head=False),
    FeatureSpec("temp_vs_node_1d", "core temperature vs its node", "C", "thermal", "1d", peers, head=False),
    FeatureSpec("memtemp_mean_1d", "memory temperature (1 d mean)", "C", "thermal", "1d", thermal, head=False),
    FeatureSpec("mem_minus_core_1d", "memory minus core temperature", "C", "thermal", "1d", thermal, head=False),
    FeatureSpec(
        "mem_minus_core_vs_own", "memory-core spread vs its own 30 days", "C", "thermal", "1d/30d", thermal, head=False
    ),
    FeatureSpec("temp_trend_7d", "core temperature 1 d vs 7 d mean", "C", "thermal", "1d/7d", thermal, head=False),
    FeatureSpec("power_violation_share_1d", "share of time in power violation (1 d)", "", "any", "1d", violations),
    # PCIe
    FeatureSpec("replay_rate_1d", "PCIe replay rate", "/h", "pcie", "1d", pcie_replays, 1),
    FeatureSpec("replay_rate_7d", "PCIe replay rate (7 d)", "/h", "pcie", "7d", pcie_replays, 1),
    FeatureSpec("replay_growth", "PCIe replay rate vs its 7-day average", "x", "pcie", "1d/7d", pcie_replays),
    # Raw counts of replaying hours mean different things on links that replay now and then all
    # their life and on those that never do: the heads see them against the GPU's own habit.
    FeatureSpec(
        "replay_active_hours_1d", "hours with new PCIe replays in 1 day", "h", "pcie", "1d", pcie_replays, head=False
    ),
    FeatureSpec(
        "replay_active_hours_6h", "hours with new PCIe replays in 6 hours", "h", "pcie", "6h", pcie_replays, head=False
    ),
    FeatureSpec(
        "replay_surprise_1d",
        "hours with new PCIe replays in 1 day vs its own month before the last week",
        "σ",
        "pcie",
        "1d/30d",
        pcie_replays,
        1,
    ),
    FeatureSpec(
        "replay_surprise_6h",
        "hours with new PCIe replays in 6 hours vs its own month before the last week",
        "σ",
        "pcie",
        "6h/30d",
        pcie_replays,
        1,
    ),
    FeatureSpec(
        "replays_per_active_hour_7d", "PCIe replays per hour that saw any (7 d)", "", "pcie", "7d", pcie_replays
    ),
    # A reset is the node's event (a reboot, a driver reload), not the link's health: context only.
    FeatureSpec(
        "link_retrained_1d", "resets (its link trained again) in 1 day", "", "pcie", "1d", pcie_replays, head=False
    ),
    FeatureSpec(
        "node_replaying_gpus_6h", "other GPUs of its node with new replays in 6 h", "", "pcie", "6h", pcie_replays
    ),
    FeatureSpec("link_width_ratio", "PCIe link width / max", "", "pcie", "last", pcie_link, -1),
    FeatureSpec("link_gen_ratio", "PCIe link generation / max", "", "pcie", "last", pcie_link, -1),
    FeatureSpec("link_drop_7d", "PCIe bandwidth share lost within 7 days", "", "pcie", "7d", pcie_link, 1),
    # XID by code and class
    *(
        FeatureSpec(f"xid_{c}_7d", f"XID {c} in 7 days", "", "any", "7d", xid_counts, int(c in XID_RISING))
        for c in XID_FEATURES
    ),
    FeatureSpec("xid_79_30d", "XID 79 (fell off the bus) in 30 days", "", "any", "30d", xid_counts, 1),
    FeatureSpec("xid_48_30d", "XID 48 (DBE) in 30 days", "", "ecc", "30d", xid_counts, 1),
    FeatureSpec("xid_other_7d", "other XIDs in 7 days", "", "any", "7d", xid_counts),
    # GSP errors for the rules (their resolution is a reset); the heads see them in xid_other_7d.
    FeatureSpec("xid_119_7d", "XID 119 (GSP RPC timeout) in 7 days", "", "any", "7d", xid_counts, head=False),
    FeatureSpec("xid_120_7d", "XID 120 (GSP error) in 7 days", "", "any", "7d", xid_counts, head=False),
    # power and use
    FeatureSpec("power_mean_1d", "power (1 d mean)", "W", "any", "1d", power_use, head=False),
    FeatureSpec("power_vs_peers_1d", "power vs same-model GPUs at their load", "W", "any", "1d", peers, head=False),
    FeatureSpec("util_mean_1d", "utilisation (1 d mean)", "%", "any", "1d", power_use),
    # the GPU's and its node's record (repeat offenders)
    FeatureSpec("node_failures_30d", "failures recorded on its node in 30 days", "", "any", "30d", repeat_offenders, 1),
    FeatureSpec(
        "node_failures_180d", "failures recorded on its node in 180 days", "", "any", "180d", repeat_offenders, 1
    ),
    FeatureSpec(
        "slot_failures_180d",
        "failures recorded in its slot (this GPU or the one before) in 180 days",
        "",
        "any",
        "180d",
        repeat_offenders,
        1,
    ),
    # A slot that keeps losing GPUs: named in the reasons (`remedy.slot_lines`), not learned from.
    FeatureSpec(
        "slot_gpus_failed_60d",
        "GPUs with a failure recorded in its slot (this one or those before) in 60 days",
        "",
        "any",
        "60d",
        repeat_offenders,
        head=False,
    ),
    # data coverage
    FeatureSpec("coverage_1d", "share of expected samples present (1 d)", "", "any", "1d/7d", reporting, head=False),
    FeatureSpec("age_days", "days since the GPU first reported", "d", "any", "all", reporting, head=False),
)
FEATURES: tuple[str, ...] = tuple(s.name for s in SPECS)
BY_NAME = {s.name: s for s in SPECS}
USED_COLUMNS = tuple(sorted({c for s in SPECS for c in s.family.inputs}))
"""History columns the features read; a frame may lack any of them (the features are NaN)."""


def _check(specs: Sequence[FeatureSpec]) -> None:
    """Refuse a table with a repeated name, an unknown mode or an unknown window."""
    names = [s.name for s in specs]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"features named twice: {repeated}")
    for s in specs:
        if s.mode not in MODES or not set(s.window.split("/")) <= set(WINDOW_NAMES):
            raise ValueError(f"feature {s.name}: mode {s.mode!r} or window {s.window!r} is not one we know")


_check(SPECS)


def build_features(
    frame: pd.DataFrame,
    cutoffs: pd.Timestamp | Sequence[pd.Timestamp] | pd.DatetimeIndex,
    stale_s: int = STALE_S,
    failures: pd.DataFrame | None = None,
    lanes: int | None = None,
) -> pd.DataFrame:
    """Features of every GPU still reporting at each cutoff, using only data up to it.

    The history is read as hour rows (`core.hourly.to_hours`; a frame already on the hour is
    used as it is): a feature counts hours, a rate is per hour, whatever the sampling interval.

    `failures`: the failures and RMAs recorded so far (gpu_uuid, hostname, failed_at; e.g. the
    store's or a simulation's); only those before each cutoff count (repeat offenders).
    `lanes`: threads the feature families run in (`FeatureContext.run_all`; default LANES, or one
    for fewer than LANE_MIN_ROWS hour rows); the values are the same whatever the number.

    Returns one row per (GPU, cutoff) with the identity columns `gpu_uuid, hostname,
    gpu_index, model_name, cutoff, last_seen` followed by FEATURES (NaN where the
    history lacks the columns a feature needs); the frame's bus ids (`history.BUS_IDS_ATTR`), if
    any, ride along in its `attrs`.
    """
    cuts = pd.DatetimeIndex([cutoffs] if isinstance(cutoffs, pd.Timestamp) else cutoffs)
    if cuts.tz is None:
        cuts = cuts.tz_localize("UTC")
    cuts = cuts.tz_convert("UTC").as_unit("ns")  # pandas may hand out us or s resolution
    # Every feature is defined on hour rows (core.hourly): the same numbers at any sampling rate.
    hours = hourly.to_hours(frame, until=cuts.max() if len(cuts) == 1 else None) if len(frame) else frame
    buses = frame.attrs.get(BUS_IDS_ATTR)  # the GPUs' bus ids: their slots (`features.slots`), and the reasons'
    if buses:
        buses = buses if isinstance(buses, BusIds) else BusIds(buses)  # shared, never deep-copied by pandas
        hours.attrs[BUS_IDS_ATTR] = buses
    f = OrderedFrame(hours)
    cut_s = (cuts.asi8 - f.t0_ns) // 1_000_000_000
    # Pairs (GPU, cutoff) where the GPU had reported by the cutoff and not gone stale.
    g_grid, c_grid = np.meshgrid(np.arange(len(f.gpu_codes)), np.arange(len(cuts)), indexing="ij")
    g_idx, c_idx = g_grid.ravel(), c_grid.ravel()
    c = cut_s[c_idx]
    last_seen = Queries(f, g_idx, c).last_seen()
    keep = ~np.isnan(last_seen) & (c - last_seen <= stale_s)
    if not keep.any():
        first = pd.Timestamp(f.t0_ns, tz="UTC")
        raise HistoryError(
            f"no GPU has samples within {stale_s / 3600:g} h before the cutoff(s) "
            f"{cuts.min().isoformat()}..{cuts.max().isoformat()} (data begins {first.isoformat()})"
        )
    q = Queries(f, g_idx[keep], c[keep])
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
    # Each family runs once; big per-row arrays live only while their family runs.
    ctx = FeatureContext(f, q, ident, {s.name: s.family for s in SPECS}, failures)
    done = ctx.run_all((LANES if f.n >= LANE_MIN_ROWS else 1) if lanes is None else lanes)
    feats = pd.DataFrame({name: done[name] for name in FEATURES}, columns=list(FEATURES))
    out = pd.concat([ident, feats], axis=1)
    if buses:
        out.attrs[BUS_IDS_ATTR] = buses
    return out


def missing_inputs(frame: pd.DataFrame) -> list[str]:
    """History columns the features would use that this frame lacks or holds only NaN in."""
    return [c for c in USED_COLUMNS if c not in frame.columns or _all_missing(frame[c])]


def _all_missing(s: pd.Series) -> bool:
    """Whether a column holds no value; a float column with a value near its end answers at once."""
    if s.dtype in (np.float32, np.float64):
        return all_nan(s.to_numpy())
    return bool(s.isna().all())


def feature_label(name: str) -> FeatureSpec:
    """The spec of a feature (for reasons)."""
    return BY_NAME[name]


def iter_specs(mode: str) -> Iterable[FeatureSpec]:
    """Features a mode's head learns from: its mode's and the general ones."""
    return (s for s in SPECS if s.mode in (mode, "any") and s.head)
