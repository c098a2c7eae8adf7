"""What the actuator reads and writes: active decisions by node, its audit, per-node controls, the breaker.

The actuator's truth about a node is the scheduler's (it reads it every pass); the store keeps only
what the scheduler cannot: the audit of every planned and applied action, an operator's hold or
release, the settle clock of a node being lowered, values to put back (the Slurm weight), and the
breaker, which must stay open across restarts until a person resets it.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.decisions import DECISIONS
from store.engine import Database, not_closed
from store.schema import (
    ACTION_RESULTS,
    REMEDIATION_ACTIONS,
    T_ACTIONS,
    T_ACTUATOR_NODES,
    T_ACTUATOR_STATE,
    T_DECISIONS,
    T_GPUS,
    T_NODES,
)
from store.validate import choice, paging, text, utc


class ActiveDecision(TypedDict):
    """A GPU's active decision with what the actuator needs: where the GPU is and why."""

    hostname: str
    gpu_uuid: str
    gpu_index: int | None
    decision: str
    reasons: list[str]
    created_at: datetime
    """When the decision took this value: an operator's release covers decisions older than it."""


class ActionRow(TypedDict):
    """One audited action (a row of `actions`)."""

    id: int
    at: datetime
    target: str
    mode: str
    hostname: str
    action: str
    from_state: str
    to_state: str
    why: str
    gpu_uuid: str | None
    gpu_index: int | None
    result: str
    error: str | None
    workloads: list[str] | None
    escalates: bool


class NodeControl(TypedDict):
    """What the actuator keeps per node (a row of `actuator_nodes`)."""

    hostname: str
    held: bool
    held_by: str | None
    held_at: datetime | None
    released_at: datetime | None
    released_by: str | None
    lowering_since: datetime | None
    lowering_to: str | None
    saved: dict[str, Any] | None


class BreakerState(TypedDict):
    """The breaker of one target (a row of `actuator_state`)."""

    target: str
    breaker_open: bool
    opened_at: datetime | None
    reason: str | None
    reset_at: datetime | None
    reset_by: str | None


class Spend(TypedDict):
    """What `Actuation.spend` allowed."""

    breaker_open: bool
    """The breaker was open already (this pass or another replica opened it): every step is refused."""
    reserved: dict[str, int]
    """Hostname -> the audit row written for its step (`finish` says how it ended)."""
    refused: list[str]
    """Hostnames past the bound, in order."""
    opened: bool
    """This spend opened the breaker."""


_ACTION_COLUMNS = tuple(c.name for c in T_ACTIONS.columns if c.name != "id")
_NEW_ACTION = ("at", "target", "mode", "hostname", "action", "from_state", "to_state", "why", "result")
BREAKER_LOCK = 4714
"""The first key of the breaker's PostgreSQL advisory lock (the second is the target's); 4713 is the migrations'
single-key lock, a key space of its own."""


def _action(r: Mapping[str, Any]) -> dict[str, Any]:
    """An audit row checked, with every column (an executemany takes its columns from the first row only)."""
    missing = [k for k in _NEW_ACTION if r.get(k) is None]
    if missing:
        raise ValueError(f"action for {r.get('hostname')!r} lacks {', '.join(missing)}")
    row = {c: r.get(c) for c in _ACTION_COLUMNS}
    row["at"] = utc(row["at"], "action time")
    row["result"] = choice(row["result"], ACTION_RESULTS, "action result")
    row["from_state"] = choice(row["from_state"], DECISIONS, "from state")
    row["to_state"] = choice(row["to_state"], DECISIONS, "to state")
    row["escalates"] = bool(row["escalates"])
    return row


