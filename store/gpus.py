"""GPUs and nodes: recording them as they are seen, and reading them with their latest score and decision.

`upsert_gpu_rows` is the one writer of the gpus and nodes tables; ingest (`store.samples`) and
scores (`store.decisions`) call it in their own transactions. `Gpus.get` is the API's
hottest read: one statement, compiled once, run on the driver's cursor.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Required, TypedDict

import numpy as np
import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from core import catalog
from core.decisions import DECISIONS, SEVERITY
from store.engine import Compiled, Database, not_closed
from store.errors import NotFound, StoreError
from store.schema import GPU_STATES, METRIC_COLUMNS, T_DECISIONS, T_GPUS, T_NODES, T_SCORES, samples
from store.validate import MAX_LIMIT, choice, non_negative_int, optional_float, paging, text, utc

_GAUGE_POSITIONS = tuple(i for i, c in enumerate(METRIC_COLUMNS) if catalog.BY_NAME[c].kind == "gauge")
_SAMPLE = "sample_"
"""The prefix of the sample columns in `get`'s one statement."""

Sample = dict[str, datetime | float | None]
"""A stored sample as the API shows it: "timestamp", then every metric column (None when unknown)."""


class GpuRow(TypedDict, total=False):
    """A GPU a collector saw (`Gpus.upsert`); a state given is set as is, else lost becomes active
    when seen after it was last seen. A GPU reported lost was not seen: its `seen_at` (when it was
    found missing) is kept only for a GPU the store never saw, and its last_seen stays as it was."""

    uuid: Required[str]
    hostname: Required[str]
    seen_at: Required[datetime]
    gpu_index: int | None
    model_name: str | None
    serial: str | None
    pci_bus_id: str | None
    ib_rail: str | None
    """Its InfiniBand/RoCE ports ("mlx5_3/1"); None: none known (the one kept stays)."""
    state: str | None


class GpuSighting(TypedDict, total=False):
    """A GPU row to insert or update, with the span of time it was seen in (checked already)."""

    uuid: Required[str]
    hostname: Required[str]
    first_seen: Required[datetime]
    last_seen: Required[datetime]
    gpu_index: int | None
    model_name: str | None
    serial: str | None
    pci_bus_id: str | None
    ib_rail: str | None
    state: str | None


class GpuItem(TypedDict):
    """A GPU as listed: identity, state, latest score and the decision that stands (None: never scored)."""

    uuid: str
    hostname: str
    gpu_index: int | None
    model_name: str | None
    serial: str | None
    pci_bus_id: str | None
    state: str
    first_seen: datetime
    last_seen: datetime
    risk: float | None
    risk_ecc: float | None
    risk_thermal: float | None
    risk_pcie: float | None
    scored_at: datetime | None
    decision: str | None
    reasons: list[str]
    decision_id: int | None
    decision_state: str | None
    remedy: str | None
    """What brings the GPU back, from its latest round (null: not scored, or not said)."""
    remedy_when: str | None


class GpuIdentity(TypedDict):
    """A GPU as a scoring round needs it (`Gpus.identities`): who and where it is, and whether it is lost."""

    uuid: str
    hostname: str
    gpu_index: int | None
    model_name: str | None
    state: str
    last_seen: datetime


class GpuDetail(GpuItem):
    """One GPU as listed, plus its newest raw sample."""

    latest_sample: Sample | None


class Node(TypedDict):
    """A node, its GPUs and how many of them carry each decision ("unscored" for none yet)."""

    hostname: str
    first_seen: datetime
    last_seen: datetime
    gpus: list[GpuItem]
    counts: dict[str, int]


def float32_values(values: Sequence[float | None]) -> list[float | None]:
    """Float32 values as the shortest decimals that read back as them: 0.1, not 0.10000000149.

    Gauges are float32, and SQLite hands them back widened to double. orjson writes float32
    the shortest way; reading that back costs 2 µs for a sample's gauges, a tenth of numpy's
    str() per value. None, NaN and infinities come back as None (JSON null either way).
    """
    arr = np.array(values, dtype=np.float32)  # None -> NaN
    out: list[float | None] = orjson.loads(orjson.dumps(arr, option=orjson.OPT_SERIALIZE_NUMPY))
    return out


