"""Replica leases: which replica of `serve --source prometheus` scores, pulls and acts on which hosts.

Hostnames map to `SHARDS` shards by a stable hash (CRC-32 of the name, the same in every
process and release). A replica says it is alive in `replicas` (`heartbeat_at`) and holds
shards in `shard_leases` until `expires_at`. The database decides who holds what:

- a claim is one UPDATE whose WHERE accepts only a shard that is free or expired, so two
  replicas never hold one shard at once (PostgreSQL locks the row; SQLite has one writer);
- time is the database's (`now()` on PostgreSQL) or a clock passed in (SQLite: one box; tests),
  never each replica's own, so clock skew between replicas cannot make two owners;
- fair share: a replica holding more than ceil(shards / live replicas) releases the rest, so a
  newcomer gets its part within a tick or two; a replica that stops renewing loses its shards
  when they expire and the others claim them;
- a scoring round writes only through `admit_round` in its own transaction: the shards still
  held (past a margin) and not yet written in that round, locked until the round commits and
  marked with the round's number, so no GPU is scored twice in one round even while a shard
  changes hands.

Lease rows are locked in shard order wherever several are updated (`_lock_own`), so a
replica's renewal and its own scoring transaction wait for each other instead of deadlocking.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from store.engine import Database
from store.errors import StoreError
from store.schema import T_LEASES, T_REPLICAS
from store.validate import text, utc

SHARDS = 64
"""Shards the fleet's hostnames are split into: far more than replicas anyone runs (a share
moves in 1/64ths), few enough that every tick reads the whole table."""
FORGET_AFTER = timedelta(days=1)
"""A replica silent this long is removed from `replicas` (its shards expired long before)."""


def shard_of(hostname: str, shards: int = SHARDS) -> int:
    """The shard of a hostname: CRC-32 of its UTF-8 bytes modulo `shards` (stable, unlike hash())."""
    return zlib.crc32(hostname.encode()) % shards


class LeaseTick(TypedDict):
    """What one heartbeat did and what the replica holds after it."""

    now: datetime
    """The database's time of the tick (every lease below is measured against it)."""
    held: dict[int, datetime]
    """Shard -> expires_at of every shard held after the tick."""
    live: int
    """Replicas whose heartbeat is younger than the lease, this one included."""
    target: int
    """ceil(shards / live): the most shards this replica keeps."""
    claimed: list[int]
    released: list[int]


class Lease(TypedDict):
    shard: int
    owner: str | None
    expires_at: datetime | None
    scored_round: int | None


class ReplicaInfo(TypedDict):
    replica_id: str
    started_at: datetime
    heartbeat_at: datetime
    info: dict[str, Any] | None


@dataclass
class RoundFence:
    """What a scoring round may write: `write_scores(…, fence=…)` admits the rows of the shards in
    `shards` that `replica_id` still holds for at least `margin` and that no replica wrote in
    `round` yet, and records `admitted` (the other rows are dropped)."""

    replica_id: str
    round: int
    shards: frozenset[int]
    margin: timedelta = timedelta(0)
    now: datetime | None = None
    """The time to judge expiry by; None: the database's."""
    shard_count: int = SHARDS
    admitted: frozenset[int] = frozenset()
    """Filled in by the write: the shards whose rows were stored."""

    def admits(self, hostname: str) -> bool:
        """Whether a row of `hostname` was admitted (after the write)."""
        return shard_of(hostname, self.shard_count) in self.admitted


def db_now(db: Database, conn: Connection, now: datetime | None = None) -> datetime:
    """`now` if given, else the database's time (PostgreSQL: now(); SQLite, one box: this clock)."""
    if now is not None:
        return utc(now, "now")
    if db.dialect == "postgresql":
        return utc(conn.execute(sa.select(sa.func.now())).scalar_one(), "now()")
    return datetime.now(UTC)


def _lock_own(db: Database, conn: Connection, where: Any) -> list[int]:
    """The shards matching `where`, locked for update in shard order (PostgreSQL; SQLite has one writer)."""
    c = T_LEASES.c
    q = sa.select(c.shard).where(where).order_by(c.shard)
    return list(conn.execute(q.with_for_update() if db.dialect == "postgresql" else q).scalars())


def admit_round(db: Database, conn: Connection, fence: RoundFence) -> frozenset[int]:
    """Inside a scoring round's write transaction: the fence's shards it may still write, locked
    until the transaction ends and marked as written in the round (see `RoundFence`)."""
    if not fence.shards:
        return frozenset()
    rid = text(fence.replica_id, "replica_id", max_len=255)
    t = db_now(db, conn, fence.now)
    c = T_LEASES.c
    ok = _lock_own(
        db,
        conn,
        sa.and_(
            c.owner == rid,
            c.shard.in_(sorted(fence.shards)),
            c.expires_at > t + fence.margin,
            sa.or_(c.scored_round.is_(None), c.scored_round < fence.round),
        ),
    )
    if ok:
        conn.execute(sa.update(T_LEASES).where(c.shard.in_(ok)).values(scored_round=fence.round))
    return frozenset(ok)