class Actuation:
    """The actuator's part of the store."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def active_decisions(self) -> list[ActiveDecision]:
        """Every active decision of a GPU still in service (a retired GPU's decision acts on nothing)."""
        d, g = T_DECISIONS.c, T_GPUS.c
        q = (
            sa.select(g.hostname, d.gpu_uuid, g.gpu_index, d.decision, d.reasons, d.created_at)
            .join(T_GPUS, g.uuid == d.gpu_uuid)
            .where(not_closed(d.state), g.state != "retired")
            .order_by(g.hostname, d.gpu_uuid)
        )
        with self.db.tx() as conn:
            rows = conn.execute(q).all()
        return [
            ActiveDecision(
                hostname=r.hostname,
                gpu_uuid=r.gpu_uuid,
                gpu_index=r.gpu_index,
                decision=r.decision,
                reasons=list(r.reasons or []),
                created_at=r.created_at,
            )
            for r in rows
        ]

    def knows(self, hostname: str) -> bool:
        """Whether the store knows this node (a GPU of it was seen): `GET /v1/nodes/{hostname}` finds it."""
        with self.db.tx() as conn:
            q = sa.select(T_NODES.c.hostname).where(T_NODES.c.hostname == text(hostname, "hostname"))
            return conn.execute(q).first() is not None

    def hostnames(self) -> list[str]:
        """Every node the store knows (the simulated scheduler's nodes)."""
        with self.db.tx() as conn:
            return [r[0] for r in conn.execute(sa.select(T_NODES.c.hostname).order_by(T_NODES.c.hostname))]

    # -- the audit --------------------------------------------------------------------------

    def record(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Append actions to the audit; returns how many."""
        clean = [_action(r) for r in rows]
        if clean:
            with self.db.tx(write=True) as conn:
                conn.execute(sa.insert(T_ACTIONS), clean)
        return len(clean)

    def actions(
        self,
        *,
        hostname: str | None = None,
        result: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[ActionRow], int]:
        """Audited actions, newest first, and how many match."""
        paging(limit, offset)
        a = T_ACTIONS.c
        where = sa.and_(sa.true())
        if hostname is not None:
            where = sa.and_(where, a.hostname == text(hostname, "hostname"))
        if result is not None:
            where = sa.and_(where, a.result == choice(result, ACTION_RESULTS, "action result"))
        if since is not None:
            where = sa.and_(where, a.at >= utc(since, "since"))
        with self.db.tx() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(T_ACTIONS).where(where)).scalar_one()
            rows = conn.execute(
                sa.select(T_ACTIONS).where(where).order_by(a.at.desc(), a.id.desc()).limit(limit).offset(offset)
            ).mappings()
            return [cast(ActionRow, dict(r)) for r in rows], int(total)

    def last_actions(self, target: str, hostnames: Sequence[str], *, remedies: bool = False) -> dict[str, ActionRow]:
        """The newest audited action of each of these nodes for `target` (to record a repeat only once): of the
        node's state changes, or (`remedies`) of the remediation loop's steps."""
        if not hostnames:
            return {}
        a = T_ACTIONS.c
        kind = a.action.in_(REMEDIATION_ACTIONS) if remedies else a.action.not_in(REMEDIATION_ACTIONS)
        newest = (
            sa.select(sa.func.max(a.id))
            .where(a.target == target, a.hostname.in_(list(hostnames)), kind)
            .group_by(a.hostname)
            .scalar_subquery()
        )
        with self.db.tx() as conn:
            rows = conn.execute(sa.select(T_ACTIONS).where(a.id.in_(newest))).mappings()
            return {r["hostname"]: cast(ActionRow, dict(r)) for r in rows}

    def last_applied_at(self, target: str, hostnames: Sequence[str]) -> dict[str, datetime]:
        """When this target last changed each of these nodes' state (applied or started), for those it ever did
        (a remediation's steps are not changes of the node's state)."""
        if not hostnames:
            return {}
        a = T_ACTIONS.c
        q = (
            sa.select(a.hostname, sa.func.max(a.at))
            .where(a.target == target, a.hostname.in_(list(hostnames)), a.result.in_(("applied", "pending")))
            .where(a.action.not_in(REMEDIATION_ACTIONS))
            .group_by(a.hostname)
        )
        with self.db.tx() as conn:
            return {h: utc(at, "action time") for h, at in conn.execute(q).all()}

    def escalated_nodes(
        self, target: str, since: datetime, results: Sequence[str] = ("applied", "pending")
    ) -> set[str]:
        """Nodes this target newly demoted or drained since `since` (with these results): the breaker's count."""
        with self.db.tx() as conn:
            return self._escalated(conn, target, utc(since, "since"), results)

    def _escalated(self, conn: Connection, target: str, since: datetime, results: Sequence[str]) -> set[str]:
        a = T_ACTIONS.c
        q = (
            sa.select(a.hostname)
            .distinct()
            .where(a.target == target, a.escalates, a.result.in_(list(results)), a.at >= since)
        )
        return {r[0] for r in conn.execute(q)}

    # -- per-node controls ------------------------------------------------------------------

    def node_controls(self, hostnames: Sequence[str] | None = None) -> dict[str, NodeControl]:
        """The nodes with a hold, a release, a settle clock or saved values (those of `hostnames` only)."""
        q = sa.select(T_ACTUATOR_NODES)
        if hostnames is not None:
            q = q.where(T_ACTUATOR_NODES.c.hostname.in_(list(hostnames)))
        with self.db.tx() as conn:
            rows = conn.execute(q).mappings().all()
        return {r["hostname"]: cast(NodeControl, dict(r)) for r in rows}

    def _upsert_nodes(self, values: Mapping[str, Mapping[str, Any]]) -> None:
        """Set these columns of these nodes (the same columns for every node), in one statement."""
        if not values:
            return
        columns = list(next(iter(values.values())))
        rows = [{"hostname": text(h, "hostname"), "held": False, **v} for h, v in values.items()]
        ins = self.db.insert(T_ACTUATOR_NODES)
        stmt = ins.on_conflict_do_update(index_elements=["hostname"], set_={c: ins.excluded[c] for c in columns})
        with self.db.tx(write=True) as conn:
            conn.execute(stmt, rows)

    def hold(self, hostname: str, *, held: bool, by: str, at: datetime) -> None:
        """Keep the actuator off a node (held) or let it act again; either way ours is left as it is."""
        self._upsert_nodes({hostname: {"held": held, "held_by": text(by, "by"), "held_at": utc(at, "time")}})

    def release(self, hostname: str, *, by: str, at: datetime) -> None:
        """An operator's release: the node's current decisions are not acted on, ours is undone at once."""
        self._upsert_nodes({hostname: {"released_at": utc(at, "time"), "released_by": text(by, "by")}})

    def set_lowering(self, clocks: Mapping[str, tuple[datetime, str] | None]) -> None:
        """Start, keep or clear (None) the settle clock of these nodes (one transaction)."""
        self._upsert_nodes({
            host: dict(zip(("lowering_since", "lowering_to"), clock or (None, None), strict=True))
            for host, clock in clocks.items()
        })  # fmt: skip

    def set_saved(self, hostname: str, saved: Mapping[str, Any] | None) -> None:
        """Values the actuator changed and must put back when it lets the node go (None: nothing)."""
        self._upsert_nodes({hostname: {"saved": dict(saved) if saved is not None else None}})

    # -- the breaker ------------------------------------------------------------------------

    def breaker(self, target: str) -> BreakerState:
        """The breaker of `target` (closed when never opened)."""
        with self.db.tx() as conn:
            return self._breaker(conn, target)

    def _breaker(self, conn: Connection, target: str) -> BreakerState:
        q = sa.select(T_ACTUATOR_STATE).where(T_ACTUATOR_STATE.c.target == target)
        row = conn.execute(q).mappings().first()
        if row is None:
            return BreakerState(
                target=target, breaker_open=False, opened_at=None, reason=None, reset_at=None, reset_by=None
            )
        return cast(BreakerState, dict(row))

    def _upsert_state(self, target: str, values: Mapping[str, Any], conn: Connection | None = None) -> None:
        if conn is None:
            with self.db.tx(write=True) as conn:
                self._upsert_state(target, values, conn)
            return
        ins = self.db.insert(T_ACTUATOR_STATE)
        conn.execute(
            ins.values(target=target, **{"breaker_open": False, **values}).on_conflict_do_update(
                index_elements=["target"], set_=dict(values)
            )
        )

    def spend(
        self,
        target: str,
        rows: Sequence[Mapping[str, Any]],
        *,
        window_start: datetime,
        limit: int,
        counted: Sequence[str],
        open_reason: str | None,
        at: datetime,
    ) -> Spend:
        """Spend the breaker's budget on these escalating steps, in their order, for every replica at once.

        One transaction holding the target's breaker lock (PostgreSQL: an advisory lock; SQLite:
        BEGIN IMMEDIATE) reads the breaker, counts the nodes newly taken off work since
        `max(window_start, last reset)` (audit rows with a result in `counted`), and writes the
        audit row of each step within `limit` (its result says it is under way: `pending`, or
        `planned` in a dry run), so a second replica's count includes the first one's spend. A
        node counted already costs nothing. Past the bound, with an `open_reason`, the breaker
        opens in the same transaction and every later step is refused too.
        """
        clean = [_action(r) for r in rows]
        with self.db.tx(write=True) as conn:
            self._lock_breaker(conn, target)
            state = self._breaker(conn, target)
            if state["breaker_open"]:
                return Spend(breaker_open=True, reserved={}, refused=[r["hostname"] for r in clean], opened=False)
            since = utc(window_start, "window start")
            if state["reset_at"] is not None and state["reset_at"] > since:
                since = state["reset_at"]
            recent = self._escalated(conn, target, since, counted)
            budget = max(0, limit - len(recent))
            reserved: dict[str, int] = {}
            refused: list[str] = []
            for r in clean:
                host = r["hostname"]
                if refused and open_reason is not None:  # the breaker opens: nothing after it
                    refused.append(host)
                    continue
                if host not in recent:
                    if budget <= 0:
                        refused.append(host)
                        continue
                    budget -= 1
                reserved[host] = conn.execute(sa.insert(T_ACTIONS).values(r).returning(T_ACTIONS.c.id)).scalar_one()
            opened = bool(refused) and open_reason is not None
            if opened:
                values = {"breaker_open": True, "opened_at": utc(at, "time"), "reason": open_reason}
                self._upsert_state(target, values, conn)
        return Spend(breaker_open=False, reserved=reserved, refused=refused, opened=opened)

    def _lock_breaker(self, conn: Connection, target: str) -> None:
        """Hold the target's breaker until the transaction ends (SQLite's BEGIN IMMEDIATE holds the database)."""
        if self.db.dialect == "postgresql":
            key = zlib.crc32(target.encode()) - 2**31  # int4, as the two-key form takes
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(BREAKER_LOCK, key)))

    def finish(self, action_id: int, *, result: str, error: str | None, workloads: Sequence[str], drop: bool = False
               ) -> None:  # fmt: skip
        """Say how a step whose row `spend` wrote ended; `drop`: delete the row (it only repeats the node's last)."""
        a = T_ACTIONS.c
        with self.db.tx(write=True) as conn:
            if drop:
                conn.execute(sa.delete(T_ACTIONS).where(a.id == action_id))
                return
            values = {"result": choice(result, ACTION_RESULTS, "action result"), "error": error,
                      "workloads": list(workloads)}  # fmt: skip
            conn.execute(sa.update(T_ACTIONS).where(a.id == action_id).values(values))

    def open_breaker(self, target: str, *, at: datetime, reason: str) -> None:
        """Open the breaker: the actuator of `target` acts no more until `reset_breaker`."""
        self._upsert_state(target, {"breaker_open": True, "opened_at": utc(at, "time"), "reason": reason})

    def reset_breaker(self, target: str, *, by: str, at: datetime) -> BreakerState | None:
        """Close an open breaker (a person's decision); the window counts again from now. None, and nothing
        changed, when it is closed: a reset restarts the window, so resets must not lift the bound."""
        c = T_ACTUATOR_STATE.c
        values = {"breaker_open": False, "reset_at": utc(at, "time"), "reset_by": text(by, "by")}
        with self.db.tx(write=True) as conn:
            done = conn.execute(sa.update(T_ACTUATOR_STATE).where(c.target == target, c.breaker_open).values(values))
            if done.rowcount == 0:
                return None
            return self._breaker(conn, target)