def sample_dict(r: Mapping[Any, Any], prefix: str = "") -> Sample:
    """A stored sample as the API shows it: gauges read back as the float32 they were stored as."""
    values = [r[prefix + c] for c in METRIC_COLUMNS]
    gauges = float32_values([values[i] for i in _GAUGE_POSITIONS])
    for i, v in zip(_GAUGE_POSITIONS, gauges, strict=True):
        values[i] = v
    return {"timestamp": r[prefix + "timestamp"], **dict(zip(METRIC_COLUMNS, values, strict=True))}


def upsert_gpu_rows(db: Database, conn: Connection, rows: Sequence[GpuSighting], *, explicit_state: bool) -> None:
    """Insert or update GPUs and their nodes; identity follows the newest sighting."""
    if not rows:
        return
    _upsert_nodes(db, conn, rows)
    full = [
        {
            "uuid": r["uuid"],
            "hostname": r["hostname"],
            "gpu_index": r.get("gpu_index"),
            "model_name": r.get("model_name"),
            "serial": r.get("serial"),
            "pci_bus_id": r.get("pci_bus_id"),
            "ib_rail": r.get("ib_rail"),
            "state": r.get("state") or "active",
            "first_seen": r["first_seen"],
            "last_seen": r["last_seen"],
        }
        for r in rows
    ]
    ins = db.insert(T_GPUS)
    ex, g = ins.excluded, T_GPUS.c
    newer = ex.last_seen >= g.last_seen

    def newest(col: str) -> Any:
        return sa.case((sa.and_(newer, ex[col].is_not(None)), ex[col]), else_=g[col])

    # A GPU found lost was not seen: its last_seen stays the last time it really was ("not seen since T").
    last_seen = db.greatest(g.last_seen, ex.last_seen)
    if explicit_state:
        state: Any = ex.state
        last_seen = sa.case((ex.state == "lost", g.last_seen), else_=last_seen)
    else:  # a GPU that reports again (after it was marked lost) is no longer lost; retired stays retired
        # A sample no newer than the last one seen (a backfill, a replica re-pulling a window it took over)
        # is not a report again: it must not bring a GPU that has since fallen off the bus back to active.
        state = sa.case((sa.and_(g.state == "lost", ex.last_seen > g.last_seen), "active"), else_=g.state)
    conn.execute(
        ins.on_conflict_do_update(
            index_elements=["uuid"],
            set_={
                "hostname": newest("hostname"),
                "gpu_index": newest("gpu_index"),
                "model_name": newest("model_name"),
                "serial": sa.func.coalesce(ex.serial, g.serial),
                "pci_bus_id": sa.func.coalesce(ex.pci_bus_id, g.pci_bus_id),
                "ib_rail": sa.func.coalesce(ex.ib_rail, g.ib_rail),
                "state": state,
                "first_seen": db.least(g.first_seen, ex.first_seen),
                "last_seen": last_seen,
            },
        ),
        full,
    )


def _upsert_nodes(db: Database, conn: Connection, rows: Sequence[GpuSighting]) -> None:
    """Insert the sightings' nodes, or widen the span of time they were seen in."""
    nodes: dict[str, dict[str, Any]] = {}
    for r in rows:
        n = nodes.setdefault(r["hostname"], {"hostname": r["hostname"], "first_seen": r["first_seen"],
                                             "last_seen": r["last_seen"]})  # fmt: skip
        n["first_seen"] = min(n["first_seen"], r["first_seen"])
        n["last_seen"] = max(n["last_seen"], r["last_seen"])
    ins = db.insert(T_NODES)
    conn.execute(
        ins.on_conflict_do_update(
            index_elements=["hostname"],
            set_={
                "first_seen": db.least(T_NODES.c.first_seen, ins.excluded.first_seen),
                "last_seen": db.greatest(T_NODES.c.last_seen, ins.excluded.last_seen),
            },
        ),
        list(nodes.values()),
    )


def require_gpu(conn: Connection, uuid: str) -> None:
    """NotFound unless the GPU is known."""
    if conn.execute(sa.select(T_GPUS.c.uuid).where(T_GPUS.c.uuid == uuid)).first() is None:
        raise NotFound(f"GPU {uuid} not found")


