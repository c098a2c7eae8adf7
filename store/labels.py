"""What happened to GPUs, from outside the scorer: failure and RMA records (the training labels) and
the alerts Alertmanager sends.

Stored rows come back as they are in their table; `Failure` and `Alert` have exactly the
table's columns (tests/store/test_records.py checks), so a row is handed over as it is read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NotRequired, TypedDict, cast

import numpy as np
import pandas as pd
import sqlalchemy as sa

from core import history
from core.history import FAILURE_MODES
from core.labels import HOST_LABELS
from store.engine import Database
from store.errors import NotFound, StoreError
from store.schema import ALERT_STATUSES, FAILURE_KINDS, T_ALERTS, T_FAILURES, T_GPUS
from store.validate import choice, clean, clean_or_none, paging, parse_time, string_map, text, utc

UNSET_ALERT_TIME = "0001-01-01T00:00:00Z"
"""Alertmanager's endsAt for an alert without an end."""
ALERT_COLUMN_CHARS = {
    c.name: c.type.length for c in T_ALERTS.columns if isinstance(c.type, sa.String) and c.type.length
}
"""The alert columns of limited length: a longer label value is cut to fit (it stays whole in `labels`)."""
_ALERT_UPDATES = ("received_at", "status", "alertname", "severity", "action", "gpu_uuid", "hostname", "labels",
                  "annotations", "ends_at", "generator_url", "group_key", "receiver")  # fmt: skip
"""What a later notification about the same alert instance changes."""


class Failure(TypedDict):
    """A failure or RMA record (a row of `failures`)."""

    id: int
    gpu_uuid: str
    hostname: str | None
    failed_at: datetime
    mode: str
    kind: str
    xid: int | None
    note: str | None
    recorded_at: datetime
    recorded_by: str | None


class AlertmanagerAlert(TypedDict):
    """One alert of an Alertmanager webhook notification (version 4), under Alertmanager's names.

    Times may be RFC 3339 text (the JSON body) or datetimes (a parsed one)."""

    status: str
    labels: Mapping[str, str]
    annotations: NotRequired[Mapping[str, str]]
    startsAt: datetime | str
    endsAt: NotRequired[datetime | str | None]
    generatorURL: NotRequired[str | None]
    fingerprint: NotRequired[str | None]


class Alert(TypedDict):
    """A stored alert instance (a row of `alerts`)."""

    id: int
    received_at: datetime
    fingerprint: str
    status: str
    alertname: str | None
    severity: str | None
    action: str | None
    gpu_uuid: str | None
    hostname: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: datetime
    ends_at: datetime | None
    generator_url: str | None
    group_key: str | None
    receiver: str | None


def _fingerprint(given: Any, labels: Mapping[str, str]) -> str:
    """The alert's fingerprint; one of our own (16 hex digits) when it is missing or too long to store."""
    fingerprint = clean(str(given or ""))
    if fingerprint and len(fingerprint) <= ALERT_COLUMN_CHARS["fingerprint"]:
        return fingerprint
    # Alertmanager always sends one of 16 hex digits; other senders may send none, or a long one
    return hashlib.sha256((fingerprint or json.dumps(labels, sort_keys=True)).encode()).hexdigest()[:16]


def _alert_row(a: Any, i: int, at: datetime, group_key: Any, receiver: Any) -> dict[str, Any]:
    """An alert checked and turned into an `alerts` row (long values cut to their column)."""
    if not isinstance(a, Mapping):
        raise StoreError(f"alert {i}: expected an object, got {type(a).__name__}")
    labels = string_map(a.get("labels"), f"alert {i}: labels")
    annotations = string_map(a.get("annotations"), f"alert {i}: annotations")
    status = choice(a.get("status"), ALERT_STATUSES, f"alert {i}: status")
    if a.get("startsAt") is None:
        raise StoreError(f"alert {i}: startsAt is required")
    starts = parse_time(a.get("startsAt"), f"alert {i}: startsAt")
    ends_raw = a.get("endsAt")
    ends = None if ends_raw in (None, "", UNSET_ALERT_TIME) else parse_time(ends_raw, f"alert {i}: endsAt")
    if ends is not None and ends.year <= 1:
        ends = None
    fingerprint = _fingerprint(a.get("fingerprint"), labels)
    instance = labels.get("instance")
    host = next(filter(None, map(labels.get, HOST_LABELS)), None) or (instance.rsplit(":", 1)[0] if instance else None)
    row: dict[str, Any] = {
        "received_at": at,
        "fingerprint": fingerprint,
        "status": status,
        "alertname": labels.get("alertname"),
        "severity": labels.get("severity"),
        "action": labels.get("action"),
        "gpu_uuid": labels.get("UUID") or labels.get("uuid") or labels.get("gpu_uuid"),
        "hostname": host,
        "labels": labels,
        "annotations": annotations,
        "starts_at": starts,
        "ends_at": ends,
        "generator_url": clean_or_none(a.get("generatorURL")),
        "group_key": clean_or_none(group_key),
        "receiver": clean_or_none(receiver),
    }
    for col, n in ALERT_COLUMN_CHARS.items():  # the same on SQLite, which does not enforce lengths
        if isinstance(row[col], str) and len(row[col]) > n:
            row[col] = row[col][:n]
    return row


