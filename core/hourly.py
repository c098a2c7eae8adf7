"""Hours: the one roll-up of raw samples into hour rows, for the store, training and scoring.

Every feature is defined on hour rows, so a fleet sampled every 10 s, every 5 minutes or
every hour gives the model the same numbers (issue 15): an "hours with" feature counts
hours, a rate is per hour, a share is the mean of the hours' shares.

An hour row covers the samples in (H, H + 1 h] and is stored under `hour = H` (its start);
in a history frame it is stamped at its end, H + 1 h: a sample taken on the hour closes the
hour before it, so counters agree at every hour's end whatever the sampling interval, and a
cutoff at H + 1 h sees the whole hour and nothing after it. The hour a cutoff falls inside
(the raw tail) is stamped at its newest sample instead.

Per column: gauges are averaged; counters and state gauges (a link's width, a pending
remap, the clock-event bitmask) keep their last value in the hour (their state at its end);
`xid` keeps the last code seen in the hour (0 for none), as a collector sampling hourly
reports it. `thermal_throttle_share` is the share of the hour's samples whose clocks were
held back for heat (from the bitmask), and `<gauge>__n` columns count each
averaged column's values (weights when a late sample's hour is merged with a stored one).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from core import catalog, history
from core.catalog import IDENTITY_COLUMNS

HOUR_US = 3_600_000_000
HOUR_NS = HOUR_US * 1000
THERMAL_THROTTLE = 0x8 | 0x20 | 0x40
"""Clock-event reasons that mean heat: HW slowdown, SW thermal, HW thermal (NVML's bits)."""
SHARE = "thermal_throttle_share"
"""Derived column: the share of an hour's samples thermally throttled (from clocks_event_reasons)."""
LAST_GAUGES = frozenset(
    {
        "clocks_event_reasons",
        "pcie_link_gen",
        "pcie_link_gen_max",
        "pcie_link_width",
        "pcie_link_width_max",
        "retired_pages_pending",
        "row_remap_pending",
        "row_remap_failure",
        "recovery_action",
        "slowdown_temp_c",
        "shutdown_temp_c",
        "power_limit_w",
        "fb_total_mib",
        "fb_reserved_mib",
        "vgpu_license_status",
        "nvlink_links_down",
        "gpu_fabric_state",
    }
)
"""Gauges that are states, not levels: the hour keeps the last value (its state at the hour's end)."""
MEAN_COUNTERS = frozenset({"nvlink_bandwidth_mbps"})
"""Typed counter for dcgm-exporter's sake, but a rate (DCGM's NVLINK_BANDWIDTH_TOTAL): the hour averages it."""
HOURLY_ATTR = "gpuhealth_hourly"
"""`frame.attrs` key set on a frame that already holds hour rows (to_hours returns it as is)."""

for _name in LAST_GAUGES:
    if catalog.BY_NAME[_name].kind != "gauge":  # a typo or a counter here would average a state
        raise ValueError(f"LAST_GAUGES: {_name} is not a catalogue gauge")


def how(name: str) -> str:
    """How a column rolls up into its hour: 'mean', 'last' or 'code' (the last non-zero value)."""
    if name == "xid":
        return "code"
    f = catalog.BY_NAME.get(name)
    if name in LAST_GAUGES or (f is not None and f.kind == "counter" and name not in MEAN_COUNTERS):
        return "last"
    return "mean"


def hour_start(ts_us: np.ndarray) -> np.ndarray:
    """The hour (its start, µs) whose (H, H + 1 h] holds each time (µs since the epoch)."""
    return (ts_us - 1) // HOUR_US * HOUR_US


def throttle_flags(reasons: np.ndarray) -> np.ndarray:
    """Per sample: 1.0 thermally throttled, 0.0 not, NaN without a value (the bitmask as float)."""
    valid = ~np.isnan(reasons)
    hit = (np.nan_to_num(reasons).astype(np.int64) & THERMAL_THROTTLE) > 0
    return np.where(valid, hit.astype(np.float64), np.nan)


def rollup(uuids: np.ndarray, ts_us: np.ndarray, values: pd.DataFrame) -> pd.DataFrame:
    """Hour rows from raw samples: (GPU, sample time in µs, metric columns) in any order.

    Returns `gpu_uuid, hour, n, last_at`, the metric columns rolled up as `how` says,
    `thermal_throttle_share` when the samples carry clocks_event_reasons, and `<col>__n`
    (values counted) for every averaged column; sorted by (GPU, hour).
    """
    cols = list(values.columns)
    df = values.reset_index(drop=True).copy()
    if "clocks_event_reasons" in df.columns and SHARE not in df.columns:
        df[SHARE] = throttle_flags(df["clocks_event_reasons"].to_numpy(np.float64))
        cols.append(SHARE)
    df.insert(0, "ts", np.asarray(ts_us, dtype=np.int64))
    df.insert(0, "hour", hour_start(df["ts"].to_numpy()))
    df.insert(0, "gpu_uuid", np.asarray(uuids, dtype=object))
    ts_sorted = df["ts"].to_numpy()
    if len(ts_sorted) > 1 and bool(np.any(ts_sorted[1:] < ts_sorted[:-1])):  # groups keep row order: time order
        df = df.iloc[np.argsort(ts_sorted, kind="stable")]
    grouped = df.groupby(["gpu_uuid", "hour"], sort=True)
    means = [c for c in cols if how(c) == "mean"]
    lasts = [c for c in cols if how(c) == "last"]
    codes = [c for c in cols if how(c) == "code"]
    parts = [grouped.size().rename("n"), grouped["ts"].max().rename("last_at")]
    if means:
        parts.append(grouped[means].mean())
    if lasts:
        parts.append(grouped[lasts].last())  # last non-null: the value at the end of the hour
    if codes:  # the last code seen in the hour, as a collector sampling hourly reports it
        parts.append(df[codes].where(df[codes] != 0).groupby([df["gpu_uuid"], df["hour"]], sort=True).last())
    if means:
        parts.append(grouped[means].count().add_suffix("__n"))
    out = pd.concat(parts, axis=1).reset_index()
    for c in codes:  # hours without a code: 0 where the samples had values, NaN where none did
        out[c] = out[c].where(out[c].notna() | (grouped[c].count().to_numpy() == 0), 0.0)
    return out[["gpu_uuid", "hour", "n", "last_at", *cols, *(f"{c}__n" for c in means)]]


def is_hourly(frame: pd.DataFrame) -> bool:
    """Whether a history frame already holds hour rows: marked so, or every time on the hour."""
    if frame.attrs.get(HOURLY_ATTR):
        return True
    ts = frame["timestamp"]
    ns = (ts if ts.dt.unit == "ns" else ts.dt.as_unit("ns")).array.asi8
    return bool(len(ns)) and not bool(np.any(ns % HOUR_NS))


def to_hours(frame: pd.DataFrame, until: pd.Timestamp | None = None) -> pd.DataFrame:
    """A history frame as hour rows (the same columns, plus `thermal_throttle_share`).

    Rows are stamped at their hour's end; an hour reaching past `until` (default: the
    frame's newest sample) is stamped at its newest sample, and samples after `until` are
    left out. A frame sampled exactly on the
    hour is already one row per hour: it only gains the throttle share (no copy of its
    columns). The result is marked (`frame.attrs`), so a second call returns it as is.
    """
    if len(frame) and is_hourly(frame):
        out = frame
        if SHARE not in frame.columns and "clocks_event_reasons" in frame.columns:
            out = frame.assign(**{SHARE: throttle_flags(frame["clocks_event_reasons"].to_numpy(np.float64))})
        out.attrs[HOURLY_ATTR] = True
        return out
    if until is not None:  # samples after it belong to no row: an hour is cut at the cutoff, never leaks
        frame = frame[frame["timestamp"] <= pd.Timestamp(until)]
    ts = frame["timestamp"]
    ts_us = (ts if ts.dt.unit == "ns" else ts.dt.as_unit("ns")).array.asi8 // 1000
    metrics = [c for c in frame.columns if c not in IDENTITY_COLUMNS and not c.endswith("__n")]
    values = pd.DataFrame({c: frame[c].to_numpy(np.float64, na_value=np.nan) for c in metrics})
    uuid = frame["gpu_uuid"].astype(str).to_numpy(dtype=object)
    hours = rollup(uuid, ts_us, values)
    limit_us = (ts_us.max() if until is None else pd.Timestamp(until).value // 1000) if len(ts_us) else 0
    end = hours["hour"].to_numpy() + HOUR_US
    stamp = np.where(end <= limit_us, end, hours["last_at"].to_numpy())
    ident = _identity_at(frame, ts_us, hours)
    data: dict[str, object] = {
        "timestamp": pd.to_datetime(stamp * 1000, utc=True),
        "hostname": ident["hostname"],
        "gpu_uuid": pd.Categorical(hours["gpu_uuid"].astype(str)),
        "gpu_index": ident["gpu_index"].astype(np.int32),
        "model_name": ident["model_name"],
    }
    for c in [*metrics, *([SHARE] if SHARE in hours.columns and SHARE not in metrics else [])]:
        data[c] = hours[c].to_numpy().astype(history.metric_dtype(c))
    out = pd.DataFrame(data)
    out = out.sort_values("timestamp", kind="stable").reset_index(drop=True)
    for c in ("hostname", "model_name"):
        out[c] = out[c].astype("category")
    out.attrs[HOURLY_ATTR] = True
    return out


def _identity_at(frame: pd.DataFrame, ts_us: np.ndarray, hours: pd.DataFrame) -> pd.DataFrame:
    """hostname, gpu_index and model_name of each hour row: those of its newest sample."""
    idx = pd.DataFrame(
        {
            "gpu_uuid": frame["gpu_uuid"].astype(str).to_numpy(dtype=object),
            "hour": hour_start(ts_us),
            "ts": ts_us,
            "row": np.arange(len(frame)),
        }
    )
    newest = idx.sort_values(["gpu_uuid", "ts"], kind="stable").groupby(["gpu_uuid", "hour"], sort=True)["row"].last()
    rows = newest.to_numpy()  # the same (GPU, hour) order as `hours`
    return pd.DataFrame(
        {c: frame[c].to_numpy()[rows] if c == "gpu_index" else frame[c].astype(str).to_numpy()[rows]
         for c in ("hostname", "gpu_index", "model_name")}
    )  # fmt: skip