def gpu_query() -> tuple[sa.Select[Any], Any, Any]:
    """GPUs with their latest score and active decision (one row each); also the score and decision tables."""
    g, s = T_GPUS, T_SCORES
    d = sa.select(T_DECISIONS).where(not_closed(T_DECISIONS.c.state)).subquery("d")
    q = sa.select(
        g.c.uuid, g.c.hostname, g.c.gpu_index, g.c.model_name, g.c.serial, g.c.pci_bus_id, g.c.state,
        g.c.first_seen, g.c.last_seen,
        s.c.risk, s.c.risk_ecc, s.c.risk_thermal, s.c.risk_pcie, s.c.scored_at, s.c.remedy, s.c.remedy_when,
        s.c.id.label("score_id"), s.c.reasons.label("score_reasons"),
        d.c.id.label("decision_id"), d.c.decision.label("active_decision"), d.c.reasons.label("decision_reasons"),
        d.c.state.label("decision_state"),
    ).select_from(
        g.outerjoin(s, s.c.id == g.c.latest_score_id).outerjoin(d, d.c.gpu_uuid == g.c.uuid)
    )  # fmt: skip
    return q, s, d


def gpu_item(r: Any) -> GpuItem:
    """A row of `gpu_query` as a listed GPU: the active decision, else "ok" once scored."""
    if r.active_decision is not None:
        decision, reasons = r.active_decision, list(r.decision_reasons or [])
    elif r.score_id is not None:
        decision, reasons = "ok", list(r.score_reasons or [])
    else:
        decision, reasons = None, []
    return {
        "uuid": r.uuid,
        "hostname": r.hostname,
        "gpu_index": r.gpu_index,
        "model_name": r.model_name,
        "serial": r.serial,
        "pci_bus_id": r.pci_bus_id,
        "state": r.state,
        "first_seen": r.first_seen,
        "last_seen": r.last_seen,
        "risk": r.risk,
        "risk_ecc": r.risk_ecc,
        "risk_thermal": r.risk_thermal,
        "risk_pcie": r.risk_pcie,
        "scored_at": r.scored_at,
        "decision": decision,
        "reasons": reasons,
        "decision_id": r.decision_id,
        "decision_state": r.decision_state,
        "remedy": r.remedy,
        "remedy_when": r.remedy_when,
    }


def _decision_is(decision: str | Sequence[str], s: Any, d: Any) -> Any:
    """`gpu_query`'s rows whose listed decision is `decision`, or one of several (StoreError if unknown)."""
    wanted = [decision] if isinstance(decision, str) else list(decision)
    for w in wanted:
        choice(w, DECISIONS, "decision")
    clauses = [d.c.decision.in_([w for w in wanted if w != "ok"])]
    if "ok" in wanted:  # scored, and no open decision
        clauses.append(sa.and_(d.c.id.is_(None), s.c.id.is_not(None)))
    return sa.or_(*clauses)


def _by_urgency(s: Any, d: Any) -> tuple[Any, ...]:
    """`gpu_query`'s order, most urgent first: the listed decision's severity (an open decision's, ok once
    scored, unscored last), then risk (unknown last), then UUID, so that pages join up. In the database
    query, on SQLite and PostgreSQL alike, so a page is a slice of the whole order."""
    severity = sa.case(
        *((d.c.decision == name, rank) for name, rank in SEVERITY.items() if name != "ok"),
        (s.c.id.is_not(None), SEVERITY["ok"]),
        else_=-1,
    )
    return severity.desc(), s.c.risk.desc().nulls_last(), T_GPUS.c.uuid


def _sighting(g: Any, i: int) -> GpuSighting:
    """A GpuRow checked and turned into the row `upsert_gpu_rows` writes."""
    if not isinstance(g, Mapping):
        raise StoreError(f"GPU {i}: expected a mapping, got {type(g).__name__}")
    seen = utc(g.get("seen_at"), f"GPU {i}: seen_at")
    idx = non_negative_int(g.get("gpu_index"), f"GPU {i}: gpu_index")
    state = g.get("state")
    if state is not None:
        choice(state, GPU_STATES, f"GPU {i}: state")
    return {
        "uuid": text(g.get("uuid"), f"GPU {i}: uuid", max_len=64),
        "hostname": text(g.get("hostname"), f"GPU {i}: hostname"),
        "gpu_index": idx,
        "model_name": text(g.get("model_name"), f"GPU {i}: model_name", required=False),
        "serial": text(g.get("serial"), f"GPU {i}: serial", required=False, max_len=64),
        "pci_bus_id": text(g.get("pci_bus_id"), f"GPU {i}: pci_bus_id", required=False, max_len=32),
        "ib_rail": text(g.get("ib_rail"), f"GPU {i}: ib_rail", required=False, max_len=255),
        "state": state,
        "first_seen": seen,
        "last_seen": seen,
    }


