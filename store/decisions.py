"""Risk scores and decisions: storing a scoring round, the decision lifecycle, a GPU's risk history.

Per GPU at most one decision is active (open or acknowledged; the database enforces it).
Which decision a round closes, refreshes or opens is not the store's to choose: `write_scores`
asks a `DecisionRule` (`predictor.policy.decision_changes`) inside its transaction and only
persists the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NotRequired, Protocol, TypedDict

import numpy as np
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core.decisions import DECISIONS, OUT_OF_SERVICE, REMEDIES, REMEDY_WHEN
from store import round_rows
from store.engine import Database, not_closed
from store.errors import NotFound, StoreError
from store.gpus import GpuSighting, require_gpu, upsert_gpu_rows
from store.leases import RoundFence, admit_round
from store.rollup import RISKS
from store.schema import DECISION_STATES, T_DECISIONS, T_GPUS, T_SCORES, T_SCORES_HOURLY
from store.validate import choice, optional_float, paging, string_list, text, utc


class ScoreRecord(TypedDict):
    """One GPU's score in a round, as `gpuhealth score` writes it (`predictor.score.to_records`)."""

    gpu_uuid: str
    hostname: str
    model_name: NotRequired[str | None]
    risk: NotRequired[float | None]
    risk_ecc: NotRequired[float | None]
    risk_thermal: NotRequired[float | None]
    risk_pcie: NotRequired[float | None]
    decision: str
    reasons: NotRequired[Sequence[str]]
    heat_z: NotRequired[float | None]
    """The core's heat the round judged (`predictor.conditions.judged_heats`); kept with the round only."""
    heat_vs_node_z: NotRequired[float | None]
    """Its heat over its node's, in its own spread of that (`predictor.conditions.judged_heats`); the same."""
    remedy: NotRequired[str | None]
    """What brings the GPU back (`core.decisions.REMEDIES`; `predictor.remedy`); absent: not said."""
    remedy_when: NotRequired[str | None]
    """When the remedy is due (`core.decisions.REMEDY_WHEN`)."""


class Decision(TypedDict):
    """A decision with its GPU's identity and latest risk."""

    id: int
    gpu_uuid: str
    hostname: str
    gpu_index: int | None
    model_name: str | None
    decision: str
    reasons: list[str]
    created_at: datetime
    updated_at: datetime
    state: str
    acknowledged_by: str | None
    acknowledged_at: datetime | None
    closed_at: datetime | None
    risk: float | None
    remedy: str | None
    """The GPU's remedy in its latest round, as `risk` (null: not said)."""
    remedy_when: str | None


class ScorePoint(TypedDict):
    """One point of a GPU's risk history: a raw score, or beyond the score retention an hour's worst."""

    scored_at: datetime
    risk: float | None
    risk_ecc: float | None
    risk_thermal: float | None
    risk_pcie: float | None
    decision: str
    reasons: list[str]


class DecisionChanges(Protocol):
    """What a decision rule asks for (`predictor.policy.DecisionChanges` has this shape)."""

    @property
    def close(self) -> Sequence[int]:
        """Active decisions to close, by id."""
        ...

    @property
    def refresh(self) -> Sequence[tuple[int, Sequence[str]]]:
        """Active decisions that stand, by id, with their new reasons."""
        ...

    @property
    def open(self) -> Sequence[tuple[str, str, Sequence[str]]]:
        """Decisions to open: (GPU uuid, decision, reasons)."""
        ...


class DecisionRule(Protocol):
    """Given each scored GPU's active decision {uuid: (id, decision)} and the round's (uuid, decision,
    reasons), chooses what to close, refresh and open (`predictor.policy.decision_changes`)."""

    def __call__(
        self, active: Mapping[str, tuple[int, str]], scored: Sequence[tuple[str, str, Sequence[str]]], /
    ) -> DecisionChanges: ...


ROUND_VALUES = (*RISKS, "heat_z", "heat_vs_node_z")
"""The numbers a stored round keeps per GPU (null where not known), which `recent_rounds` reads back."""
_SCORE_COLUMNS = ("gpu_uuid", "scored_at", *ROUND_VALUES, "decision", "reasons", "remedy", "remedy_when")


