"""What runs on each GPU now: the collector's pod and job labels, kept per GPU (latest only).

The collector learns them from the kubelet's pod-resources API or Slurm's job mapping
(`collector.attribution`); the service keeps the newest set per GPU so that a decision, a node
and the actuator's audit can say which workloads a demote or drain affects. A GPU reported with
no workload has an empty list; a GPU never reported has no row.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import TypedDict

import sqlalchemy as sa

from store.engine import Database
from store.schema import T_WORKLOADS
from store.validate import string_map, text, utc

MAX_WORKLOADS = 64
"""Label sets kept per GPU (MIG: up to 7 instances, several containers each); more are cut off."""


class GpuWorkloads(TypedDict):
    """The workloads on one GPU and when the collector reported them."""

    workloads: list[dict[str, str]]
    seen_at: datetime


class Workloads:
    """The store's part for workloads per GPU."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def replace(self, per_gpu: Mapping[str, Sequence[Mapping[str, str]]], at: datetime) -> int:
        """Replace the workloads of these GPUs (an empty list: none now); returns the GPUs written."""
        when = utc(at, "workloads time")
        rows = [
            {"gpu_uuid": text(uuid, "GPU UUID", max_len=64),
             "workloads": [string_map(w, "workload labels") for w in list(sets)[:MAX_WORKLOADS]], "seen_at": when}
            for uuid, sets in per_gpu.items()
        ]  # fmt: skip
        if not rows:
            return 0
        ins = self.db.insert(T_WORKLOADS)
        stmt = ins.on_conflict_do_update(
            index_elements=["gpu_uuid"],
            set_={"workloads": ins.excluded.workloads, "seen_at": ins.excluded.seen_at},
            # a late writer never replaces a newer report
            where=T_WORKLOADS.c.seen_at <= ins.excluded.seen_at,
        )
        with self.db.tx(write=True) as conn:
            conn.execute(stmt, rows)
        return len(rows)

    def of(self, uuids: Collection[str]) -> dict[str, GpuWorkloads]:
        """The newest workloads of these GPUs (those ever reported)."""
        if not uuids:
            return {}
        w = T_WORKLOADS.c
        with self.db.tx() as conn:
            rows = conn.execute(sa.select(T_WORKLOADS).where(w.gpu_uuid.in_(list(uuids)))).mappings().all()
        return {r["gpu_uuid"]: GpuWorkloads(workloads=list(r["workloads"]), seen_at=r["seen_at"]) for r in rows}