class Gpus:
    """The GPUs and nodes the store knows, with their latest score, decision and sample."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def upsert(self, gpus: Sequence[GpuRow | Mapping[str, Any]]) -> None:
        """Record GPUs seen: uuid, hostname, gpu_index, model_name, serial?, pci_bus_id?, ib_rail?, state?, seen_at."""
        rows = [_sighting(g, i) for i, g in enumerate(gpus)]
        with self.db.tx(write=True) as conn:
            explicit = [r for r in rows if r["state"] is not None]
            implicit = [r for r in rows if r["state"] is None]
            upsert_gpu_rows(self.db, conn, implicit, explicit_state=False)
            upsert_gpu_rows(self.db, conn, explicit, explicit_state=True)

    def set_rails(self, rails: Mapping[str, str]) -> int:
        """Keep each GPU's InfiniBand/RoCE ports (UUID -> "mlx5_3/1"), as fleet mode reads them from
        `gpuhealth_infiniband_port_gpu_info`; GPUs the store does not know are left out. Returns the GPUs changed."""
        return self._set_text(T_GPUS.c.ib_rail, rails, max_len=255)

    def set_bus_ids(self, buses: Mapping[str, str]) -> int:
        """Keep each GPU's PCI bus id (UUID -> "00000000:41:00.0"), as fleet mode reads it from its series'
        `pci_bus_id` label: with the host, the GPU's slot. GPUs the store does not know are left out.
        Returns the GPUs changed."""
        return self._set_text(T_GPUS.c.pci_bus_id, buses, max_len=32)

    def _set_text(self, column: sa.Column[Any], values: Mapping[str, str], *, max_len: int) -> int:
        """Set `column` of each known GPU (UUID -> its text) where it differs; returns the GPUs changed."""
        rows = [
            {"u": text(u, "uuid", max_len=64), "v": text(v, f"GPU {u}: {column.name}", max_len=max_len)}
            for u, v in values.items()
        ]
        if not rows:
            return 0
        stmt = (
            sa.update(T_GPUS)
            .where(T_GPUS.c.uuid == sa.bindparam("u"), sa.or_(column.is_(None), column != sa.bindparam("v")))
            .values({column.name: sa.bindparam("v")})
        )
        with self.db.tx(write=True) as conn:
            return int(conn.execute(stmt, rows).rowcount or 0)

    def find(
        self,
        *,
        hostname: str | None = None,
        decision: str | Sequence[str] | None = None,
        min_risk: float | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[GpuItem], int]:
        """GPUs by urgency: the decision (rma, drain, demote, watch, ok, unscored last), then the model's
        risk (highest first), then UUID; and how many match in all.

        `decision` is one or several; "ok" matches scored GPUs without an open decision.
        `min_risk` is the model's risk only: a GPU a rule drains may score low.
        """
        paging(limit, offset)
        q, s, d = gpu_query()
        if hostname is not None:
            q = q.where(T_GPUS.c.hostname == hostname)
        if decision is not None:
            q = q.where(_decision_is(decision, s, d))
        if min_risk is not None:
            q = q.where(s.c.risk >= optional_float(min_risk, "min_risk"))
        with self.db.tx() as conn:
            total = int(conn.execute(sa.select(sa.func.count()).select_from(q.subquery())).scalar_one())
            rows = conn.execute(q.order_by(*_by_urgency(s, d)).limit(limit).offset(offset)).all()
        return [gpu_item(r) for r in rows], total

    def identities(self) -> list[GpuIdentity]:
        """Every GPU's identity, state and last sighting, as a scoring round needs them: the lost
        GPUs first, in `find`'s order (a round appends those it did not score in that order), then
        the others by UUID. The gpus table alone, without `find`'s join to every GPU's latest score
        and decision (a tenth of its time at 10,000 GPUs); that join orders only the lost ones."""
        g = T_GPUS.c
        ordered: list[str] = []
        with self.db.tx() as conn:
            rows = list(
                conn.execute(
                    sa.select(g.uuid, g.hostname, g.gpu_index, g.model_name, g.state, g.last_seen).order_by(g.uuid)
                )
            )
            lost = {r[0] for r in rows if r[4] == "lost"}
            if lost:  # no IN list: SQLite bounds its length; a GPU lost since the first read is left out
                q, s, d = gpu_query()
                q = q.with_only_columns(g.uuid).where(g.state == "lost").order_by(*_by_urgency(s, d))
                ordered = [u for u in conn.scalars(q) if u in lost]
        first = {u: i for i, u in enumerate(ordered)}
        rows.sort(key=lambda r: first.get(r[0], len(first)))  # stable: the others stay by UUID
        return [
            {"uuid": r[0], "hostname": r[1], "gpu_index": r[2], "model_name": r[3], "state": r[4], "last_seen": r[5]}
            for r in rows
        ]

    @functools.cached_property
    def get_compiled(self) -> Compiled:
        """`get`'s statement, built and compiled once (building it cost more than running it):
        the GPU as `find` shows it, joined to its newest sample, columns prefixed "sample_"."""
        q, _, _ = gpu_query()
        g, sm, older = T_GPUS.c, samples.c, samples.alias("older").c
        newest = sa.select(sa.func.max(older.timestamp)).where(older.gpu_uuid == g.uuid).scalar_subquery()
        q = (
            q.add_columns(*(sm[c].label(f"{_SAMPLE}{c}") for c in ("timestamp", *METRIC_COLUMNS)))
            .outerjoin(samples, sa.and_(sm.gpu_uuid == g.uuid, sm.timestamp == newest))
            .where(g.uuid == sa.bindparam("uuid"))
        )
        return Compiled(q, self.db.engine.dialect)

    def get(self, uuid: str, *, wait: bool = True) -> GpuDetail:
        """One GPU as `find` shows it, plus its latest raw sample (or None); NotFound if unknown.

        The API's hottest read: one statement, compiled once and run on the driver's cursor
        with SQLAlchemy's own type conversions (a quarter of the time of a Core execute).
        Without `wait`, a locked SQLite file raises StoreUnavailable at once (see `Database.driver`).
        """
        with self.db.driver(wait) as raw:
            cur = raw.cursor()
            try:
                row = self.get_compiled.fetchone(cur, uuid=uuid)
            finally:
                cur.close()
        if row is None:
            raise NotFound(f"GPU {uuid} not found")
        latest = None if row[f"{_SAMPLE}timestamp"] is None else sample_dict(row, _SAMPLE)
        return {**gpu_item(SimpleNamespace(**row)), "latest_sample": latest}

    def latest_samples(self, uuids: Sequence[str] | None = None) -> dict[str, Sample]:
        """The newest raw sample of each GPU: uuid -> {timestamp, metric: value or None}."""
        s = samples.c
        newest = (
            sa.select(sa.func.max(s.timestamp)).where(s.gpu_uuid == T_GPUS.c.uuid).correlate(T_GPUS).scalar_subquery()
        )
        q = sa.select(samples).join(T_GPUS, sa.and_(s.gpu_uuid == T_GPUS.c.uuid, s.timestamp == newest))
        if uuids is not None:
            q = q.where(T_GPUS.c.uuid.in_(list(uuids)))
        with self.db.tx() as conn:
            rows = conn.execute(q).mappings().all()
        return {r["gpu_uuid"]: sample_dict(r) for r in rows}

    def node(self, hostname: str) -> Node:
        """A node, its GPUs (as `find` items) and how many GPUs carry each decision; NotFound if unknown."""
        with self.db.tx() as conn:
            node = conn.execute(sa.select(T_NODES).where(T_NODES.c.hostname == hostname)).mappings().first()
        if node is None:
            raise NotFound(f"node {hostname} not found")
        gpus, _ = self.find(hostname=hostname, limit=MAX_LIMIT)
        counts = dict.fromkeys((*DECISIONS, "unscored"), 0)
        for g in gpus:
            counts[g["decision"] or "unscored"] += 1
        return {
            "hostname": node["hostname"],
            "first_seen": node["first_seen"],
            "last_seen": node["last_seen"],
            "gpus": gpus,
            "counts": counts,
        }