def _score_rows(records: Sequence[ScoreRecord], at: datetime) -> list[dict[str, Any]]:
    """The round's records checked, as risk_scores rows plus hostname and model_name; one per GPU."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, r in enumerate(records):
        if not isinstance(r, Mapping):
            raise StoreError(f"score {i}: expected a mapping, got {type(r).__name__}")
        uuid = text(r.get("gpu_uuid"), f"score {i}: gpu_uuid", max_len=64)
        if uuid in seen:
            raise StoreError(f"score {i}: GPU {uuid} is scored twice in one round")
        seen.add(uuid)
        rows.append(
            {
                "gpu_uuid": uuid,
                "hostname": text(r.get("hostname"), f"score {i}: hostname"),
                "model_name": text(r.get("model_name"), f"score {i}: model_name", required=False),
                "scored_at": at,
                **{k: optional_float(r.get(k), f"score {i}: {k}") for k in ROUND_VALUES},
                "decision": choice(r.get("decision"), DECISIONS, f"score {i}: decision"),
                "reasons": string_list(r.get("reasons"), f"score {i}: reasons"),
                "remedy": _optional_choice(r.get("remedy"), REMEDIES, f"score {i}: remedy"),
                "remedy_when": _optional_choice(r.get("remedy_when"), REMEDY_WHEN, f"score {i}: remedy_when"),
            }
        )
    return rows


def _optional_choice(value: Any, allowed: Sequence[str], what: str) -> str | None:
    """`value` if it is one of `allowed`, None if it is None."""
    return None if value is None else choice(value, allowed, what)


def _store_round(
    db: Database, conn: Connection, rows: list[dict[str, Any]], at: datetime
) -> dict[str, tuple[int, str]]:
    """Insert the round's scores and point each GPU at its newest; GPUs never seen here are added.
    Returns the scored GPUs' active decisions, uuid -> (id, decision)."""
    if db.dialect != "postgresql":
        return _store_round_core(db, conn, rows, at)
    # Through the driver: the rows copied once, then asked (Core's insert-many-values and IN lists of
    # 10,000 GPUs cost seconds a round, docs/decisions/0090).
    round_rows.stage_round(conn, rows)
    _add_unknown_gpus(db, conn, rows, round_rows.unknown_gpus(conn), at)
    round_rows.insert_staged(conn, at)
    return round_rows.staged_active_decisions(conn)


def _store_round_core(
    db: Database, conn: Connection, rows: list[dict[str, Any]], at: datetime
) -> dict[str, tuple[int, str]]:
    """`_store_round` through SQLAlchemy Core (SQLite; PostgreSQL's the same through `store.round_rows`)."""
    uuids = [r["gpu_uuid"] for r in rows]
    known = {x[0] for x in conn.execute(sa.select(T_GPUS.c.uuid).where(T_GPUS.c.uuid.in_(uuids)))}
    _add_unknown_gpus(db, conn, rows, set(uuids) - known, at)
    _insert_scores_core(conn, rows, at)
    return _active_decisions(conn, uuids)


def _add_unknown_gpus(
    db: Database, conn: Connection, rows: list[dict[str, Any]], unknown: set[str], at: datetime
) -> None:
    """Add the scored GPUs the store does not know, seen `at`: scores may name GPUs that never sent
    telemetry here (scoring from Prometheus)."""
    fresh: list[GpuSighting] = [
        {"uuid": r["gpu_uuid"], "hostname": r["hostname"], "model_name": r["model_name"], "first_seen": at,
         "last_seen": at}
        for r in rows
        if r["gpu_uuid"] in unknown
    ]  # fmt: skip
    upsert_gpu_rows(db, conn, fresh, explicit_state=False)


def _insert_scores_core(conn: Connection, rows: list[dict[str, Any]], at: datetime) -> None:
    """Insert the round's scores and point each GPU at its newest, through SQLAlchemy Core."""
    ids = (
        conn.execute(
            sa.insert(T_SCORES).returning(T_SCORES.c.id, sort_by_parameter_order=True),
            [{k: r[k] for k in _SCORE_COLUMNS} for r in rows],
        )
        .scalars()
        .all()
    )
    latest = sa.select(T_SCORES.c.scored_at).where(T_SCORES.c.id == T_GPUS.c.latest_score_id).scalar_subquery()
    conn.execute(
        sa.update(T_GPUS)
        .where(T_GPUS.c.uuid == sa.bindparam("u"))
        .where(sa.or_(T_GPUS.c.latest_score_id.is_(None), latest <= sa.bindparam("t")))
        .values(latest_score_id=sa.bindparam("sid")),
        [{"u": r["gpu_uuid"], "t": at, "sid": sid} for r, sid in zip(rows, ids, strict=True)],
    )


