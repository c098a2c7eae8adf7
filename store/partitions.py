"""PostgreSQL: the raw `samples` table in one partition per UTC day, made at ingest, dropped by retention.

`samples` is `PARTITION BY RANGE ("timestamp")` (migration 0005); the partition of day D is
`samples_pYYYYMMDD` and holds [D 00:00 UTC, D+1 00:00 UTC). Ingest calls `ensure_days` before
its transaction: a day this process has already seen costs nothing, any other is looked up in the
catalogue and, when missing, created. Retention (`drop_before`) drops whole days instead of
running DELETE. SQLite has no partitions: every function here does nothing there.

A new partition is made as a plain table and then attached (ATTACH PARTITION takes only a SHARE
UPDATE EXCLUSIVE lock on `samples`, so readers and other ingests go on; CREATE TABLE … PARTITION
OF would take an ACCESS EXCLUSIVE one), under a transaction-level advisory lock so two processes
that both see a new day do it once. Dropping a partition does need ACCESS EXCLUSIVE on
`samples`: it waits at most `DROP_LOCK_TIMEOUT_MS` for readers, else the day goes at the next prune.
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pandas as pd
import psycopg
from sqlalchemy.engine import Connection

from store.engine import Database
from store.errors import StoreError

log = logging.getLogger(__name__)

PARENT = "samples"
PREFIX = "samples_p"
NAME_RE = re.compile(r"^samples_p\d{8}$")
CREATE_LOCK = 4714
"""Advisory lock key of partition creation (4713 is the migrations')."""
DROP_LOCK_TIMEOUT_MS = 5_000
"""How long a drop waits for the lock on `samples`; queries queue behind a waiting drop, so short."""
_FIRST, _LAST = date(1, 1, 1), date(9999, 12, 30)

_seen: weakref.WeakKeyDictionary[Database, set[date]] = weakref.WeakKeyDictionary()
_seen_lock = threading.Lock()

_LIST_SQL = r"""
SELECT c.relname,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), $$FROM \('([^']*)'\)$$))[1]::timestamptz,
       (regexp_match(pg_get_expr(c.relpartbound, c.oid), $$TO \('([^']*)'\)$$))[1]::timestamptz
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'samples'::regclass
ORDER BY 2 NULLS FIRST, 1
"""


@dataclass(frozen=True)
class Partition:
    """One partition of `samples` and its bounds [start, end); None: unbounded (MINVALUE, MAXVALUE, DEFAULT)."""

    name: str
    start: datetime | None
    end: datetime | None

    def covers(self, day: date) -> bool:
        """Whether the whole UTC day lies in this partition."""
        lo, hi = day_start(day), day_start(day + timedelta(days=1))
        return (self.start is None or self.start <= lo) and self.end is not None and hi <= self.end


def day_start(day: date) -> datetime:
    """00:00 UTC of `day`, timezone-aware."""
    return datetime.combine(day, time(), UTC)


def partition_name(day: date) -> str:
    """samples_pYYYYMMDD."""
    return f"{PREFIX}{day.year:04d}{day.month:02d}{day.day:02d}"


def is_partition_name(name: str) -> bool:
    """Whether `name` is a day partition of `samples` (by its name)."""
    return NAME_RE.match(name) is not None


def days_of(timestamps: pd.Series | pd.DatetimeIndex) -> list[date]:
    """The distinct UTC days of aware timestamps (a validated history frame's column), oldest first."""
    ts = pd.DatetimeIndex(timestamps)
    if ts.tz is None:
        raise StoreError("sample timestamps must be timezone-aware (UTC); validate the frame first")
    if ts.hasnans:
        raise StoreError("a sample has no timestamp (NaT); validate the frame first")
    return sorted({t.date() for t in ts.tz_convert(UTC).normalize().unique()})


def create_sql(day: date) -> list[str]:
    """The statements that make and attach day's partition (on a parent with its indexes, they are built too)."""
    if not _FIRST <= day <= _LAST:
        raise StoreError(f"no partition for a sample dated {day.isoformat()}: outside years 1 to 9999")
    name = partition_name(day)
    lo, hi = day_start(day), day_start(day + timedelta(days=1))
    return [
        f"CREATE TABLE IF NOT EXISTS {name} (LIKE {PARENT} INCLUDING DEFAULTS)",
        f"ALTER TABLE {PARENT} ATTACH PARTITION {name} "
        f"FOR VALUES FROM ('{lo.isoformat(sep=' ')}') TO ('{hi.isoformat(sep=' ')}')",
    ]


def list_partitions(conn: Connection) -> list[Partition]:
    """The partitions of `samples` with their bounds, oldest first ([] when it is not partitioned)."""
    if conn.dialect.name != "postgresql":
        return []
    return [Partition(r[0], r[1], r[2]) for r in conn.exec_driver_sql(_LIST_SQL)]


def _cache(db: Database) -> set[date]:
    with _seen_lock:
        return _seen.setdefault(db, set())


def ensure_days(db: Database, days: Iterable[date], *, today: date | None = None) -> int:
    """Make sure `samples` has a partition for each UTC day (PostgreSQL); returns how many were created.

    Runs in a transaction of its own, before the ingest's. Days from `today` (UTC, the wall
    clock) on that this process has seen are trusted without a query: no prune can have dropped
    them. Older days are looked up each time, since another process may have pruned them.
    """
    if db.dialect != "postgresql":
        return 0
    seen = _cache(db)
    today = today or datetime.now(UTC).date()
    todo = sorted(d for d in set(days) if d not in seen or d < today)
    if not todo:
        return 0
    with db.tx(write=True) as conn:
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({CREATE_LOCK})")
        parts = list_partitions(conn)
        missing = [d for d in todo if not any(p.covers(d) for p in parts)]
        for d in missing:
            for stmt in create_sql(d):
                conn.exec_driver_sql(stmt)
    if missing:
        log.info("created %d partition(s) of samples: %s", len(missing), ", ".join(map(partition_name, missing)))
    with _seen_lock:
        seen.update(todo)
    return len(missing)


def ensure_for(db: Database, timestamps: pd.Series) -> int:
    """`ensure_days` for the days of a validated frame's timestamps (what ingest calls)."""
    if db.dialect != "postgresql" or len(timestamps) == 0:
        return 0
    return ensure_days(db, days_of(timestamps))


def _lock_timed_out(err: StoreError) -> bool:
    cause: Any = err.__cause__
    return isinstance(getattr(cause, "orig", cause), psycopg.errors.LockNotAvailable)


def drop_before(db: Database, cutoff: datetime) -> int:
    """Drop every partition of `samples` that ends at or before `cutoff`; returns the rows they held.

    Rows are counted exactly (count(*)) in the dropping transaction just before the DROP. The
    part of the cutoff's own day before the cutoff stays until that whole day has passed. A drop
    that cannot get its lock within DROP_LOCK_TIMEOUT_MS stops here; the next prune goes on.
    """
    if db.dialect != "postgresql":
        return 0
    with db.tx() as conn:
        old = [p for p in list_partitions(conn) if p.end is not None and p.end <= cutoff]
    removed = 0
    for p in old:
        try:
            with db.tx(write=True) as conn:
                conn.exec_driver_sql(f"SET LOCAL lock_timeout = {DROP_LOCK_TIMEOUT_MS}")
                n = int(conn.exec_driver_sql(f'SELECT count(*) FROM "{p.name}"').scalar_one())
                conn.exec_driver_sql(f'DROP TABLE "{p.name}"')
        except StoreError as err:
            if not _lock_timed_out(err):
                raise
            log.warning("retention: %s is in use (lock wait over %d ms); dropped at the next prune",
                        p.name, DROP_LOCK_TIMEOUT_MS)  # fmt: skip
            break
        removed += n
        _forget(db, p)
    return removed


def _forget(db: Database, p: Partition) -> None:
    """Drop the days of a dropped partition from this process's cache."""
    seen = _cache(db)
    with _seen_lock:
        if p.start is None or p.end is None:
            seen.clear()
        else:
            seen.difference_update({d for d in seen if p.start <= day_start(d) < p.end})


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic autogenerate: leave out the day partitions of samples (made at ingest, not in the metadata)."""
    return not (type_ == "table" and reflected and compare_to is None and name is not None and is_partition_name(name))
