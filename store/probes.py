"""Stress-probe results (GEMM, memtest, …): stored as the collectors report them, read per GPU or per window.

`ProbeResult` has exactly the columns of `probe_results` (tests/store/test_records.py checks),
so a row is handed over as it is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NotRequired, TypedDict, cast

import sqlalchemy as sa

from store.engine import Database
from store.errors import StoreError
from store.gpus import require_gpu
from store.schema import PROBE_STATUSES, T_PROBES
from store.validate import choice, optional_float, paging, text, utc


class ProbeResultRow(TypedDict):
    """A probe result to store (`Probes.add`)."""

    gpu_uuid: str
    ran_at: datetime
    test: str
    status: str
    value: NotRequired[float | None]
    unit: NotRequired[str | None]
    expected: NotRequired[float | None]
    ratio: NotRequired[float | None]
    duration_s: NotRequired[float | None]
    details: NotRequired[Mapping[str, Any] | None]


class ProbeResult(TypedDict):
    """A stored probe result (a row of `probe_results`)."""

    id: int
    gpu_uuid: str
    ran_at: datetime
    test: str
    status: str
    value: float | None
    unit: str | None
    expected: float | None
    ratio: float | None
    duration_s: float | None
    details: dict[str, Any] | None


def _probe_row(r: Any, i: int) -> dict[str, Any]:
    """A probe result checked and turned into a `probe_results` row."""
    if not isinstance(r, Mapping):
        raise StoreError(f"probe result {i}: expected a mapping, got {type(r).__name__}")
    details = r.get("details")
    if details is not None and not isinstance(details, Mapping):
        raise StoreError(f"probe result {i}: details must be an object")
    return {
        "gpu_uuid": text(r.get("gpu_uuid"), f"probe result {i}: gpu_uuid", max_len=64),
        "ran_at": utc(r.get("ran_at"), f"probe result {i}: ran_at"),
        "test": text(r.get("test"), f"probe result {i}: test", max_len=64),
        "status": choice(r.get("status"), PROBE_STATUSES, f"probe result {i}: status"),
        "unit": text(r.get("unit"), f"probe result {i}: unit", required=False, max_len=32),
        "details": None if details is None else dict(details),
        **{k: optional_float(r.get(k), f"probe result {i}: {k}") for k in ("value", "expected", "ratio", "duration_s")},
    }


class Probes:
    """Probe results, stored and read back."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, results: Sequence[ProbeResultRow | Mapping[str, Any]]) -> int:
        """Store probe results: gpu_uuid, ran_at, test, status, value, unit, expected, ratio, duration_s, details."""
        rows = [_probe_row(r, i) for i, r in enumerate(results)]
        if not rows:
            return 0
        with self.db.tx(write=True) as conn:
            conn.execute(sa.insert(T_PROBES), rows)
        return len(rows)

    def of(self, uuid: str, *, limit: int = 100) -> list[ProbeResult]:
        """A GPU's probe results, newest first; NotFound if the GPU is unknown."""
        paging(limit, 0)
        p = T_PROBES.c
        with self.db.tx() as conn:
            require_gpu(conn, uuid)
            rows = conn.execute(
                sa.select(T_PROBES).where(p.gpu_uuid == uuid).order_by(p.ran_at.desc(), p.id.desc()).limit(limit)
            ).mappings()
            return [cast(ProbeResult, dict(r)) for r in rows]

    def recent(self, since: datetime, until: datetime | None = None) -> list[ProbeResult]:
        """Every GPU's probe results that ran in [since, until], oldest first (for the scoring loop)."""
        p = T_PROBES.c
        q = sa.select(T_PROBES).where(p.ran_at >= since)
        if until is not None:
            q = q.where(p.ran_at <= until)
        with self.db.tx() as conn:
            return [cast(ProbeResult, dict(r)) for r in conn.execute(q.order_by(p.ran_at, p.id)).mappings()]