def _active_decisions(conn: Connection, uuids: list[str]) -> dict[str, tuple[int, str]]:
    """uuid -> (id, decision) of the GPUs' active decisions."""
    d = T_DECISIONS.c
    q = sa.select(d.id, d.gpu_uuid, d.decision).where(not_closed(d.state)).where(d.gpu_uuid.in_(uuids))
    return {x.gpu_uuid: (x.id, x.decision) for x in conn.execute(q)}


def _check_changes(changes: DecisionChanges, active: Mapping[str, tuple[int, str]], scored: set[str]) -> None:
    """A rule may act only on the active decisions it was given and open only for GPUs scored."""
    ids = {i for i, _ in active.values()}
    stray = [i for i in (*changes.close, *(i for i, _ in changes.refresh)) if i not in ids]
    if stray:
        raise StoreError(f"decision rule: decision {stray[0]} is not an active decision of a GPU scored")
    for uuid, decision, _ in changes.open:
        if uuid not in scored or decision not in DECISIONS or decision == "ok":
            raise StoreError(f"decision rule: cannot open {decision!r} for GPU {uuid}")


def _persist_changes(db: Database, conn: Connection, changes: DecisionChanges, at: datetime) -> list[int]:
    """Close, refresh and open decisions as asked; returns the ids opened, in order."""
    if db.dialect != "postgresql":
        return _persist_changes_core(conn, changes, at)
    # Through the driver: one statement each for the closed and the refreshed (Core's executemany
    # sent one UPDATE per decision: half a second a round at 10,000 GPUs, docs/decisions/0090).
    round_rows.close_decisions(conn, changes.close, at)
    round_rows.refresh_decisions(conn, changes.refresh, at)
    return _open_decisions(conn, changes, at)


def _persist_changes_core(conn: Connection, changes: DecisionChanges, at: datetime) -> list[int]:
    """`_persist_changes` through SQLAlchemy Core (SQLite; PostgreSQL's close and refresh through
    `store.round_rows`)."""
    d = T_DECISIONS.c
    by_id: Any = sa.bindparam("i")
    if changes.close:
        conn.execute(
            sa.update(T_DECISIONS).where(d.id == by_id)
            .values(state="closed", closed_at=sa.bindparam("t"), updated_at=sa.bindparam("t")),
            [{"i": i, "t": at} for i in changes.close],
        )  # fmt: skip
    if changes.refresh:
        conn.execute(
            sa.update(T_DECISIONS).where(d.id == by_id)
            .values(reasons=sa.bindparam("reasons"), updated_at=sa.bindparam("t")),
            [{"i": i, "reasons": list(reasons), "t": at} for i, reasons in changes.refresh],
        )  # fmt: skip
    return _open_decisions(conn, changes, at)


def _open_decisions(conn: Connection, changes: DecisionChanges, at: datetime) -> list[int]:
    """Insert the decisions `changes` opens; returns their ids, in order."""
    d = T_DECISIONS.c
    if not changes.open:
        return []
    rows = [
        {"gpu_uuid": uuid, "decision": decision, "reasons": list(reasons), "created_at": at, "updated_at": at,
         "state": "open"}
        for uuid, decision, reasons in changes.open
    ]  # fmt: skip
    return list(conn.execute(sa.insert(T_DECISIONS).returning(d.id, sort_by_parameter_order=True), rows).scalars())


