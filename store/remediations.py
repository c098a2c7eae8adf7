"""The remediation loop's state: each GPU's way back, kept between passes (`service.remediation`).

A row is opened when a GPU's latest score asks for a reset or a reboot (`wanted`), moves through the
stages drain → remedy → verify (`REMEDIATION_STAGES`) and is closed as returned, rma or cancelled.
Every move is a conditional update (`move`: only from the stage the caller saw), so two replicas, or
a pass and an agent's report, never move one remediation twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy as sa

from core import remediation_metrics
from core.decisions import REMEDY_WHEN
from store.engine import Database, not_closed
from store.errors import NotFound
from store.schema import (
    REMEDIATION_RESULTS,
    REMEDIATION_STAGES,
    T_DECISIONS,
    T_GPUS,
    T_REMEDIATIONS,
    T_SCORES,
)
from store.validate import choice, paging, text, utc

REMEDIES_CARRIED = remediation_metrics.REMEDIES
"""The remedies the loop carries out; `replace` stays a human's (an RMA decision), `none` asks nothing."""


class RemediationRow(TypedDict):
    """One remediation (a row of `remediations`)."""

    id: int
    target: str
    hostname: str
    gpu_uuid: str
    gpu_index: int | None
    remedy: str
    due: str
    cause: str
    detected_at: datetime
    opened_at: datetime
    stage: str | None
    stage_at: datetime | None
    deadline: datetime | None
    remedied_at: datetime | None
    reboot: dict[str, Any] | None
    verified: dict[str, Any] | None
    detail: str | None
    attempts: int
    result: str | None
    closed_at: datetime | None


class WantedRemedy(TypedDict):
    """A GPU whose latest score asks for a remedy the loop carries out."""

    hostname: str
    gpu_uuid: str
    gpu_index: int | None
    remedy: str
    due: str
    cause: str
    """The score's remedy line ("remedy: reset now (XID 119, …)"), or the remedy itself when it has none."""
    detected_at: datetime
    """When it was first asked for: the active decision's start, else the score's time."""
    decision: str


def _cause(reasons: Sequence[str] | None, remedy: str, due: str) -> str:
    line = next((str(r) for r in reasons or () if str(r).startswith("remedy: ")), None)
    return line[len("remedy: ") :] if line else f"{remedy} {due}"


