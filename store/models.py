"""Risk models trained on the fleet's own history: stored archives, their cards, and the active one.

The store keeps a model as bytes (the skops archive `predictor.model.RiskModel.to_bytes` writes)
next to a JSON card (what it was trained on, how it scored, promote's comparison). It never
opens the archive: loading, with its checks of the types inside, is the predictor's job.

At most one model is active, enforced by a partial unique index; `activate` moves the
flag in one transaction. The scoring loop asks `active_version` every round, a one-row
read, and fetches the archive only when the answer changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from store.engine import Database
from store.errors import NotFound, StoreError
from store.schema import T_MODELS
from store.validate import paging, text, utc

VERSION_CHARS = 64
"""Longest version name (the column's length)."""
_ACTIVATE_LOCK = 4714
"""PostgreSQL advisory lock taken by `activate`: two promotions at once wait for each other
instead of one failing on the unique index (SQLite's writers are serial anyway)."""


class ModelInfo(TypedDict):
    """A stored model without its archive (a row of `models` less `data`)."""

    id: int
    version: str
    created_at: datetime
    size: int
    sha256: str
    card: dict[str, Any]
    active: bool
    activated_at: datetime | None


class StoredModel(ModelInfo):
    """A stored model with its skops archive."""

    data: bytes


_INFO_COLUMNS = [T_MODELS.c[k] for k in ModelInfo.__annotations__]


def _card(card: Any) -> dict[str, Any]:
    """The card as plain JSON (no NaN: PostgreSQL's JSON refuses it), or a StoreError."""
    if not isinstance(card, Mapping):
        raise StoreError(f"a model card must be an object, got {type(card).__name__}")
    try:
        return cast(dict[str, Any], json.loads(json.dumps(dict(card), allow_nan=False)))
    except (TypeError, ValueError) as err:
        raise StoreError(f"a model card must be plain JSON without NaN: {err}") from None


def default_version(created_at: datetime, sha256: str) -> str:
    """A version name that sorts by time and names the archive: 20261201-120000-1a2b3c4d."""
    return f"{created_at.astimezone(UTC):%Y%m%d-%H%M%S}-{sha256[:8]}"


def _info(row: Any) -> ModelInfo:
    out = dict(row)
    out["active"] = bool(out["active"])
    return cast(ModelInfo, out)


class Models:
    """Stored risk models: put, list, read, and which one is active."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def put(
        self,
        data: bytes,
        card: Mapping[str, Any],
        *,
        created_at: datetime | None = None,
        version: str | None = None,
    ) -> ModelInfo:
        """Store a model archive, inactive; the same archive again returns its stored record unchanged."""
        if not isinstance(data, bytes | bytearray | memoryview) or len(data) == 0:
            raise StoreError("a model archive must be non-empty bytes")
        blob = bytes(data)
        sha = hashlib.sha256(blob).hexdigest()
        at = utc(created_at or datetime.now(UTC), "created_at")
        name = text(version or default_version(at, sha), "model version", max_len=VERSION_CHARS)
        row = {"version": name, "created_at": at, "data": blob, "size": len(blob), "sha256": sha,
               "card": _card(card), "active": False, "activated_at": None}  # fmt: skip
        m = T_MODELS.c
        with self.db.tx(write=True) as conn:
            same = conn.execute(sa.select(*_INFO_COLUMNS).where(m.sha256 == sha)).mappings().first()
            if same is not None:
                return _info(same)
            if conn.execute(sa.select(m.id).where(m.version == name)).first() is not None:
                raise StoreError(f"model version {name!r} is already taken by another archive")
            new_id = conn.execute(sa.insert(T_MODELS).returning(m.id), row).scalar_one()
            return _info(conn.execute(sa.select(*_INFO_COLUMNS).where(m.id == new_id)).mappings().one())

    def find(self, *, limit: int = 100) -> list[ModelInfo]:
        """Stored models without their archives, newest first."""
        paging(limit, 0)
        m = T_MODELS.c
        q = sa.select(*_INFO_COLUMNS).order_by(m.created_at.desc(), m.id.desc()).limit(limit)
        with self.db.tx() as conn:
            return [_info(r) for r in conn.execute(q).mappings()]

    def info(self, version: str) -> ModelInfo:
        """One stored model without its archive; NotFound if there is none of that version."""
        with self.db.tx() as conn:
            return _find(conn, version)

    def get(self, version: str) -> StoredModel:
        """One stored model with its archive; NotFound if there is none of that version."""
        m = T_MODELS.c
        with self.db.tx() as conn:
            info = _find(conn, version)
            data = conn.execute(sa.select(m.data).where(m.id == info["id"])).scalar_one()
        return cast(StoredModel, {**info, "data": bytes(data)})

    def active_version(self) -> str | None:
        """The active model's version, or None: one short row, read by the scoring loop every round."""
        m = T_MODELS.c
        with self.db.tx() as conn:
            return conn.execute(sa.select(m.version).where(m.active.is_(True))).scalar_one_or_none()

    def active_info(self) -> ModelInfo | None:
        """The active model without its archive, or None when no stored model is active."""
        m = T_MODELS.c
        with self.db.tx() as conn:
            row = conn.execute(sa.select(*_INFO_COLUMNS).where(m.active.is_(True))).mappings().first()
        return None if row is None else _info(row)

    def active(self) -> StoredModel | None:
        """The active model with its archive, or None when no stored model is active."""
        version = self.active_version()
        return None if version is None else self.get(version)

    def update_card(self, version: str, card: Mapping[str, Any]) -> ModelInfo:
        """Replace a model's card (promote records its comparison there, refused or not)."""
        clean = _card(card)
        m = T_MODELS.c
        with self.db.tx(write=True) as conn:
            info = _find(conn, version)
            conn.execute(sa.update(T_MODELS).where(m.id == info["id"]).values(card=clean))
            return _find(conn, version)

    def activate(self, version: str, at: datetime, card: Mapping[str, Any] | None = None) -> ModelInfo:
        """Make `version` the one active model from `at` (its card replaced when given), in one transaction."""
        when = utc(at, "activated_at")
        clean = None if card is None else _card(card)
        m = T_MODELS.c
        with self.db.tx(write=True) as conn:
            if self.db.dialect == "postgresql":
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ACTIVATE_LOCK})")
            info = _find(conn, version)
            conn.execute(sa.update(T_MODELS).where(m.active.is_(True), m.id != info["id"]).values(active=False))
            values: dict[str, Any] = {"active": True, "activated_at": when}
            if clean is not None:
                values["card"] = clean
            conn.execute(sa.update(T_MODELS).where(m.id == info["id"]).values(**values))
            return _find(conn, version)

    def prune(self, keep: int, *, dry_run: bool = False) -> list[ModelInfo]:
        """Delete all stored models but the `keep` newest and the active one; returns those deleted
        (with `dry_run`, those that would be), newest first.

        An archive is tens of MB and `train --db` may add one a night. Runs under promote's lock
        (PostgreSQL), so a model being activated is never deleted under it.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise StoreError(f"keep must be a whole number of models >= 1, got {keep!r}")
        m = T_MODELS.c
        with self.db.tx(write=not dry_run) as conn:
            if self.db.dialect == "postgresql" and not dry_run:
                conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_ACTIVATE_LOCK})")
            rows = conn.execute(sa.select(*_INFO_COLUMNS).order_by(m.created_at.desc(), m.id.desc())).mappings()
            gone = [_info(r) for i, r in enumerate(rows) if i >= keep and not r["active"]]
            if gone and not dry_run:
                conn.execute(sa.delete(T_MODELS).where(m.id.in_([g["id"] for g in gone])))
        return gone


def _find(conn: Connection, version: str) -> ModelInfo:
    name = text(version, "model version", max_len=VERSION_CHARS)
    row = conn.execute(sa.select(*_INFO_COLUMNS).where(T_MODELS.c.version == name)).mappings().first()
    if row is None:
        raise NotFound(f"model {name} not found (`gpuhealth model list` shows the stored ones)")
    return _info(row)