def _decision_rows(
    conn: Connection, where: Any, *, limit: int | None = None, offset: int = 0, newest_first: bool = True
) -> list[Decision]:
    """Decisions matching `where`, with their GPU's identity and latest risk."""
    d, g, s = T_DECISIONS, T_GPUS, T_SCORES
    q = (
        sa.select(d, g.c.hostname, g.c.gpu_index, g.c.model_name, s.c.risk, s.c.remedy, s.c.remedy_when)
        .select_from(d.join(g, g.c.uuid == d.c.gpu_uuid).outerjoin(s, s.c.id == g.c.latest_score_id))
        .where(where)
        .order_by(*((d.c.created_at.desc(), d.c.id.desc()) if newest_first else (d.c.id,)))
        .offset(offset)
    )
    if limit is not None:
        q = q.limit(limit)
    return [
        {"id": r["id"], "gpu_uuid": r["gpu_uuid"], "hostname": r["hostname"], "gpu_index": r["gpu_index"],
         "model_name": r["model_name"], "decision": r["decision"], "reasons": list(r["reasons"] or []),
         "created_at": r["created_at"], "updated_at": r["updated_at"], "state": r["state"],
         "acknowledged_by": r["acknowledged_by"], "acknowledged_at": r["acknowledged_at"],
         "closed_at": r["closed_at"], "risk": r["risk"], "remedy": r["remedy"], "remedy_when": r["remedy_when"]}
        for r in conn.execute(q).mappings()
    ]  # fmt: skip


def _rounds_core(
    conn: Connection, uuids: list[str], lo: datetime, hi: datetime, of: Sequence[str]
) -> list[tuple[str, datetime, tuple[float | None, ...]]]:
    """`Decisions.recent_rounds` of a bounded list of GPUs through SQLAlchemy Core (SQLite;
    PostgreSQL's the same through `store.round_rows.read_rounds`)."""
    s = T_SCORES.c
    q = (
        sa.select(s.gpu_uuid, s.scored_at, *(s[c] for c in of))
        .where(s.gpu_uuid.in_(uuids), s.scored_at >= lo, s.scored_at < hi)
        .order_by(s.gpu_uuid, s.scored_at)
    )
    return [(str(r[0]), utc(r[1], "scored_at"), tuple(r[2:])) for r in conn.execute(q)]