class Labels:
    """Failure and RMA records, and Alertmanager's alerts."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add_failure(
        self,
        *,
        gpu_uuid: str,
        failed_at: datetime,
        mode: str,
        kind: str = "failure",
        hostname: str | None = None,
        xid: int | None = None,
        note: str | None = None,
        recorded_by: str | None = None,
    ) -> Failure:
        """Record a failure or RMA outcome (a training label); a GPU unknown here needs its hostname."""
        uuid = text(gpu_uuid, "gpu_uuid", max_len=64)
        row: dict[str, Any] = {
            "gpu_uuid": uuid,
            "failed_at": utc(failed_at, "failed_at"),
            "mode": choice(mode, FAILURE_MODES, "failure mode"),
            "kind": choice(kind, FAILURE_KINDS, "failure kind"),
            "hostname": text(hostname, "hostname", required=False),
            "note": text(note, "note", required=False, max_len=10_000),
            "recorded_by": text(recorded_by, "recorded_by", required=False),
            "recorded_at": datetime.now(UTC),
        }
        if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int | np.integer) or xid < 0):
            raise StoreError(f"xid must be a non-negative integer, got {xid!r}")
        row["xid"] = None if xid is None else int(xid)
        with self.db.tx(write=True) as conn:
            known = conn.execute(sa.select(T_GPUS.c.hostname).where(T_GPUS.c.uuid == uuid)).first()
            if known is None and row["hostname"] is None:
                raise NotFound(f"GPU {uuid} not found; give its hostname to record a GPU that never reported here")
            if row["hostname"] is None and known is not None:
                row["hostname"] = known.hostname
            new_id = conn.execute(sa.insert(T_FAILURES).returning(T_FAILURES.c.id), row).scalar_one()
            out = conn.execute(sa.select(T_FAILURES).where(T_FAILURES.c.id == new_id)).mappings().one()
        return cast(Failure, dict(out))

    def failures(self, *, since: datetime | None = None, limit: int = 1000) -> list[Failure]:
        """Failure and RMA records, newest first."""
        paging(limit, 0)
        f = T_FAILURES.c
        q = sa.select(T_FAILURES).order_by(f.failed_at.desc(), f.id.desc()).limit(limit)
        if since is not None:
            q = q.where(f.failed_at >= utc(since, "since"))
        with self.db.tx() as conn:
            return [cast(Failure, dict(r)) for r in conn.execute(q).mappings()]

    def failures_frame(self) -> pd.DataFrame:
        """All failure labels in the history format (gpu_uuid, failed_at, mode, hostname, xid) for training.

        Failure and RMA records both count; a record repeating (gpu_uuid, failed_at, mode) is dropped.
        """
        f = T_FAILURES.c
        with self.db.tx() as conn:
            rows = conn.execute(sa.select(f.gpu_uuid, f.failed_at, f.mode, f.hostname, f.xid).order_by(f.id)).all()
        frame = pd.DataFrame(
            {
                "gpu_uuid": [r.gpu_uuid for r in rows],
                "failed_at": pd.to_datetime([r.failed_at for r in rows], utc=True),
                "mode": [r.mode for r in rows],
                "hostname": [r.hostname for r in rows],
                "xid": pd.array([r.xid for r in rows], dtype="Int64"),
            }
        ).drop_duplicates(["gpu_uuid", "failed_at", "mode"])
        return history.validate_failures(frame, source="store failures")

    def add_alertmanager(self, payload: Mapping[str, Any], received_at: datetime) -> int:
        """Store an Alertmanager webhook (version 4) notification as it came (JSON); returns the alerts stored."""
        at = utc(received_at, "received_at")
        if not isinstance(payload, Mapping):
            raise StoreError("Alertmanager payload must be a JSON object")
        version = payload.get("version")
        if version is not None and str(version) != "4":
            raise StoreError(f"unsupported Alertmanager payload version {version!r}; expected 4")
        alerts = payload.get("alerts")
        if not isinstance(alerts, list):
            raise StoreError("Alertmanager payload has no alerts list")
        return self.add_alerts(alerts, at, group_key=payload.get("groupKey"), receiver=payload.get("receiver"))

    def add_alerts(
        self,
        alerts: Sequence[AlertmanagerAlert],
        received_at: datetime,
        *,
        group_key: str | None = None,
        receiver: str | None = None,
    ) -> int:
        """Store the alerts of one Alertmanager notification; returns the alerts stored.

        One row per alert instance (fingerprint, startsAt): a later notification about it (resolved,
        new annotations) updates that row. Alerts link to GPUs by their UUID label.
        """
        at = utc(received_at, "received_at")
        rows: dict[tuple[str, datetime], dict[str, Any]] = {}
        for i, a in enumerate(alerts):
            row = _alert_row(a, i, at, group_key, receiver)
            rows[(row["fingerprint"], row["starts_at"])] = row
        if not rows:
            return 0
        ins = self.db.insert(T_ALERTS)
        with self.db.tx(write=True) as conn:
            conn.execute(
                ins.on_conflict_do_update(
                    index_elements=["fingerprint", "starts_at"], set_={c: ins.excluded[c] for c in _ALERT_UPDATES}
                ),
                list(rows.values()),
            )
        return len(rows)

    def alerts(
        self, *, status: str | None = None, gpu_uuid: str | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[list[Alert], int]:
        """Stored alerts, most recently received first, and how many match."""
        paging(limit, offset)
        a = T_ALERTS.c
        where = sa.and_(sa.true())
        if status is not None:
            where = sa.and_(where, a.status == choice(status, ALERT_STATUSES, "alert status"))
        if gpu_uuid is not None:
            where = sa.and_(where, a.gpu_uuid == gpu_uuid)
        with self.db.tx() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(T_ALERTS).where(where)).scalar_one()
            rows = conn.execute(
                sa.select(T_ALERTS).where(where).order_by(a.received_at.desc(), a.id.desc()).limit(limit).offset(offset)
            ).mappings()
            return [cast(Alert, dict(r)) for r in rows], int(total)
