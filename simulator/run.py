"""Batch simulation: step a fleet through time and collect a history frame and failure labels."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from core import catalog
from core.history import metric_dtype
from simulator.config import FaultSpec
from simulator.fleet import DAY, FleetSim, SimConfig

HISTORY_COLUMNS: tuple[str, ...] = (
    *catalog.HISTORY_COLUMNS,
    "slowdown_temp_c",
    "power_limit_w",
    "energy_mj",
    "nvlink_crc_flit_errors",
)
"""What the simulator records: the fixed history columns plus a few the predictor uses (the
energy counter restarts when the driver reloads: a reset the link features see)."""

Progress = Callable[[int, int], None]


def simulate(
    config: SimConfig,
    days: float,
    interval_s: float = 3600.0,
    progress: Progress | None = None,
    faults: Sequence[tuple[float, FaultSpec]] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run the fleet for `days` and return (history frame, failures frame).

    `faults`: (hours after the start, fault) pairs injected on top of the drawn failures.
    """
    if days <= 0 or interval_s <= 0:
        raise ValueError("days and interval must be positive")
    steps = round(days * DAY / interval_s)
    if steps < 1:
        raise ValueError(f"{days} days at {interval_s:g}s intervals is less than one sample")
    cfg = config
    fleet = FleetSim(cfg)
    n = fleet.n
    cols = {c: np.empty((steps, n), dtype=metric_dtype(c)) for c in HISTORY_COLUMNS}
    valid = np.empty((steps, n), dtype=bool)
    uuid_code = np.empty((steps, n), dtype=np.int32)
    uuids: list[str] = []
    code_of: dict[str, int] = {}
    slot_code = np.empty(n, dtype=np.int32)
    rng = np.random.default_rng(cfg.seed + 1_000_003)  # sampling gaps: independent of the physics
    every = max(1, steps // 200)
    seen_repairs = -1
    pending = sorted(faults, key=lambda f: f[0])
    for t in range(steps):
        while pending and pending[0][0] * 3600.0 <= t * interval_s:
            fleet.inject(pending.pop(0)[1])
        fleet.step(interval_s)
        if fleet.repairs != seen_repairs:  # identities change only when a GPU is replaced
            seen_repairs = fleet.repairs
            for i, g in enumerate(fleet.gpus):
                code = code_of.get(g.uuid)
                if code is None:
                    code = code_of[g.uuid] = len(uuids)
                    uuids.append(g.uuid)
                slot_code[i] = code
        uuid_code[t] = slot_code
        vals = fleet.values()
        vals["xid"] = fleet.xid_now  # the history's xid: the last XID within this interval
        for c, arr in cols.items():
            arr[t] = vals[c]
        valid[t] = ~fleet.failed & (rng.random(n) >= cfg.domain.dropout)
        if progress is not None and (t % every == 0 or t == steps - 1):
            progress(t + 1, steps)
    frame = _assemble(fleet, cols, valid, uuid_code, uuids, interval_s)
    return frame, failures_frame(fleet)


def _assemble(
    fleet: FleetSim,
    cols: dict[str, np.ndarray],
    valid: np.ndarray,
    uuid_code: np.ndarray,
    uuids: list[str],
    interval_s: float,
) -> pd.DataFrame:
    steps, n = valid.shape
    keep = valid.ravel()
    t_idx = np.repeat(np.arange(steps), n)[keep]
    slot = np.tile(np.arange(n), steps)[keep]
    start_ns = np.int64(round(fleet.cfg.start * 1e9))
    ts = start_ns + (t_idx.astype(np.int64) + 1) * np.int64(round(interval_s * 1e9))
    hosts = pd.Categorical.from_codes(fleet.node[slot], categories=pd.Index(fleet.hostnames, dtype=str))
    names = sorted({m.name for m in fleet.models})
    model_code = np.array([names.index(m.name) for m in fleet.models])[slot]
    data: dict[str, object] = {
        "timestamp": pd.DatetimeIndex(ts.view("datetime64[ns]")).tz_localize("UTC"),
        "hostname": hosts,
        "gpu_uuid": pd.Categorical.from_codes(uuid_code.ravel()[keep], categories=pd.Index(uuids, dtype=str)),
        "gpu_index": fleet.slot[slot].astype(np.int32),
        "model_name": pd.Categorical.from_codes(model_code, categories=pd.Index(names, dtype=str)),
    }
    for c in list(cols):
        data[c] = cols.pop(c).ravel()[keep]  # pop: free each (steps x n) block as we go
    return pd.DataFrame(data)


def failures_frame(fleet: FleetSim) -> pd.DataFrame:
    """The failure labels of a run: gpu_uuid, failed_at, mode, hostname, xid (+ fault, onset)."""
    rows = [
        {
            "gpu_uuid": f.gpu_uuid,
            "failed_at": pd.Timestamp(f.failed_at, unit="s", tz="UTC"),
            "mode": f.mode,
            "hostname": f.hostname,
            "xid": f.xid,
            "fault": f.fault.value,
            "precursor_onset": pd.Timestamp(f.onset, unit="s", tz="UTC"),
        }
        for f in fleet.failures
    ]
    cols = ["gpu_uuid", "failed_at", "mode", "hostname", "xid", "fault", "precursor_onset"]
    out = pd.DataFrame(rows, columns=cols)
    # Typed even when empty, so that a fleet without failures still evaluates.
    for col in ("failed_at", "precursor_onset"):
        out[col] = pd.to_datetime(out[col], utc=True).astype("datetime64[ns, UTC]")
    return out.astype({"gpu_uuid": str, "mode": str, "hostname": str, "xid": np.int64, "fault": str})