class Decisions:
    """Scoring rounds, the decisions they move, and the listings built on them."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def write_scores(
        self,
        records: Sequence[ScoreRecord],
        scored_at: datetime,
        *,
        rule: DecisionRule,
        fence: RoundFence | None = None,
    ) -> list[Decision]:
        """Store one scoring round and move each GPU's decision as `rule` says; returns the decisions opened.

        One transaction: the scores are stored, the scored GPUs' active decisions are read,
        `rule` chooses what to close, refresh (reasons; an acknowledgement stays) and open,
        and that is written. With a `fence` (a replica's round, `store.leases`), only the rows
        of the shards it admits first are stored; `fence.admitted` says which.
        """
        at = utc(scored_at, "scored_at")
        rows = _score_rows(records, at)
        if fence is not None:
            fence.admitted = frozenset()
        if not rows:
            return []
        with self.db.tx(write=True) as conn:
            if fence is not None:
                fence.admitted = admit_round(self.db, conn, fence)
                rows = [r for r in rows if fence.admits(r["hostname"])]
                if not rows:
                    return []
            uuids = [r["gpu_uuid"] for r in rows]
            active = _store_round(self.db, conn, rows, at)
            changes = rule(active, [(r["gpu_uuid"], r["decision"], r["reasons"]) for r in rows])
            _check_changes(changes, active, set(uuids))
            opened = _persist_changes(self.db, conn, changes, at)
            return _decision_rows(conn, T_DECISIONS.c.id.in_(opened), newest_first=False) if opened else []

    def find(
        self,
        *,
        decision: str | None = None,
        state: str | None = "open",
        hostname: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[Decision], int]:
        """Decisions, newest first, and how many match; state "active" means open or acknowledged."""
        paging(limit, offset)
        d = T_DECISIONS.c
        clauses: list[Any] = []
        if decision is not None:
            clauses.append(d.decision == choice(decision, DECISIONS, "decision"))
        if state == "active":
            clauses.append(not_closed(d.state))
        elif state is not None:
            clauses.append(d.state == choice(state, (*DECISION_STATES, "active"), "state"))
        if hostname is not None:
            clauses.append(T_GPUS.c.hostname == hostname)
        where = sa.and_(sa.true(), *clauses)
        with self.db.tx() as conn:
            total = conn.execute(
                sa.select(sa.func.count())
                .select_from(T_DECISIONS.join(T_GPUS, T_GPUS.c.uuid == d.gpu_uuid))
                .where(where)
            ).scalar_one()
            return _decision_rows(conn, where, limit=limit, offset=offset), int(total)

    def ack(self, decision_id: int, by: str, at: datetime) -> Decision:
        """Acknowledge a decision (idempotent: the first acknowledgement stays); closed ones refuse."""
        who = text(by, "acknowledged_by")
        when = utc(at, "acknowledged_at")
        d = T_DECISIONS.c
        with self.db.tx(write=True) as conn:
            row = conn.execute(sa.select(d.state).where(d.id == decision_id).with_for_update()).first()
            if row is None:
                raise NotFound(f"decision {decision_id} not found")
            if row.state == "closed":
                raise StoreError(f"decision {decision_id} is closed")
            if row.state == "open":
                conn.execute(
                    sa.update(T_DECISIONS)
                    .where(d.id == decision_id)
                    .values(state="acknowledged", acknowledged_by=who, acknowledged_at=when)
                )
            return _decision_rows(conn, d.id == decision_id)[0]

    def released_at(self, uuids: Sequence[str], now: datetime) -> dict[str, datetime]:
        """For the GPUs whose standing decision continues a drain or RMA: when it let them go.

        A GPU still at drain or RMA is let go `now` (the round being decided is the first without
        it, or it would not be asked); one at demote, when the drain or RMA it took over from
        closed (the same round: a round closes and opens in one transaction, at one time). Any
        other standing decision, or none, broke the chain: left out (`replay.probation_began`
        reads the same from scored rows)."""
        if not uuids:
            return {}
        a, p = T_DECISIONS.alias("a"), T_DECISIONS.alias("p")
        at = utc(now, "now")
        took_over = sa.and_(
            p.c.gpu_uuid == a.c.gpu_uuid, p.c.decision.in_(OUT_OF_SERVICE), p.c.closed_at == a.c.created_at
        )
        out: dict[str, datetime] = {}
        with self.db.tx() as conn:
            for i in range(0, len(uuids), 1000):  # bounded IN lists
                q = (
                    sa.select(a.c.gpu_uuid, a.c.decision, p.c.closed_at)
                    .select_from(a.outerjoin(p, took_over))
                    .where(not_closed(a.c.state), a.c.gpu_uuid.in_(list(uuids[i : i + 1000])))
                    .where(a.c.decision.in_(("demote", *OUT_OF_SERVICE)))
                )
                for uuid, decision, closed in conn.execute(q):
                    if decision in OUT_OF_SERVICE:
                        out[str(uuid)] = at
                    elif closed is not None:
                        out[str(uuid)] = utc(closed, "closed_at")
        return out

    def demoted_since(self, uuids: Sequence[str]) -> dict[str, datetime]:
        """For the GPUs whose standing decision is a demote: when it was opened (the policy holds it
        while the risk stays at the release level, `replay.held_demotes`); others are left out."""
        return self.standing_since(uuids, ("demote",))

    def drained(self, uuids: Sequence[str]) -> set[str]:
        """The GPUs whose standing decision is a drain or RMA."""
        return set(self.standing_since(uuids, OUT_OF_SERVICE))

    def standing_since(self, uuids: Sequence[str], decisions: Sequence[str]) -> dict[str, datetime]:
        """For the GPUs whose standing decision is one of `decisions`: when it was opened; others are
        left out (a drain or RMA that stands keeps a pending remap's drain, `replay.remap_held`)."""
        if not uuids:
            return {}
        d = T_DECISIONS.c
        out: dict[str, datetime] = {}
        with self.db.tx() as conn:
            for i in range(0, len(uuids), 1000):  # bounded IN lists
                q = sa.select(d.gpu_uuid, d.created_at).where(
                    not_closed(d.state), d.decision.in_(list(decisions)), d.gpu_uuid.in_(list(uuids[i : i + 1000]))
                )
                out.update({str(u): utc(t, "created_at") for u, t in conn.execute(q)})
        return out

    def recent_rounds(
        self, uuids: Sequence[str], since: datetime, until: datetime, of: Sequence[str] = ("risk",)
    ) -> list[tuple[str, datetime, tuple[float | None, ...]]]:
        """(gpu_uuid, scored_at, values) of the GPUs' stored rounds in [since, until), oldest first; the
        values are the round's `of` (ROUND_VALUES: its risks, the heat it judged), in that order.

        The scorer reads how long a GPU's risk has held (a model demote waits `demote_for`), and its
        heat (a thermal demote on heat alone, `thermal_heat_for`); unknown GPUs have no rows. Only
        the raw rounds (the score retention is days)."""
        wrong = ", ".join(repr(c) for c in of if c not in ROUND_VALUES) or (None if of else "none")
        if wrong:
            raise StoreError(f"recent_rounds reads {', '.join(ROUND_VALUES)}; not {wrong}")
        if not uuids:
            return []
        lo, hi = utc(since, "since"), utc(until, "until")
        out: list[tuple[str, datetime, tuple[float | None, ...]]] = []
        with self.db.tx() as conn:
            for i in range(0, len(uuids), 1000):  # bounded IN lists
                part = list(uuids[i : i + 1000])
                out += (
                    round_rows.read_rounds(conn, part, lo, hi, of)
                    if self.db.dialect == "postgresql"  # without Core's per-row result types
                    else _rounds_core(conn, part, lo, hi, of)
                )
        return out

    def round_columns(
        self, uuids: Sequence[str], since: datetime, until: datetime, of: Sequence[str] = ("risk",)
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`recent_rounds`' rows, in its order, as columns: the GPUs (objects), the times (naive UTC
        datetime64[us]) and the values (float64, one column per `of`, NaN where null). On
        PostgreSQL without a Python object per row (a round reads ~13 hours of rounds)."""
        if self.db.dialect != "postgresql" or not uuids:
            rows = self.recent_rounds(uuids, since, until, of)
            gpu = np.asarray([r[0] for r in rows], dtype=object)
            at = np.array([r[1].replace(tzinfo=None) for r in rows], dtype="datetime64[us]")
            values = np.array([[np.nan if v is None else v for v in r[2]] for r in rows], dtype=np.float64)
            return gpu, at, values.reshape(len(rows), len(of))
        self.recent_rounds([], since, until, of)  # the same checks of `of`
        lo, hi = utc(since, "since"), utc(until, "until")
        parts = []
        with self.db.tx() as conn:
            for i in range(0, len(uuids), 1000):  # the order of recent_rounds' bounded IN lists
                parts.append(round_rows.read_round_columns(conn, list(uuids[i : i + 1000]), lo, hi, of))
        return tuple(np.concatenate([p[j] for p in parts]) for j in range(3))  # type: ignore[return-value]

    def risk_history(
        self, uuid: str, *, since: datetime | None = None, until: datetime | None = None, limit: int = 1000
    ) -> list[ScorePoint]:
        """The GPU's newest `limit` scores in the window, oldest first; NotFound if unknown.

        Beyond the score retention a point stands for an hour (see `store.retention`)."""
        paging(limit, 0)
        s, h = T_SCORES.c, T_SCORES_HOURLY.c
        raw = sa.select(s.scored_at, *(s[c] for c in RISKS), s.decision, s.reasons, s.id).where(s.gpu_uuid == uuid)
        # Beyond the score retention: one point per hour (its highest risks and worst decision).
        hourly = sa.select(
            h.hour.label("scored_at"), *(h[c] for c in RISKS), h.decision, h.reasons, sa.literal(0).label("id")
        ).where(h.gpu_uuid == uuid)
        if since is not None:
            raw = raw.where(s.scored_at >= utc(since, "since"))
            hourly = hourly.where(h.hour >= utc(since, "since"))
        if until is not None:
            raw = raw.where(s.scored_at <= utc(until, "until"))
            hourly = hourly.where(h.hour <= utc(until, "until"))
        both = sa.union_all(raw, hourly).subquery()
        q = sa.select(both).order_by(both.c.scored_at.desc(), both.c.id.desc()).limit(limit)
        with self.db.tx() as conn:
            require_gpu(conn, uuid)
            rows = conn.execute(q).mappings().all()
        return [
            {"scored_at": utc(r["scored_at"], "scored_at"), "risk": r["risk"], "risk_ecc": r["risk_ecc"],
             "risk_thermal": r["risk_thermal"], "risk_pcie": r["risk_pcie"], "decision": r["decision"],
             "reasons": list(r["reasons"] or [])}
            for r in reversed(rows)
        ]  # fmt: skip