class Remediations:
    """The remediation part of the store."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def wanted(self) -> list[WantedRemedy]:
        """GPUs in service (not retired) whose latest score asks for a reset or a reboot."""
        g, s = T_GPUS.c, T_SCORES.c
        wanted_cols = (g.uuid, g.hostname, g.gpu_index, s.remedy, s.remedy_when, s.reasons, s.scored_at)
        d = sa.select(T_DECISIONS).where(not_closed(T_DECISIONS.c.state)).subquery("d")
        q = (
            sa.select(*wanted_cols, d.c.decision, d.c.created_at)
            .select_from(T_GPUS.join(T_SCORES, s.id == g.latest_score_id).outerjoin(d, d.c.gpu_uuid == g.uuid))
            .where(g.state != "retired", s.remedy.in_(REMEDIES_CARRIED))
            .order_by(g.hostname, g.uuid)
        )
        with self.db.tx() as conn:
            rows = conn.execute(q).all()
        out: list[WantedRemedy] = []
        for r in rows:
            due = r.remedy_when if r.remedy_when in REMEDY_WHEN else "now"
            cause = _cause(r.reasons, r.remedy, due)
            detected = utc(r.created_at or r.scored_at, "detected at")
            out.append(
                WantedRemedy(
                    hostname=r.hostname,
                    gpu_uuid=r.uuid,
                    gpu_index=r.gpu_index,
                    remedy=r.remedy,
                    due=due,
                    cause=cause,
                    decision=r.decision or "ok",
                    detected_at=detected,
                )
            )
        return out

    def open(self, *, target: str | None = None, hostname: str | None = None) -> list[RemediationRow]:
        """Open remediations (those of `target` and `hostname` when given), oldest first."""
        r = T_REMEDIATIONS.c
        q = sa.select(T_REMEDIATIONS).where(r.stage.is_not(None))
        if target is not None:
            q = q.where(r.target == target)
        if hostname is not None:
            q = q.where(r.hostname == text(hostname, "hostname"))
        return self._rows(q.order_by(r.opened_at, r.id))

    def get(self, remediation_id: int) -> RemediationRow:
        """One remediation; NotFound when there is none of that id."""
        rows = self._rows(sa.select(T_REMEDIATIONS).where(T_REMEDIATIONS.c.id == int(remediation_id)))
        if not rows:
            raise NotFound(f"remediation {remediation_id} not found")
        return rows[0]

    def page(
        self, *, hostname: str | None = None, open_only: bool = False, limit: int = 100, offset: int = 0
    ) -> tuple[list[RemediationRow], int]:
        """Remediations, newest first, and how many match."""
        paging(limit, offset)
        r = T_REMEDIATIONS.c
        where = sa.and_(sa.true())
        if hostname is not None:
            where = sa.and_(where, r.hostname == text(hostname, "hostname"))
        if open_only:
            where = sa.and_(where, r.stage.is_not(None))
        with self.db.tx() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(T_REMEDIATIONS).where(where)).scalar_one()
        q = sa.select(T_REMEDIATIONS).where(where).order_by(r.opened_at.desc(), r.id.desc()).limit(limit).offset(offset)
        return self._rows(q), int(total)

    def of_gpus(self, gpu_uuids: Sequence[str], *, since: datetime | None = None) -> dict[str, list[RemediationRow]]:
        """Each GPU's remediations opened since `since` (all when None), oldest first."""
        if not gpu_uuids:
            return {}
        r = T_REMEDIATIONS.c
        q = sa.select(T_REMEDIATIONS).where(r.gpu_uuid.in_(list(gpu_uuids)))
        if since is not None:
            q = q.where(r.opened_at >= utc(since, "since"))
        out: dict[str, list[RemediationRow]] = {}
        for row in self._rows(q.order_by(r.opened_at, r.id)):
            out.setdefault(row["gpu_uuid"], []).append(row)
        return out

    def closed(self, result: str) -> list[RemediationRow]:
        """The newest closed remediation per GPU that ended with `result` (returned, rma), oldest first."""
        r = T_REMEDIATIONS.c
        newest = (
            sa.select(sa.func.max(r.id))
            .where(r.result == choice(result, REMEDIATION_RESULTS, "result"))
            .group_by(r.gpu_uuid)
            .scalar_subquery()
        )
        return self._rows(sa.select(T_REMEDIATIONS).where(r.id.in_(newest)).order_by(r.closed_at, r.id))

    def create(self, values: Mapping[str, Any]) -> RemediationRow:
        """Open a remediation (stage `drain`, or the stage given); returns it."""
        opened = utc(values["opened_at"], "opened at")
        row = {
            "target": text(values["target"], "target"), "hostname": text(values["hostname"], "hostname"),
            "gpu_uuid": text(values["gpu_uuid"], "uuid", max_len=64), "gpu_index": values.get("gpu_index"),
            "remedy": choice(values["remedy"], REMEDIES_CARRIED, "remedy"),
            "due": choice(values["due"], REMEDY_WHEN, "due"), "cause": str(values["cause"]),
            "detected_at": utc(values["detected_at"], "detected at"), "opened_at": opened,
            "stage": choice(values.get("stage", "drain"), REMEDIATION_STAGES, "stage"),
            "stage_at": opened, "deadline": values.get("deadline"),
            "detail": values.get("detail"), "attempts": 0, "result": None, "closed_at": None,
        }  # fmt: skip
        with self.db.tx(write=True) as conn:
            new_id = conn.execute(sa.insert(T_REMEDIATIONS).returning(T_REMEDIATIONS.c.id), row).scalar_one()
        return self.get(new_id)

    def move(self, remediation_id: int, *, stage: str | None, values: Mapping[str, Any]) -> bool:
        """Set `values` on the remediation if it still stands at `stage` (None: closed); False, and nothing
        changed, when someone moved it first."""
        r = T_REMEDIATIONS.c
        if "stage" in values and values["stage"] is not None:
            choice(values["stage"], REMEDIATION_STAGES, "stage")
        if values.get("result") is not None:
            choice(values["result"], REMEDIATION_RESULTS, "result")
        cond = r.stage.is_(None) if stage is None else r.stage == stage
        q = sa.update(T_REMEDIATIONS).where(r.id == int(remediation_id), cond).values(**dict(values))
        with self.db.tx(write=True) as conn:
            return bool(conn.execute(q).rowcount)

    def returned_at(self) -> dict[str, datetime]:
        """Per GPU, when it was last returned to service after a verified remedy."""
        r = T_REMEDIATIONS.c
        q = sa.select(r.gpu_uuid, sa.func.max(r.closed_at)).where(r.result == "returned").group_by(r.gpu_uuid)
        with self.db.tx() as conn:
            return {u: utc(at, "closed at") for u, at in conn.execute(q).all() if at is not None}

    def gpu_state(self, gpu_uuid: str) -> str | None:
        """The GPU's state in the store (active, lost, retired); None for a GPU it does not know."""
        with self.db.tx() as conn:
            return conn.execute(sa.select(T_GPUS.c.state).where(T_GPUS.c.uuid == gpu_uuid)).scalar_one_or_none()

    def counts(self, now: datetime, *, target: str) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """`target`'s open remediations per (remedy, stage), and those past their deadline at `now`."""
        r = T_REMEDIATIONS.c
        late = sa.case((r.deadline < utc(now, "now"), 1), else_=0)
        q = sa.select(r.remedy, r.stage, sa.func.count(), sa.func.sum(late))
        q = q.where(r.stage.is_not(None), r.target == target)
        with self.db.tx() as conn:
            rows = conn.execute(q.group_by(r.remedy, r.stage)).all()
        return {(a, b): int(n) for a, b, n, _ in rows}, {(a, b): int(k or 0) for a, b, _, k in rows}

    def _rows(self, q: sa.Select[Any]) -> list[RemediationRow]:
        with self.db.tx() as conn:
            return [cast(RemediationRow, dict(m)) for m in conn.execute(q).mappings()]


__all__ = ["REMEDIES_CARRIED", "RemediationRow", "Remediations", "WantedRemedy"]
