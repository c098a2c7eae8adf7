"""Snapshots as history-frame rows: how the service stores what the collector samples."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from collector.sampler import Snapshot
from core.catalog import HISTORY_COLUMNS, IDENTITY_COLUMNS, NODE_FINDING_COLUMNS

METRIC_COLUMNS = (frozenset(HISTORY_COLUMNS) | {"energy_mj", *NODE_FINDING_COLUMNS}) - frozenset(IDENTITY_COLUMNS)
"""What the service stores of a reading: the history columns, the energy counter, which
restarts when the driver reloads: the predictor's link features read that as a reset (the
models are trained with it; without it they would score without it, and say so), and the
fabric, NVLink and rail columns the node findings read (predictor.fabric)."""


def snapshot_rows(snap: Snapshot) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(sample rows, GPU identity/state updates) of one snapshot.

    A lost GPU gives no sample row (it has no values) but is marked `lost`, so the
    store keeps it listed (and keeps the time it was last seen: its `seen_at` here is
    when it was found missing); values outside the history columns are left out.
    """
    ts = datetime.fromtimestamp(snap.sample_time, UTC)
    rows: list[dict[str, Any]] = []
    gpus: list[dict[str, Any]] = []
    for r in snap.readings:
        info = r.info
        gpus.append({
            "uuid": info.uuid, "hostname": info.hostname, "gpu_index": info.index, "model_name": info.model_name,
            "serial": info.serial or None, "pci_bus_id": info.pci_bus_id or None, "ib_rail": r.rail or None,
            "state": "lost" if r.lost else "active", "seen_at": ts,
        })  # fmt: skip
        if r.lost:
            continue
        row: dict[str, Any] = {
            "timestamp": ts, "hostname": info.hostname, "gpu_uuid": info.uuid,
            "gpu_index": info.index, "model_name": info.model_name,
        }  # fmt: skip
        row.update((k, v) for k, v in r.values.items() if k in METRIC_COLUMNS)
        rows.append(row)
    return rows, gpus


class XidIntervals:
    """The XID a reading holds as the history keeps it: a reading holds DCGM's last-seen gauge (the last
    code ever seen, what /metrics exports: DCGM_FI_DEV_XID_ERRORS), the history the code seen within each
    interval (docs/history-format.md). A code counts where the gauge changed since the GPU's previous
    reading, as fleet mode's import reads dcgm-exporter's gauge (`core.history.xid_from_last_seen`);
    like it, the same code twice in a row is one, and a GPU's first reading tells nothing (0)."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def rows(self, snap: Snapshot) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """`snapshot_rows(snap)` with each row's `xid` as the code seen since the GPU's previous reading."""
        rows, gpus = snapshot_rows(snap)
        for row in rows:
            v = row.get("xid")
            if v is None or v != v:  # absent or NaN: nothing read, nothing to compare next time
                continue
            prev = self._last.get(row["gpu_uuid"])
            self._last[row["gpu_uuid"]] = v
            row["xid"] = v if prev is not None and v != prev and v > 0 else 0.0
        return rows, gpus


def snapshot_workloads(snap: Snapshot) -> tuple[dict[str, list[dict[str, str]]], datetime]:
    """The workloads on each GPU of a snapshot (an empty list where none; a MIG instance's carry its
    GPU_I_ID), and the time they were seen: what the service keeps per GPU (`Workloads.replace`)."""
    ts = datetime.fromtimestamp(snap.sample_time, UTC)
    out: dict[str, list[dict[str, str]]] = {r.info.uuid: [] for r in snap.readings if not r.lost}
    for (uuid, instance), sets in snap.workloads.items():
        if uuid in out:
            extra = {} if instance is None else {"GPU_I_ID": str(instance)}
            out[uuid].extend({**dict(labels), **extra} for labels in sets)
    return out, ts
