"""Snapshots as history-frame rows: how the service stores what the collector samples."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from collector.sampler import Snapshot
from core.catalog import HISTORY_COLUMNS, IDENTITY_COLUMNS

METRIC_COLUMNS = (frozenset(HISTORY_COLUMNS) | {"energy_mj"}) - frozenset(IDENTITY_COLUMNS)
"""What the service stores of a reading: the history columns, and the energy counter, which
restarts when the driver reloads: the predictor's link features read that as a reset (the
models are trained with it; without it they would score without it, and say so)."""


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
            "serial": info.serial or None, "pci_bus_id": info.pci_bus_id or None,
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