class Leases:
    """Heartbeats, claims, renewals, fair share and release of shard leases."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def tick(
        self,
        replica_id: str,
        lease: timedelta,
        *,
        shards: int = SHARDS,
        info: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> LeaseTick:
        """One heartbeat: say `replica_id` is alive, renew its shards for `lease`, give back what is
        over its fair share and claim free or expired shards up to it. One transaction."""
        rid = text(replica_id, "replica_id", max_len=255)
        if lease <= timedelta(0):
            raise StoreError(f"lease must be positive, got {lease}")
        if not 1 <= shards <= 1_000_000:
            raise StoreError(f"shards must be 1..1000000, got {shards}")
        c = T_LEASES.c
        with self.db.tx(write=True) as conn:
            t = db_now(self.db, conn, now)
            expires = t + lease
            self._ensure_shards(conn, shards)
            self._heartbeat(conn, rid, t, dict(info) if info is not None else None)
            r = T_REPLICAS.c
            live = int(conn.execute(sa.select(sa.func.count()).where(r.heartbeat_at > t - lease)).scalar_one())
            live = max(live, 1)  # this one, whatever a clock passed in says
            # Renewing an expired lease that nobody took is safe: a claim needs owner != us.
            held = _lock_own(self.db, conn, sa.and_(c.owner == rid, c.shard < shards))
            target = math.ceil(shards / live)
            released = held[target:]
            held = held[:target]
            if released:
                conn.execute(sa.update(T_LEASES).where(c.shard.in_(released)).values(owner=None, expires_at=None))
            if held:
                conn.execute(sa.update(T_LEASES).where(c.shard.in_(held)).values(expires_at=expires))
            claimed = self._claim(conn, rid, t, expires, shards, target - len(held)) if len(held) < target else []
        return {
            "now": t,
            "held": dict.fromkeys(sorted([*held, *claimed]), expires),
            "live": live,
            "target": target,
            "claimed": claimed,
            "released": released,
        }

    def _ensure_shards(self, conn: Connection, shards: int) -> None:
        """Write the shard rows the table lacks (the first replica ever; a larger SHARDS)."""
        have = int(conn.execute(sa.select(sa.func.count()).where(T_LEASES.c.shard < shards)).scalar_one())
        if have < shards:
            ins = self.db.insert(T_LEASES).on_conflict_do_nothing(index_elements=["shard"])
            conn.execute(ins, [{"shard": s} for s in range(shards)])

    def _heartbeat(self, conn: Connection, rid: str, t: datetime, info: dict[str, Any] | None) -> None:
        ins = self.db.insert(T_REPLICAS).values(replica_id=rid, started_at=t, heartbeat_at=t, info=info)
        conn.execute(ins.on_conflict_do_update(index_elements=["replica_id"], set_={"heartbeat_at": t, "info": info}))
        conn.execute(sa.delete(T_REPLICAS).where(T_REPLICAS.c.heartbeat_at < t - FORGET_AFTER))

    def _claim(self, conn: Connection, rid: str, t: datetime, expires: datetime, shards: int, n: int) -> list[int]:
        """Up to `n` free or expired shards for `rid`; a shard another replica is claiming is skipped."""
        c = T_LEASES.c
        free = sa.and_(c.shard < shards, sa.or_(c.owner.is_(None), c.expires_at.is_(None), c.expires_at < t))
        q = sa.select(c.shard).where(free).order_by(c.shard).limit(n)
        if self.db.dialect == "postgresql":
            q = q.with_for_update(skip_locked=True)
        candidates = list(conn.execute(q).scalars())
        if not candidates:
            return []
        # The WHERE repeats the test: whatever was read, the database accepts only a free shard.
        got = conn.execute(
            sa.update(T_LEASES)
            .where(c.shard.in_(candidates), free)
            .values(owner=rid, expires_at=expires)
            .returning(c.shard)
        ).scalars()
        return sorted(got)

    def release(self, replica_id: str) -> int:
        """Give back every shard `replica_id` holds and forget it (a clean shutdown); returns the shards."""
        rid = text(replica_id, "replica_id", max_len=255)
        c = T_LEASES.c
        with self.db.tx(write=True) as conn:
            mine = _lock_own(self.db, conn, c.owner == rid)
            if mine:
                conn.execute(sa.update(T_LEASES).where(c.shard.in_(mine)).values(owner=None, expires_at=None))
            conn.execute(sa.delete(T_REPLICAS).where(T_REPLICAS.c.replica_id == rid))
        return len(mine)

    def shards(self) -> list[Lease]:
        """Every shard's lease, by shard."""
        with self.db.tx() as conn:
            rows = conn.execute(sa.select(T_LEASES).order_by(T_LEASES.c.shard)).mappings().all()
        return [
            {"shard": r["shard"], "owner": r["owner"], "expires_at": r["expires_at"], "scored_round": r["scored_round"]}
            for r in rows
        ]

    def replicas(self) -> list[ReplicaInfo]:
        """Every replica that heartbeated within `FORGET_AFTER`, by id."""
        with self.db.tx() as conn:
            rows = conn.execute(sa.select(T_REPLICAS).order_by(T_REPLICAS.c.replica_id)).mappings().all()
        return [
            {"replica_id": r["replica_id"], "started_at": r["started_at"], "heartbeat_at": r["heartbeat_at"],
             "info": r["info"]}
            for r in rows
        ]  # fmt: skip


def hosts_in(hostnames: Collection[str], shards: Collection[int], shard_count: int = SHARDS) -> list[str]:
    """The hostnames whose shard is in `shards`, sorted."""
    mine = set(shards)
    return sorted(h for h in set(hostnames) if shard_of(h, shard_count) in mine)
