"""The store: telemetry, scores, decisions, labels, alerts and probe results in SQLite or PostgreSQL.

One `Store` holds one Engine; every call takes its own connection and transaction, so the
scoring loop, the ingest thread and API workers can share it. Bulk paths (ingest, history,
prune) use the driver's cursor directly (executemany on SQLite, COPY on PostgreSQL) and
build numpy arrays, never one ORM object per sample; everything else is SQLAlchemy Core.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pandas as pd
import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Dialect, Engine, make_url
from sqlalchemy.pool import StaticPool

from core import catalog, history
from core.history import FAILURE_MODES, HistoryError
from store.errors import NotFound, StoreError, StoreUnavailable
from store.retention import RISKS, Retention, merge_score_hours, rollup_scores
from store.schema import (
    ALERT_STATUSES,
    DECISION_STATES,
    DECISIONS,
    FAILURE_KINDS,
    GPU_STATES,
    METRIC_COLUMNS,
    PROBE_STATUSES,
    metadata,
    samples,
    samples_hourly,
)

log = logging.getLogger(__name__)

MIGRATIONS = Path(__file__).with_name("migrations")
PG_CONNECT_TIMEOUT_S = 3
"""A database that is down must fail a request fast (the API answers 503), not hang it."""
SQLITE_BUSY_TIMEOUT_MS = 5_000
"""Writers queue behind each other this long before SQLite says "database is locked" (the API then
answers 503; the ingest buffer keeps its rows and the scorer tries again next round)."""
SQLITE_PING_WAIT_MS = 3_000
"""How long a readiness check waits for SQLite's write lock: longer than any of our own write
transactions holds it, far shorter than a file another process keeps locked."""
INGEST_BATCH = 20_000
"""Rows converted to Python objects at a time: bounds ingest memory, big enough to amortise calls."""
FETCH_BATCH = 50_000
PRUNE_GPUS_PER_TX = 64
"""Prune rolls up this many GPUs per transaction, so a first prune of a big database stays bounded."""
MAX_LIMIT = 10_000
CLOCK_SKEW = timedelta(minutes=5)
"""How far a sample may be dated past the caller's clock before `ingest(not_after=now + CLOCK_SKEW)`
refuses it as from the future."""
UNSET_ALERT_TIME = "0001-01-01T00:00:00Z"
"""Alertmanager's endsAt for an alert without an end."""
_WRITE = "gpuhealth_write"
_GAUGES = frozenset(c for c in METRIC_COLUMNS if catalog.BY_NAME[c].kind == "gauge")
_METRIC_SET = frozenset(METRIC_COLUMNS)
_GAUGE_POSITIONS = tuple(i for i, c in enumerate(METRIC_COLUMNS) if c in _GAUGES)
_SAMPLE = "sample_"
"""The prefix of the sample columns in get_gpu's one statement."""
_SQLITE_TS = "%Y-%m-%d %H:%M:%S.%f"
"""SQLAlchemy's own SQLite DATETIME text: bulk paths write the same so comparisons stay textual."""

T_NODES = metadata.tables["nodes"]
T_GPUS = metadata.tables["gpus"]
T_SCORES = metadata.tables["risk_scores"]
T_DECISIONS = metadata.tables["decisions"]
T_FAILURES = metadata.tables["failures"]
T_ALERTS = metadata.tables["alerts"]
T_PROBES = metadata.tables["probe_results"]
T_SCORES_HOURLY = metadata.tables["risk_scores_hourly"]
ALERT_COLUMN_CHARS = {
    c.name: c.type.length for c in T_ALERTS.columns if isinstance(c.type, sa.String) and c.type.length
}
"""The alert columns of limited length: a longer label value is cut to fit (it stays whole in `labels`)."""


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic configured in code: the packaged migrations, run on `connection`."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def _utc(value: Any, what: str) -> datetime:
    """An aware UTC datetime; naive means UTC (as in history files); anything else is an error."""
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if not isinstance(value, datetime):
        raise StoreError(f"{what} must be a datetime, got {value!r}")
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset
        raise StoreError(f"{what}: time {value.isoformat()} is out of range") from None


def _parse_time(value: Any, what: str) -> datetime:
    """RFC 3339 text (Alertmanager's, with nanoseconds) or a datetime, as aware UTC."""
    if isinstance(value, datetime):
        return _utc(value, what)
    if not isinstance(value, str):
        raise StoreError(f"{what} must be an RFC 3339 time, got {value!r}")
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.strip())  # Go writes nanoseconds; Python takes micro
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise StoreError(f"{what}: invalid time {value!r}; use RFC 3339 (2026-01-31T12:00:00Z)") from None
    return _utc(t, what)


def _float(value: Any, what: str) -> float | None:
    """A finite float or None (None and NaN mean "unknown")."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise StoreError(f"{what} must be a number or null, got {value!r}")
    f = float(value)
    if math.isnan(f):
        return None
    if math.isinf(f):
        raise StoreError(f"{what} must be finite, got {value!r}")
    return f


def _text(value: Any, what: str, *, required: bool = True, max_len: int = 255) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise StoreError(f"{what} is required")
        return None
    if not isinstance(value, str):
        raise StoreError(f"{what} must be a string, got {value!r}")
    if len(value) > max_len:
        raise StoreError(f"{what} is longer than {max_len} characters")
    return value


def _clean(text: str) -> str:
    """Text without NUL characters: PostgreSQL refuses them in text, SQLite keeps them; both store this."""
    return text.replace("\x00", "") if "\x00" in text else text


def _clean_or_none(value: Any) -> str | None:
    return _clean(value) if isinstance(value, str) else None


def _string_map(value: Any, what: str) -> dict[str, str]:
    """Labels or annotations as a dict of NUL-free strings; kept whole (the JSON column has no limit)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StoreError(f"{what} must be an object of strings")
    return {_clean(str(k)): _clean(str(v)) for k, v in value.items()}


def _choice(value: Any, allowed: Sequence[str], what: str) -> str:
    if value not in allowed:
        raise StoreError(f"unknown {what} {value!r}; use one of {', '.join(allowed)}")
    return str(value)


def _reasons(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence | np.ndarray):
        raise StoreError(f"{what} must be a list of strings, got {value!r}")
    out = list(value)
    if not all(isinstance(r, str) for r in out):
        raise StoreError(f"{what} must be a list of strings, got {value!r}")
    return out


def _not_closed(state: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """`state != 'closed'` with the literal written into the SQL: the active-decision index is partial
    on exactly this condition, and SQLite re-prepares a statement on every run when a bound value
    decides whether it may use a partial index (45 µs instead of 8 for a GPU lookup)."""
    return state != sa.literal_column("'closed'")


def _paging(limit: int, offset: int) -> None:
    if not 0 <= limit <= MAX_LIMIT:
        raise StoreError(f"limit must be 0..{MAX_LIMIT}, got {limit}")
    if offset < 0:
        raise StoreError(f"offset must be >= 0, got {offset}")


class _Compiled:
    """A Core statement compiled once for a dialect, run on a DB-API cursor with its result types applied."""

    def __init__(self, stmt: sa.Select[Any], dialect: Dialect) -> None:
        self.dialect = dialect
        self.compiled = stmt.compile(dialect=dialect)
        self.sql = str(self.compiled)
        self.columns = list(stmt.selected_columns)
        self.keys = [str(c.key) for c in self.columns]
        self.procs: list[tuple[int, Any]] | None = None
        self.order = self.compiled.positiontup  # None where the driver takes named parameters
        fixed = sorted(k for k, b in self.compiled.binds.items() if not b.required)
        if fixed:  # the caller passes every parameter, as the driver takes it
            raise ValueError(f"bound values in a compiled statement: {fixed}; write them into the SQL")

    def fetchone(self, cur: Any, **params: Any) -> dict[str, Any] | None:
        order = self.order
        cur.execute(self.sql, [params[k] for k in order] if order is not None else params)
        if self.procs is None:  # the driver's column types (PostgreSQL needs them) are known after a run
            d = self.dialect
            procs = (
                c.type.dialect_impl(d).result_processor(d, desc[1])
                for c, desc in zip(self.columns, cur.description, strict=True)
            )
            self.procs = [(i, proc) for i, proc in enumerate(procs) if proc is not None]
        row = cur.fetchone()
        if row is None:
            return None
        values = list(row)
        for i, proc in self.procs:
            values[i] = proc(values[i])
        return dict(zip(self.keys, values, strict=True))


def _float32_values(values: Sequence[float | None]) -> list[float | None]:
    """Float32 values as the shortest decimals that read back as them: 0.1, not 0.10000000149.

    Gauges are float32, and SQLite hands them back widened to double. orjson writes float32
    the shortest way; reading that back costs 2 µs for a sample's gauges, a tenth of numpy's
    str() per value. None, NaN and infinities come back as None (JSON null either way).
    """
    arr = np.array(values, dtype=np.float32)  # None -> NaN
    out: list[float | None] = orjson.loads(orjson.dumps(arr, option=orjson.OPT_SERIALIZE_NUMPY))
    return out


def _known_reason(err: BaseException) -> str | None:
    """The short, address-free cause of a connection-level error we recognise, else None."""
    low = " ".join(str(getattr(err, "orig", None) or err).split()).lower()
    for needle, short in (
        ("connection refused", "connection refused"),
        ("timeout expired", "connection timed out"),
        ("could not translate host name", "unknown host"),
        ("no such file or directory", "no server listening"),
        ("server closed the connection", "the server closed the connection"),
        ("terminating connection", "the server closed the connection"),
        ("the database system is", "the server is starting up or shutting down"),
        ("database is locked", "database is locked"),
        ("unable to open database file", "unable to open the database file"),
        ("password authentication failed", "authentication failed"),
    ):
        if needle in low:
            return short
    return None


def _reason_of(err: BaseException) -> str:
    """A short, one-line reason for a database error (the driver's first line)."""
    return _known_reason(err) or " ".join(str(getattr(err, "orig", None) or err).split())[:300]


class Store:
    """Telemetry, risk scores, decisions, failure labels, alerts and probe results (SQLite or PostgreSQL)."""

    def __init__(self, url: str) -> None:
        """Create the engine (no connection yet); most callers want `Store.open`."""
        self._url = self._parse_url(url)
        self.url = self._url.render_as_string(hide_password=True)
        self.dialect = self._url.get_backend_name()
        self._warned: set[str] = set()
        self._engine = self._create_engine(self._url)
        # get_gpu's per-thread read connections (SQLite files only; see _driver)
        file_db = self.dialect == "sqlite" and self._url.database not in (None, "", ":memory:")
        self._reader: threading.local | None = threading.local() if file_db else None
        self._readers: list[Any] = []
        self._readers_lock = threading.Lock()

    @classmethod
    def open(cls, url: str, *, upgrade: bool = True) -> Store:
        """Open the database at `url`; with `upgrade`, bring its schema to the newest migration."""
        store = cls(url)
        if upgrade:
            try:
                store.upgrade()
            except BaseException:
                store.close()
                raise
        return store

    def __repr__(self) -> str:
        return f"Store({self.url})"

    __str__ = __repr__

    # -- engine, connections, errors --------------------------------------------------------

    @staticmethod
    def _parse_url(url: str) -> URL:
        try:
            u = make_url(url)
        except (sa_exc.ArgumentError, ValueError, TypeError):
            raise StoreError(
                f"invalid database URL {url!r}: use sqlite:///path/to/file.db or postgresql+psycopg://user:pw@host/db"
            ) from None
        if u.drivername in ("postgresql", "postgres"):  # psycopg (3) is the driver we ship
            u = u.set(drivername="postgresql+psycopg")
        backend = u.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise StoreError(f"unsupported database {u.drivername!r}: use sqlite:///FILE or postgresql+psycopg://…")
        if backend == "postgresql" and u.get_driver_name() != "psycopg":
            raise StoreError(f"unsupported driver {u.drivername!r}: use postgresql+psycopg://…")
        if backend == "sqlite" and u.database not in (None, "", ":memory:"):
            path = Path(u.database)
            if not path.parent.is_dir():
                raise StoreError(f"cannot open {url}: directory {path.parent} does not exist")
            if path.is_dir():
                raise StoreError(f"cannot open {url}: {path} is a directory")
        return u

    @staticmethod
    def _create_engine(u: URL) -> Engine:
        if u.get_backend_name() == "postgresql":
            return sa.create_engine(
                u,
                pool_pre_ping=True,  # a restarted server leaves dead pooled connections behind
                connect_args={
                    "connect_timeout": PG_CONNECT_TIMEOUT_S,
                    "application_name": "gpuhealth",
                    "options": "-c timezone=UTC",  # zone-less text and returned datetimes are UTC
                },
            )
        memory = u.database in (None, "", ":memory:")
        engine = sa.create_engine(
            u,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            **({"poolclass": StaticPool} if memory else {}),
        )

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
            # We emit BEGIN ourselves: pysqlite's implicit BEGIN is deferred and comes late.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.close()

        @sa.event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # Writers take the write lock up front: a deferred transaction that reads and then
            # writes can fail at once with "database is locked" when another writer got there first.
            immediate = conn.get_execution_options().get(_WRITE, False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    def _translate(self, err: BaseException) -> StoreError:
        orig = getattr(err, "orig", None) or err
        unavailable = isinstance(err, sa_exc.DBAPIError) and err.connection_invalidated
        unavailable |= isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError)
        if isinstance(orig, sqlite3.OperationalError):
            low = str(orig).lower()
            unavailable |= any(w in low for w in ("locked", "unable to open", "disk i/o", "readonly", "busy"))
        if unavailable:
            # The message (logs, the CLI) says where; `reason` (API answers) only what, since
            # a driver's text names the host, port and user.
            public = _known_reason(err) or "unreachable (the server log says why)"
            return StoreUnavailable(f"cannot reach the database at {self.url}: {_reason_of(err)}", public)
        return StoreError(f"database error: {_reason_of(err)}")

    @contextmanager
    def _tx(self, write: bool = False) -> Iterator[Connection]:
        """A connection in a transaction (committed on success); driver errors become StoreErrors."""
        try:
            with self._engine.connect() as conn:
                if write:
                    conn.execution_options(**{_WRITE: True})
                with conn.begin():
                    yield conn
        except (sa_exc.StatementError, psycopg.Error, sqlite3.Error) as err:
            raise self._translate(err) from err

    def upgrade(self) -> None:
        """Bring the schema to the newest migration (`gpuhealth db upgrade`)."""
        with self._tx(write=True) as conn:
            if self.dialect == "postgresql":
                # Two processes upgrading at once (serve and the CLI) must not both create tables.
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(4713)")
            command.upgrade(alembic_config(conn), "head")

    def revision(self) -> str | None:
        """The schema's current migration, or None for an empty database."""
        from alembic.runtime.migration import MigrationContext

        with self._tx() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def close(self) -> None:
        """Close every pooled connection and every thread's read connection."""
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for raw in readers:
            raw.close()
        self._engine.dispose()

    def ping(self) -> None:
        """Raises StoreUnavailable when the database cannot be reached or cannot take a write now.

        PostgreSQL: SELECT 1 (its row locks never keep a new transaction out). SQLite: the
        write lock is taken and given back, waiting at most `SQLITE_PING_WAIT_MS`, so a file
        that another process keeps locked is reported instead of answering SELECT 1 happily.
        """
        if self.dialect != "sqlite":
            with self._tx() as conn:
                conn.exec_driver_sql("SELECT 1")
            return
        try:
            with self._engine.connect() as conn:
                raw: Any = conn.connection.driver_connection
                raw.execute(f"PRAGMA busy_timeout={SQLITE_PING_WAIT_MS}")
                try:
                    raw.execute("BEGIN IMMEDIATE")
                    raw.execute("ROLLBACK")
                finally:
                    raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        except (sa_exc.StatementError, sqlite3.Error) as err:
            raise self._translate(err) from err

    # -- dialect helpers --------------------------------------------------------------------

    def _insert(self, table: sa.Table) -> Any:
        """INSERT with ON CONFLICT support on either backend."""
        return (pg_dialect.insert if self.dialect == "postgresql" else sqlite_dialect.insert)(table)

    def _least(self, a: Any, b: Any) -> Any:
        return sa.func.least(a, b) if self.dialect == "postgresql" else sa.func.min(a, b)

    def _greatest(self, a: Any, b: Any) -> Any:
        return sa.func.greatest(a, b) if self.dialect == "postgresql" else sa.func.max(a, b)

    @property
    def _ph(self) -> str:
        """The driver's placeholder (sqlite3: ?, psycopg: %s)."""
        return "%s" if self.dialect == "postgresql" else "?"

    def _bind_ts(self, t: datetime) -> Any:
        """A datetime as the driver should receive it in raw SQL."""
        return t if self.dialect == "postgresql" else t.astimezone(UTC).strftime(_SQLITE_TS)

    def _ts_us(self, col: str) -> str:
        """SQL for a timestamp column as integer microseconds since the epoch."""
        if self.dialect == "postgresql":
            return f"(EXTRACT(EPOCH FROM {col}) * 1000000)::bigint"
        return f"(CAST(strftime('%s', {col}) AS INTEGER) * 1000000 + CAST(substr({col}, 21, 6) AS INTEGER))"

    @staticmethod
    def _q(name: str) -> str:
        return f'"{name}"'

    # -- telemetry --------------------------------------------------------------------------

    def ingest(self, frame: pd.DataFrame, *, not_after: datetime | None = None) -> int:
        """Store a history frame; returns the rows newly inserted (repeated samples are skipped).

        Rows dated after `not_after` (the caller's clock plus its skew; None for simulated and
        replayed time) are refused and logged: one sample from the future would otherwise
        become every later reader's idea of "newest" (the fleet-mode watermark).
        """
        if not isinstance(frame, pd.DataFrame):
            raise StoreError(f"ingest needs a history frame (pandas DataFrame), got {type(frame).__name__}")
        try:
            f = history.validate(frame, source="ingest")
        except HistoryError as err:
            raise StoreError(str(err)) from None
        if not_after is not None and len(f):
            ahead = (f["timestamp"] > pd.Timestamp(_utc(not_after, "not_after"))).to_numpy()
            if ahead.any():
                log.warning(
                    "ingest: refused %d sample(s) dated after %s (up to %s, GPU %s): a clock is wrong",
                    int(ahead.sum()), _utc(not_after, "not_after").isoformat(),
                    f["timestamp"][ahead].max().isoformat(), f["gpu_uuid"][ahead].iloc[0],
                )  # fmt: skip
                f = f[~ahead].reset_index(drop=True)
        if len(f) == 0:
            return 0
        unknown = [c for c in history.metric_columns(f) if c not in _METRIC_SET]
        new_unknown = [c for c in unknown if c not in self._warned]
        if new_unknown:
            self._warned.update(new_unknown)
            log.warning("ingest: ignoring column(s) not in the catalogue: %s", ", ".join(new_unknown))
        cols = [c for c in METRIC_COLUMNS if c in f.columns]
        per_gpu = f.groupby("gpu_uuid", observed=True, sort=False).agg(
            first_seen=("timestamp", "min"),
            last_seen=("timestamp", "max"),
            hostname=("hostname", "last"),  # the frame is in time order: last = newest
            gpu_index=("gpu_index", "last"),
            model_name=("model_name", "last"),
        )
        gpus = [
            {
                "uuid": str(uuid),
                "hostname": str(r.hostname),
                "gpu_index": int(r.gpu_index),
                "model_name": str(r.model_name),
                "first_seen": r.first_seen.to_pydatetime(),
                "last_seen": r.last_seen.to_pydatetime(),
            }
            for uuid, r in zip(per_gpu.index, per_gpu.itertuples(index=False), strict=True)  # not iterrows: 10x
        ]
        with self._tx(write=True) as conn:
            self._upsert_gpu_rows(conn, gpus, explicit_state=False)
            return self._insert_samples(conn, f, cols)

    def _upsert_gpu_rows(self, conn: Connection, rows: list[dict[str, Any]], *, explicit_state: bool) -> None:
        """Insert or update GPUs and their nodes; identity follows the newest sighting."""
        if not rows:
            return
        nodes: dict[str, dict[str, Any]] = {}
        for r in rows:
            n = nodes.setdefault(r["hostname"], {"hostname": r["hostname"], "first_seen": r["first_seen"],
                                                 "last_seen": r["last_seen"]})  # fmt: skip
            n["first_seen"] = min(n["first_seen"], r["first_seen"])
            n["last_seen"] = max(n["last_seen"], r["last_seen"])
        ins = self._insert(T_NODES)
        conn.execute(
            ins.on_conflict_do_update(
                index_elements=["hostname"],
                set_={
                    "first_seen": self._least(T_NODES.c.first_seen, ins.excluded.first_seen),
                    "last_seen": self._greatest(T_NODES.c.last_seen, ins.excluded.last_seen),
                },
            ),
            list(nodes.values()),
        )
        full = [
            {
                "uuid": r["uuid"],
                "hostname": r["hostname"],
                "gpu_index": r.get("gpu_index"),
                "model_name": r.get("model_name"),
                "serial": r.get("serial"),
                "pci_bus_id": r.get("pci_bus_id"),
                "state": r.get("state") or "active",
                "first_seen": r["first_seen"],
                "last_seen": r["last_seen"],
            }
            for r in rows
        ]
        ins = self._insert(T_GPUS)
        ex, g = ins.excluded, T_GPUS.c
        newer = ex.last_seen >= g.last_seen

        def newest(col: str) -> Any:
            return sa.case((sa.and_(newer, ex[col].is_not(None)), ex[col]), else_=g[col])

        if explicit_state:
            state: Any = ex.state
        else:  # a GPU that reports again is no longer lost; retired stays retired
            state = sa.case((g.state == "lost", "active"), else_=g.state)
        conn.execute(
            ins.on_conflict_do_update(
                index_elements=["uuid"],
                set_={
                    "hostname": newest("hostname"),
                    "gpu_index": newest("gpu_index"),
                    "model_name": newest("model_name"),
                    "serial": sa.func.coalesce(ex.serial, g.serial),
                    "pci_bus_id": sa.func.coalesce(ex.pci_bus_id, g.pci_bus_id),
                    "state": state,
                    "first_seen": self._least(g.first_seen, ex.first_seen),
                    "last_seen": self._greatest(g.last_seen, ex.last_seen),
                },
            ),
            full,
        )

    def _insert_samples(self, conn: Connection, f: pd.DataFrame, cols: list[str]) -> int:
        """Bulk insert through the driver; (gpu_uuid, timestamp) already stored are skipped."""
        uuids = np.asarray(f["gpu_uuid"].cat.categories, dtype=object)[f["gpu_uuid"].cat.codes.to_numpy()]
        ts = f["timestamp"].to_numpy(dtype="datetime64[us]")
        names = ", ".join(self._q(c) for c in ["gpu_uuid", "timestamp", *cols])
        raw = conn.connection.driver_connection
        inserted = 0
        if self.dialect == "postgresql":
            assert isinstance(raw, psycopg.Connection)
            with raw.cursor() as cur:
                # COPY into a scratch table, then one INSERT … ON CONFLICT DO NOTHING: far fewer
                # round trips than executemany, and repeated samples are skipped by the database.
                cur.execute("CREATE TEMP TABLE _gpuhealth_ingest (LIKE samples) ON COMMIT DROP")
                with cur.copy(f"COPY _gpuhealth_ingest ({names}) FROM STDIN") as copy:
                    for rows in self._sample_rows(f, uuids, ts, cols, sep="T"):
                        for row in rows:
                            copy.write_row(row)
                cur.execute(
                    f"INSERT INTO samples ({names}) SELECT {names} FROM _gpuhealth_ingest ON CONFLICT DO NOTHING"
                )
                inserted = max(cur.rowcount, 0)
                cur.execute("DROP TABLE _gpuhealth_ingest")
        else:
            assert isinstance(raw, sqlite3.Connection)
            sql = f"INSERT INTO samples ({names}) VALUES ({', '.join(['?'] * (len(cols) + 2))}) ON CONFLICT DO NOTHING"
            scur = raw.cursor()
            try:
                for rows in self._sample_rows(f, uuids, ts, cols, sep=" "):
                    scur.executemany(sql, rows)
                    inserted += max(scur.rowcount, 0)
            finally:
                scur.close()
        return inserted

    @staticmethod
    def _sample_rows(
        f: pd.DataFrame, uuids: np.ndarray, ts: np.ndarray, cols: list[str], sep: str
    ) -> Iterator[list[tuple[Any, ...]]]:
        """Rows as tuples of plain Python values (NaN -> None), INGEST_BATCH at a time."""
        text = np.datetime_as_string(ts, unit="us")  # 2026-01-31T12:00:00.000000, no zone: UTC
        if sep != "T":  # SQLAlchemy's SQLite DATETIME text has a space; swap it in place, vectorised
            chars = text.view(np.uint32).reshape(len(text), -1)
            chars[:, 10] = ord(sep)
        values = {c: f[c].to_numpy(dtype=np.float64) for c in cols}
        for start in range(0, len(f), INGEST_BATCH):
            stop = start + INGEST_BATCH
            columns: list[list[Any]] = [uuids[start:stop].tolist(), text[start:stop].tolist()]
            for c in cols:
                v = values[c][start:stop]
                nan = np.isnan(v)
                if sep != "T" or not nan.any():
                    columns.append(v.tolist())  # SQLite stores a bound NaN as NULL by itself
                else:
                    obj = v.astype(object)
                    obj[nan] = None
                    columns.append(obj.tolist())
            yield list(zip(*columns, strict=True))

    def upsert_gpus(self, gpus: Sequence[Mapping[str, Any]]) -> None:
        """Record GPUs seen: uuid, hostname, gpu_index, model_name, serial?, pci_bus_id?, state?, seen_at."""
        rows: list[dict[str, Any]] = []
        for i, g in enumerate(gpus):
            if not isinstance(g, Mapping):
                raise StoreError(f"GPU {i}: expected a mapping, got {type(g).__name__}")
            seen = _utc(g.get("seen_at"), f"GPU {i}: seen_at")
            idx = g.get("gpu_index")
            if idx is not None and (isinstance(idx, bool) or not isinstance(idx, int | np.integer) or idx < 0):
                raise StoreError(f"GPU {i}: gpu_index must be an integer >= 0, got {idx!r}")
            state = g.get("state")
            if state is not None:
                _choice(state, GPU_STATES, f"GPU {i}: state")
            rows.append(
                {
                    "uuid": _text(g.get("uuid"), f"GPU {i}: uuid", max_len=64),
                    "hostname": _text(g.get("hostname"), f"GPU {i}: hostname"),
                    "gpu_index": None if idx is None else int(idx),
                    "model_name": _text(g.get("model_name"), f"GPU {i}: model_name", required=False),
                    "serial": _text(g.get("serial"), f"GPU {i}: serial", required=False, max_len=64),
                    "pci_bus_id": _text(g.get("pci_bus_id"), f"GPU {i}: pci_bus_id", required=False, max_len=32),
                    "state": state,
                    "first_seen": seen,
                    "last_seen": seen,
                }
            )
        with self._tx(write=True) as conn:
            explicit = [r for r in rows if r["state"] is not None]
            implicit = [r for r in rows if r["state"] is None]
            self._upsert_gpu_rows(conn, implicit, explicit_state=False)
            self._upsert_gpu_rows(conn, explicit, explicit_state=True)

    def _fetch_block(
        self, conn: Connection, sql: str, params: Sequence[Any], n_extra: int, *, stream: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run `sql` (gpu_uuid, ts_us, extra…, metrics…) through the driver into arrays.

        Returns (uuids as objects, ts_us int64, values float64 of shape (rows, n_extra + metrics)),
        NULL as NaN. Rows are fetched FETCH_BATCH at a time (server-side cursor on PostgreSQL).
        """
        raw: Any = conn.connection.driver_connection
        width = n_extra + len(METRIC_COLUMNS)
        u_parts: list[np.ndarray] = []
        t_parts: list[np.ndarray] = []
        v_parts: list[np.ndarray] = []
        if self.dialect == "postgresql" and stream:
            assert isinstance(raw, psycopg.Connection)
            cur: Any = raw.cursor(name="gpuhealth_fetch")
        else:
            cur = raw.cursor()
        try:
            cur.execute(sql, tuple(params))
            while chunk := cur.fetchmany(FETCH_BATCH):
                a = np.array(chunk, dtype=object)
                u_parts.append(a[:, 0])
                t_parts.append(a[:, 1].astype(np.int64))
                v_parts.append(a[:, 2:].astype(np.float64))  # None -> NaN
        finally:
            cur.close()
        if not u_parts:
            return np.empty(0, dtype=object), np.empty(0, dtype=np.int64), np.empty((0, width))
        return np.concatenate(u_parts), np.concatenate(t_parts), np.concatenate(v_parts)

    def _metric_select(
        self,
        table: str,
        ts_col: str,
        extra: Sequence[str],
        since: datetime | None,
        until: datetime | None,
        uuids: Sequence[str] | None,
        until_inclusive: bool = True,
    ) -> tuple[str, list[Any]]:
        where, params = self._where(ts_col, since, until, uuids, until_inclusive)
        cols = ", ".join(self._q(c) for c in METRIC_COLUMNS)
        lead = ", ".join(["gpu_uuid", self._ts_us(self._q(ts_col)), *extra])
        return f"SELECT {lead}, {cols} FROM {table}{where}", params

    def _where(
        self,
        ts_col: str,
        since: datetime | None,
        until: datetime | None,
        uuids: Sequence[str] | None,
        until_inclusive: bool = True,
    ) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if since is not None:
            clauses.append(f"{self._q(ts_col)} >= {self._ph}")
            params.append(self._bind_ts(since))
        if until is not None:
            clauses.append(f"{self._q(ts_col)} {'<=' if until_inclusive else '<'} {self._ph}")
            params.append(self._bind_ts(until))
        if uuids is not None:
            clauses.append(f"gpu_uuid IN ({', '.join([self._ph] * len(uuids))})")
            params.extend(uuids)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), params

    def history(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        uuids: Sequence[str] | None = None,
        include_hourly: bool = False,
    ) -> pd.DataFrame:
        """Stored telemetry as a valid history frame, sorted by (gpu_uuid, timestamp).

        Identity columns come from the GPU's current record; metric columns that are NULL in
        every returned row are left out. `include_hourly` adds the hourly roll-ups older than
        each GPU's first raw sample (timestamp = start of the hour).
        """
        t0 = None if since is None else _utc(since, "since")
        t1 = None if until is None else _utc(until, "until")
        ids = None if uuids is None else [_text(u, "uuid", max_len=64) or "" for u in uuids]
        if ids is not None and not ids:
            return history.empty(())
        with self._tx() as conn:
            sql, params = self._metric_select("samples", "timestamp", (), t0, t1, ids)
            u, ts, v = self._fetch_block(conn, sql, params, 0, stream=True)
            if include_hourly:
                sql, params = self._metric_select("samples_hourly", "hour", (), t0, t1, ids)
                hu, hts, hv = self._fetch_block(conn, sql, params, 0, stream=True)
                if len(hu):
                    first_raw = pd.Series(ts).groupby(u).min() if len(u) else pd.Series(dtype=np.int64)
                    limit = pd.Series(hu).map(first_raw).to_numpy(dtype=np.float64, na_value=np.inf)
                    keep = hts < limit
                    u = np.concatenate([u, hu[keep]])
                    ts = np.concatenate([ts, hts[keep]])
                    v = np.concatenate([v, hv[keep]])
            ident = self._identities(conn, sorted(set(u.tolist())))
        return self._frame(u, ts, v, ident)

    def _identities(self, conn: Connection, uuids: list[str]) -> dict[str, tuple[str, int, str]]:
        out: dict[str, tuple[str, int, str]] = {}
        g = T_GPUS.c
        for start in range(0, len(uuids), 1000):
            part = uuids[start : start + 1000]
            for row in conn.execute(sa.select(g.uuid, g.hostname, g.gpu_index, g.model_name).where(g.uuid.in_(part))):
                out[row.uuid] = (
                    row.hostname,
                    -1 if row.gpu_index is None else int(row.gpu_index),
                    row.model_name or "unknown",
                )
        return out

    @staticmethod
    def _frame(u: np.ndarray, ts: np.ndarray, v: np.ndarray, ident: Mapping[str, tuple[str, int, str]]) -> pd.DataFrame:
        """Arrays from the database as a history frame with validate()'s dtypes."""
        if len(u) == 0:
            return history.empty(())
        codes, uniques = pd.factorize(u, sort=True)
        order = np.lexsort((ts, codes))
        codes = codes[order]
        info = [ident.get(x, ("unknown", -1, "unknown")) for x in uniques]

        def category(values: list[str]) -> pd.Categorical:
            c, cats = pd.factorize(np.asarray(values, dtype=object), sort=True)
            return pd.Categorical.from_codes(c[codes], categories=pd.Index(cats, dtype=str))

        data: dict[str, Any] = {
            "timestamp": pd.to_datetime(ts[order], unit="us", utc=True).astype("datetime64[ns, UTC]"),
            "hostname": category([i[0] for i in info]),
            "gpu_uuid": pd.Categorical.from_codes(codes, categories=pd.Index(list(uniques), dtype=str)),
            "gpu_index": np.asarray([i[1] for i in info], dtype=np.int32)[codes],
            "model_name": category([i[2] for i in info]),
        }
        v = v[order]
        for j, name in enumerate(METRIC_COLUMNS):
            col = v[:, j]
            if not np.isnan(col).all():
                data[name] = col.astype(history.metric_dtype(name))
        return pd.DataFrame(data, index=pd.RangeIndex(len(codes)), copy=False)

    def newest_sample_time(self, until: datetime | None = None) -> datetime | None:
        """The timestamp of the newest raw sample of any GPU, at or before `until` if given (None when none)."""
        q = sa.select(sa.func.max(samples.c.timestamp))
        if until is not None:
            q = q.where(samples.c.timestamp <= _utc(until, "until"))
        with self._tx() as conn:
            t = conn.execute(q).scalar_one()
        return None if t is None else _utc(t, "newest sample")

    def latest_samples(self, uuids: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
        """The newest raw sample of each GPU: uuid -> {timestamp, metric: value or None}."""
        s = samples.c
        newest = (
            sa.select(sa.func.max(s.timestamp)).where(s.gpu_uuid == T_GPUS.c.uuid).correlate(T_GPUS).scalar_subquery()
        )
        q = sa.select(samples).join(T_GPUS, sa.and_(s.gpu_uuid == T_GPUS.c.uuid, s.timestamp == newest))
        if uuids is not None:
            q = q.where(T_GPUS.c.uuid.in_(list(uuids)))
        with self._tx() as conn:
            rows = conn.execute(q).mappings().all()
        return {r["gpu_uuid"]: self._sample_dict(r) for r in rows}

    @staticmethod
    def _sample_dict(r: Any, prefix: str = "") -> dict[str, Any]:
        """A stored sample as the API shows it: gauges read back as the float32 they were stored as."""
        values = [r[prefix + c] for c in METRIC_COLUMNS]
        gauges = _float32_values([values[i] for i in _GAUGE_POSITIONS])
        for i, v in zip(_GAUGE_POSITIONS, gauges, strict=True):
            values[i] = v
        return {"timestamp": r[prefix + "timestamp"], **dict(zip(METRIC_COLUMNS, values, strict=True))}

    def prune(self, now: datetime, retention: timedelta) -> tuple[int, int]:
        """Roll raw samples older than now - retention (whole hours) into samples_hourly and delete them.

        Returns (hour rows written, raw samples deleted). The rows rolled up are exactly those
        deleted (DELETE … RETURNING), so a sample ingested meanwhile is never lost; a late sample
        for an hour already rolled up is merged into it. Running it again changes nothing.
        """
        now = _utc(now, "now")
        if not isinstance(retention, timedelta) or retention <= timedelta(0):
            raise StoreError(f"retention must be a positive timedelta, got {retention!r}")
        cutoff = (now - retention).replace(minute=0, second=0, microsecond=0)
        with self._tx() as conn:
            gpus = [
                r[0] for r in conn.execute(sa.select(samples.c.gpu_uuid).where(samples.c.timestamp < cutoff).distinct())
            ]
        rolled = deleted = 0
        for start in range(0, len(gpus), PRUNE_GPUS_PER_TX):
            part = gpus[start : start + PRUNE_GPUS_PER_TX]
            with self._tx(write=True) as conn:
                where, params = self._where("timestamp", None, cutoff, part, until_inclusive=False)
                cols = ", ".join(self._q(c) for c in METRIC_COLUMNS)
                sql = f"DELETE FROM samples{where} RETURNING gpu_uuid, {self._ts_us(self._q('timestamp'))}, {cols}"
                u, ts, v = self._fetch_block(conn, sql, params, 0, stream=False)
                if not len(u):
                    continue
                hourly = self._rollup(u, ts, v)
                hourly = self._merge_hourly(conn, hourly, part)
                self._write_hourly(conn, hourly)
                rolled += len(hourly)
                deleted += len(u)
        return rolled, deleted

    def apply_retention(self, now: datetime, retention: Retention) -> dict[str, int]:
        """Roll up and delete what each table keeps no longer (see `store.retention`); rows per kind.

        Idempotent: a second run at the same `now` changes nothing. Failures and open
        decisions are never deleted.
        """
        now = _utc(now, "now")
        out: dict[str, int] = {}
        out["sample_hours_written"], out["samples_rolled_up"] = self.prune(now, retention.samples)
        out["score_hours_written"], out["scores_rolled_up"] = self._prune_scores(now - retention.scores)
        d, a, p = T_DECISIONS.c, T_ALERTS.c, T_PROBES.c
        deletes = {
            "sample_hours_deleted": sa.delete(samples_hourly).where(samples_hourly.c.hour < now - retention.hourly),
            "score_hours_deleted": sa.delete(T_SCORES_HOURLY).where(T_SCORES_HOURLY.c.hour < now - retention.hourly),
            "decisions_deleted": sa.delete(T_DECISIONS).where(
                d.state == "closed", d.closed_at < now - retention.decisions
            ),
            "alerts_deleted": sa.delete(T_ALERTS).where(a.received_at < now - retention.alerts),
            "probes_deleted": sa.delete(T_PROBES).where(p.ran_at < now - retention.probes),
        }
        with self._tx(write=True) as conn:
            for kind, stmt in deletes.items():
                out[kind] = int(conn.execute(stmt).rowcount or 0)
        return out

    def _prune_scores(self, before: datetime) -> tuple[int, int]:
        """Roll raw scores older than `before` (whole hours) into risk_scores_hourly and delete them.

        Returns (hour rows written, scores deleted); as for samples, the rows rolled up are
        exactly those deleted, and an hour already rolled up is merged with, not replaced.
        """
        cutoff = before.replace(minute=0, second=0, microsecond=0)
        s, h = T_SCORES.c, T_SCORES_HOURLY.c
        with self._tx() as conn:
            gpus = [r[0] for r in conn.execute(sa.select(s.gpu_uuid).where(s.scored_at < cutoff).distinct())]
        written = deleted = 0
        kept = ("n", *RISKS, "decision", "reasons")
        for start in range(0, len(gpus), PRUNE_GPUS_PER_TX):
            part = gpus[start : start + PRUNE_GPUS_PER_TX]
            with self._tx(write=True) as conn:
                gone = conn.execute(
                    sa.delete(T_SCORES)
                    .where(s.scored_at < cutoff, s.gpu_uuid.in_(part))
                    .returning(s.gpu_uuid, s.scored_at, *(s[c] for c in RISKS), s.decision, s.reasons)
                ).mappings().all()  # fmt: skip
                if not gone:
                    continue
                hours = rollup_scores([dict(r) for r in gone])
                stored = conn.execute(
                    sa.select(T_SCORES_HOURLY).where(
                        h.gpu_uuid.in_(part), h.hour >= hours["hour"].min(), h.hour <= hours["hour"].max()
                    )
                ).mappings().all()  # fmt: skip
                old = pd.DataFrame([dict(r) for r in stored], columns=["gpu_uuid", "hour", *kept])
                old["hour"] = pd.to_datetime(old["hour"], utc=True)
                merged = merge_score_hours(hours, old)
                rows = [
                    {"gpu_uuid": r["gpu_uuid"], "hour": r["hour"].to_pydatetime(), "n": int(r["n"]),
                     "decision": r["decision"], "reasons": list(r["reasons"] or []),
                     **{c: None if pd.isna(r[c]) else float(r[c]) for c in RISKS}}
                    for r in merged.to_dict("records")
                ]  # fmt: skip
                ins = self._insert(T_SCORES_HOURLY)
                conn.execute(
                    ins.on_conflict_do_update(
                        index_elements=["gpu_uuid", "hour"], set_={c: ins.excluded[c] for c in kept}
                    ),
                    rows,
                )
                written += len(rows)
                deleted += len(gone)
        return written, deleted

    @staticmethod
    def _rollup(u: np.ndarray, ts: np.ndarray, v: np.ndarray) -> pd.DataFrame:
        """Hour rows: gauges averaged, counters the last value seen, xid the largest code."""
        hour = ts - ts % 3_600_000_000
        df = pd.DataFrame(v, columns=list(METRIC_COLUMNS))
        df.insert(0, "ts", ts)
        df.insert(0, "hour", hour)
        df.insert(0, "gpu_uuid", u)
        df = df.sort_values(["gpu_uuid", "ts"], kind="stable")
        grouped = df.groupby(["gpu_uuid", "hour"], sort=True)
        gauges = [c for c in METRIC_COLUMNS if c in _GAUGES and c != "xid"]
        counters = [c for c in METRIC_COLUMNS if c not in _GAUGES]
        out = pd.concat(
            [
                grouped.size().rename("n"),
                grouped["ts"].max().rename("last_at"),
                grouped[gauges].mean(),
                grouped[counters].last(),  # last non-null: the counter's value at the end of the hour
                grouped[["xid"]].max(),
                grouped[gauges].count().add_suffix("__n"),  # per-column weights for a later merge
            ],
            axis=1,
        ).reset_index()
        return out[["gpu_uuid", "hour", "n", "last_at", *METRIC_COLUMNS, *(f"{c}__n" for c in gauges)]]

    def _merge_hourly(self, conn: Connection, new: pd.DataFrame, uuids: list[str]) -> pd.DataFrame:
        """Combine new hour rows with stored ones for the same (GPU, hour): a late sample's hour."""
        lo = datetime.fromtimestamp(int(new["hour"].min()) / 1e6, UTC)
        hi = datetime.fromtimestamp(int(new["hour"].max()) / 1e6, UTC)
        sql, params = self._metric_select("samples_hourly", "hour", ("n", self._ts_us("last_at")), lo, hi, uuids)
        u, ts, v = self._fetch_block(conn, sql, params, 2, stream=False)
        if not len(u):
            return new
        old = pd.DataFrame(v[:, 2:], columns=list(METRIC_COLUMNS))
        old.insert(0, "last_at", v[:, 1].astype(np.int64))
        old.insert(0, "n", v[:, 0].astype(np.int64))
        old.insert(0, "hour", ts)
        old.insert(0, "gpu_uuid", u)
        m = new.merge(old, on=["gpu_uuid", "hour"], how="left", suffixes=("", "_old"), indicator=True)
        both = (m["_merge"] == "both").to_numpy()
        if not both.any():
            return new
        n_new, n_old = m["n"].to_numpy(np.float64), m["n_old"].to_numpy(np.float64)
        newer = m["last_at"].to_numpy() >= m["last_at_old"].to_numpy(np.float64, na_value=-np.inf)
        out = m[["gpu_uuid", "hour"]].copy()
        for c in METRIC_COLUMNS:
            a, b = m[c].to_numpy(np.float64), m[f"{c}_old"].to_numpy(np.float64)
            if c == "xid":
                merged = np.fmax(a, b)
            elif c in _GAUGES:
                # Mean of the two parts weighted by their sample counts: exact for the new part (its
                # non-null count is known); the stored hour keeps only its row count n, so a stored
                # hour with gaps in this column is weighted a little too much.
                w = m[f"{c}__n"].to_numpy(np.float64)
                merged = np.where(np.isnan(a), b, np.where(np.isnan(b), a, (a * w + b * n_old) / (w + n_old)))
            else:  # the counter value of whichever part reaches later into the hour
                merged = np.where(newer, np.where(np.isnan(a), b, a), np.where(np.isnan(b), a, b))
            out[c] = np.where(both, merged, a)
        out["n"] = np.where(both, n_new + n_old, n_new).astype(np.int64)
        last_old = m["last_at_old"].to_numpy(np.float64)
        out["last_at"] = np.where(both, np.fmax(m["last_at"].to_numpy(np.float64), last_old), m["last_at"])
        out["last_at"] = out["last_at"].astype(np.int64)
        return out[["gpu_uuid", "hour", "n", "last_at", *METRIC_COLUMNS]]

    def _write_hourly(self, conn: Connection, hourly: pd.DataFrame) -> None:
        rows = []
        for rec in hourly.to_dict("records"):
            row: dict[str, Any] = {
                "gpu_uuid": rec["gpu_uuid"],
                "hour": datetime.fromtimestamp(int(rec["hour"]) / 1e6, UTC),
                "n": int(rec["n"]),
                "last_at": datetime.fromtimestamp(int(rec["last_at"]) // 1_000_000, UTC).replace(
                    microsecond=int(rec["last_at"]) % 1_000_000
                ),
            }
            for c in METRIC_COLUMNS:
                x = float(rec[c])
                row[c] = None if math.isnan(x) else x
            rows.append(row)
        ins = self._insert(samples_hourly)
        set_ = {c: ins.excluded[c] for c in ["n", "last_at", *METRIC_COLUMNS]}
        conn.execute(ins.on_conflict_do_update(index_elements=["gpu_uuid", "hour"], set_=set_), rows)

    # -- scores and decisions ---------------------------------------------------------------

    def write_scores(self, records: Sequence[Mapping[str, Any]], scored_at: datetime) -> list[dict[str, Any]]:
        """Store one scoring round and move each GPU's decision; returns the decisions it opened.

        Per GPU at most one decision is open (or acknowledged). A score of "ok" closes it; the
        same decision again refreshes its reasons (an acknowledgement stays); another decision
        closes it and opens a new one.
        """
        at = _utc(scored_at, "scored_at")
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        for i, r in enumerate(records):
            if not isinstance(r, Mapping):
                raise StoreError(f"score {i}: expected a mapping, got {type(r).__name__}")
            uuid = _text(r.get("gpu_uuid"), f"score {i}: gpu_uuid", max_len=64) or ""
            if uuid in seen:
                raise StoreError(f"score {i}: GPU {uuid} is scored twice in one round")
            seen.add(uuid)
            rows.append(
                {
                    "gpu_uuid": uuid,
                    "hostname": _text(r.get("hostname"), f"score {i}: hostname"),
                    "model_name": _text(r.get("model_name"), f"score {i}: model_name", required=False),
                    "scored_at": at,
                    **{
                        k: _float(r.get(k), f"score {i}: {k}")
                        for k in ("risk", "risk_ecc", "risk_thermal", "risk_pcie")
                    },
                    "decision": _choice(r.get("decision"), DECISIONS, f"score {i}: decision"),
                    "reasons": _reasons(r.get("reasons"), f"score {i}: reasons"),
                }
            )
        if not rows:
            return []
        with self._tx(write=True) as conn:
            # Scores may name GPUs that never sent telemetry here (scoring from Prometheus).
            known = {x[0] for x in conn.execute(sa.select(T_GPUS.c.uuid).where(T_GPUS.c.uuid.in_(list(seen))))}
            fresh = [
                {
                    "uuid": r["gpu_uuid"],
                    "hostname": r["hostname"],
                    "model_name": r["model_name"],
                    "first_seen": at,
                    "last_seen": at,
                }
                for r in rows
                if r["gpu_uuid"] not in known
            ]
            self._upsert_gpu_rows(conn, fresh, explicit_state=False)
            score_cols = [
                "gpu_uuid",
                "scored_at",
                "risk",
                "risk_ecc",
                "risk_thermal",
                "risk_pcie",
                "decision",
                "reasons",
            ]
            ids = (
                conn.execute(
                    sa.insert(T_SCORES).returning(T_SCORES.c.id, sort_by_parameter_order=True),
                    [{k: r[k] for k in score_cols} for r in rows],
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
            d = T_DECISIONS.c
            active = {
                x.gpu_uuid: x
                for x in conn.execute(
                    sa.select(d.id, d.gpu_uuid, d.decision)
                    .where(_not_closed(d.state))
                    .where(d.gpu_uuid.in_(list(seen)))
                )
            }
            close, refresh, open_ = [], [], []
            for r in rows:
                cur = active.get(r["gpu_uuid"])
                if cur is not None and cur.decision == r["decision"]:
                    refresh.append({"i": cur.id, "reasons": r["reasons"], "t": at})
                    continue
                if cur is not None:
                    close.append({"i": cur.id, "t": at})
                if r["decision"] != "ok":
                    open_.append(
                        {
                            "gpu_uuid": r["gpu_uuid"],
                            "decision": r["decision"],
                            "reasons": r["reasons"],
                            "created_at": at,
                            "updated_at": at,
                            "state": "open",
                        }
                    )
            by_id: Any = sa.bindparam("i")
            if close:
                conn.execute(
                    sa.update(T_DECISIONS).where(d.id == by_id)
                    .values(state="closed", closed_at=sa.bindparam("t"), updated_at=sa.bindparam("t")),
                    close,
                )  # fmt: skip
            if refresh:
                conn.execute(
                    sa.update(T_DECISIONS).where(d.id == by_id)
                    .values(reasons=sa.bindparam("reasons"), updated_at=sa.bindparam("t")),
                    refresh,
                )  # fmt: skip
            opened: list[int] = []
            if open_:
                opened = list(
                    conn.execute(sa.insert(T_DECISIONS).returning(d.id, sort_by_parameter_order=True), open_).scalars()
                )
            return self._decision_rows(conn, d.id.in_(opened), newest_first=False) if opened else []

    def _gpu_query(self) -> tuple[sa.Select[Any], Any, Any]:
        """GPUs with their latest score and active decision (one row each)."""
        g, s = T_GPUS, T_SCORES
        d = sa.select(T_DECISIONS).where(_not_closed(T_DECISIONS.c.state)).subquery("d")
        q = sa.select(
            g.c.uuid, g.c.hostname, g.c.gpu_index, g.c.model_name, g.c.serial, g.c.pci_bus_id, g.c.state,
            g.c.first_seen, g.c.last_seen,
            s.c.risk, s.c.risk_ecc, s.c.risk_thermal, s.c.risk_pcie, s.c.scored_at,
            s.c.id.label("score_id"), s.c.reasons.label("score_reasons"),
            d.c.id.label("decision_id"), d.c.decision.label("active_decision"), d.c.reasons.label("decision_reasons"),
            d.c.state.label("decision_state"),
        ).select_from(
            g.outerjoin(s, s.c.id == g.c.latest_score_id).outerjoin(d, d.c.gpu_uuid == g.c.uuid)
        )  # fmt: skip
        return q, s, d

    @staticmethod
    def _gpu_item(r: Any) -> dict[str, Any]:
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
        }

    def list_gpus(
        self,
        *,
        hostname: str | None = None,
        decision: str | None = None,
        min_risk: float | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[dict[str, Any]], int]:
        """GPUs by risk (highest first, unscored last), then UUID; and how many match in all.

        decision="ok" matches scored GPUs without an open decision.
        """
        _paging(limit, offset)
        q, s, d = self._gpu_query()
        if hostname is not None:
            q = q.where(T_GPUS.c.hostname == hostname)
        if decision is not None:
            _choice(decision, DECISIONS, "decision")
            q = (
                q.where(d.c.id.is_(None), s.c.id.is_not(None))
                if decision == "ok"
                else q.where(d.c.decision == decision)
            )
        if min_risk is not None:
            q = q.where(s.c.risk >= _float(min_risk, "min_risk"))
        with self._tx() as conn:
            total = int(conn.execute(sa.select(sa.func.count()).select_from(q.subquery())).scalar_one())
            rows = conn.execute(
                q.order_by(s.c.risk.desc().nulls_last(), T_GPUS.c.uuid).limit(limit).offset(offset)
            ).all()
        return [self._gpu_item(r) for r in rows], total

    @functools.cached_property
    def _get_gpu_compiled(self) -> _Compiled:
        """get_gpu's statement, built and compiled once (building it cost more than running it):
        the GPU as list_gpus shows it, joined to its newest sample, columns prefixed "sample_"."""
        q, _, _ = self._gpu_query()
        g, sm, older = T_GPUS.c, samples.c, samples.alias("older").c
        newest = sa.select(sa.func.max(older.timestamp)).where(older.gpu_uuid == g.uuid).scalar_subquery()
        q = (
            q.add_columns(*(sm[c].label(f"{_SAMPLE}{c}") for c in ("timestamp", *METRIC_COLUMNS)))
            .outerjoin(samples, sa.and_(sm.gpu_uuid == g.uuid, sm.timestamp == newest))
            .where(g.uuid == sa.bindparam("uuid"))
        )
        return _Compiled(q, self._engine.dialect)

    @contextmanager
    def _driver(self, wait: bool = True) -> Iterator[Any]:
        """The driver's own connection, for the hottest reads; errors become StoreErrors.

        A SQLite file gives each reading thread a connection of its own, outside the pool:
        checking one out and back in cost as much as the lookup. It is in autocommit mode, so
        between reads it holds no snapshot and never holds back a WAL checkpoint. PostgreSQL
        (and SQLite in memory, one shared connection) use the pool. Without `wait`, a SQLite
        file that is locked raises StoreUnavailable at once instead of waiting for the lock.
        """
        mine = self._reader
        try:
            if mine is None:
                with self._engine.connect() as conn:
                    yield conn.connection.driver_connection
                return
            raw: Any = getattr(mine, "conn", None)
            if raw is None:
                fairy = self._engine.raw_connection()  # with the connect-time PRAGMAs
                raw = fairy.dbapi_connection
                fairy.detach()  # ours now: the pool neither counts nor closes it
                with self._readers_lock:
                    self._readers.append(raw)
                mine.conn, mine.wait = raw, True
            if mine.wait != wait:
                raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS if wait else 0}")
                mine.wait = wait
            yield raw
        except (sa_exc.StatementError, psycopg.Error, sqlite3.Error) as err:
            if mine is not None and getattr(mine, "conn", None) is not None:
                self._drop_reader(mine)  # a fresh connection next time
            raise self._translate(err) from err

    def _drop_reader(self, mine: threading.local) -> None:
        raw, mine.conn = mine.conn, None
        with self._readers_lock:
            if raw in self._readers:
                self._readers.remove(raw)
        try:
            raw.close()
        except sqlite3.Error:
            log.debug("closing a broken read connection failed", exc_info=True)

    def get_gpu(self, uuid: str, *, wait: bool = True) -> dict[str, Any]:
        """One GPU as list_gpus shows it, plus its latest raw sample (or None); NotFound if unknown.

        The API's hottest read: one statement, compiled once and run on the driver's cursor
        with SQLAlchemy's own type conversions (a quarter of the time of a Core execute).
        Without `wait`, a locked SQLite file raises StoreUnavailable at once (see `_driver`).
        """
        with self._driver(wait) as raw:
            cur = raw.cursor()
            try:
                row = self._get_gpu_compiled.fetchone(cur, uuid=uuid)
            finally:
                cur.close()
        if row is None:
            raise NotFound(f"GPU {uuid} not found")
        item = self._gpu_item(SimpleNamespace(**row))
        item["latest_sample"] = None if row[f"{_SAMPLE}timestamp"] is None else self._sample_dict(row, _SAMPLE)
        return item

    def _require_gpu(self, conn: Connection, uuid: str) -> None:
        if conn.execute(sa.select(T_GPUS.c.uuid).where(T_GPUS.c.uuid == uuid)).first() is None:
            raise NotFound(f"GPU {uuid} not found")

    def risk_history(
        self, uuid: str, *, since: datetime | None = None, until: datetime | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """The GPU's newest `limit` scores in the window, oldest first; NotFound if unknown.

        Beyond the score retention a point stands for an hour (see `store.retention`)."""
        _paging(limit, 0)
        s, h = T_SCORES.c, T_SCORES_HOURLY.c
        raw = sa.select(s.scored_at, *(s[c] for c in RISKS), s.decision, s.reasons, s.id).where(s.gpu_uuid == uuid)
        # Beyond the score retention: one point per hour (its highest risks and worst decision).
        hourly = sa.select(
            h.hour.label("scored_at"), *(h[c] for c in RISKS), h.decision, h.reasons, sa.literal(0).label("id")
        ).where(h.gpu_uuid == uuid)
        if since is not None:
            raw = raw.where(s.scored_at >= _utc(since, "since"))
            hourly = hourly.where(h.hour >= _utc(since, "since"))
        if until is not None:
            raw = raw.where(s.scored_at <= _utc(until, "until"))
            hourly = hourly.where(h.hour <= _utc(until, "until"))
        both = sa.union_all(raw, hourly).subquery()
        q = sa.select(both).order_by(both.c.scored_at.desc(), both.c.id.desc()).limit(limit)
        with self._tx() as conn:
            self._require_gpu(conn, uuid)
            rows = conn.execute(q).mappings().all()
        return [
            {k: v for k, v in r.items() if k != "id"} | {"scored_at": _utc(r["scored_at"], "scored_at"),
                                                         "reasons": list(r["reasons"] or [])}
            for r in reversed(rows)
        ]  # fmt: skip

    def get_node(self, hostname: str) -> dict[str, Any]:
        """A node, its GPUs (as list_gpus items) and how many GPUs carry each decision; NotFound if unknown."""
        with self._tx() as conn:
            node = conn.execute(sa.select(T_NODES).where(T_NODES.c.hostname == hostname)).mappings().first()
        if node is None:
            raise NotFound(f"node {hostname} not found")
        gpus, _ = self.list_gpus(hostname=hostname, limit=MAX_LIMIT)
        counts = dict.fromkeys((*DECISIONS, "unscored"), 0)
        for g in gpus:
            counts[g["decision"] or "unscored"] += 1
        return dict(node) | {"gpus": gpus, "counts": counts}

    def _decision_rows(
        self, conn: Connection, where: Any, *, limit: int | None = None, offset: int = 0, newest_first: bool = True
    ) -> list[dict[str, Any]]:
        """Decisions matching `where`, with their GPU's identity and latest risk."""
        d, g, s = T_DECISIONS, T_GPUS, T_SCORES
        q = (
            sa.select(d, g.c.hostname, g.c.gpu_index, g.c.model_name, s.c.risk)
            .select_from(d.join(g, g.c.uuid == d.c.gpu_uuid).outerjoin(s, s.c.id == g.c.latest_score_id))
            .where(where)
            .order_by(*((d.c.created_at.desc(), d.c.id.desc()) if newest_first else (d.c.id,)))
            .offset(offset)
        )
        if limit is not None:
            q = q.limit(limit)
        return [self._decision_dict(r) for r in conn.execute(q).mappings()]

    @staticmethod
    def _decision_dict(r: Any) -> dict[str, Any]:
        keys = ("id", "gpu_uuid", "hostname", "gpu_index", "model_name", "decision", "reasons", "created_at",
                "updated_at", "state", "acknowledged_by", "acknowledged_at", "closed_at", "risk")  # fmt: skip
        out = {k: r[k] for k in keys}
        out["reasons"] = list(out["reasons"] or [])
        return out

    def decisions(
        self,
        *,
        decision: str | None = None,
        state: str | None = "open",
        hostname: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[dict[str, Any]], int]:
        """Decisions, newest first, and how many match; state "active" means open or acknowledged."""
        _paging(limit, offset)
        d = T_DECISIONS.c
        clauses: list[Any] = []
        if decision is not None:
            clauses.append(d.decision == _choice(decision, DECISIONS, "decision"))
        if state == "active":
            clauses.append(_not_closed(d.state))
        elif state is not None:
            clauses.append(d.state == _choice(state, (*DECISION_STATES, "active"), "state"))
        if hostname is not None:
            clauses.append(T_GPUS.c.hostname == hostname)
        where = sa.and_(sa.true(), *clauses)
        with self._tx() as conn:
            total = conn.execute(
                sa.select(sa.func.count())
                .select_from(T_DECISIONS.join(T_GPUS, T_GPUS.c.uuid == d.gpu_uuid))
                .where(where)
            ).scalar_one()
            return self._decision_rows(conn, where, limit=limit, offset=offset), int(total)

    def ack_decision(self, decision_id: int, by: str, at: datetime) -> dict[str, Any]:
        """Acknowledge a decision (idempotent: the first acknowledgement stays); closed ones refuse."""
        who = _text(by, "acknowledged_by")
        when = _utc(at, "acknowledged_at")
        d = T_DECISIONS.c
        with self._tx(write=True) as conn:
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
            return self._decision_rows(conn, d.id == decision_id)[0]

    # -- labels, alerts, probes -------------------------------------------------------------

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
    ) -> dict[str, Any]:
        """Record a failure or RMA outcome (a training label); a GPU unknown here needs its hostname."""
        uuid = _text(gpu_uuid, "gpu_uuid", max_len=64)
        row: dict[str, Any] = {
            "gpu_uuid": uuid,
            "failed_at": _utc(failed_at, "failed_at"),
            "mode": _choice(mode, FAILURE_MODES, "failure mode"),
            "kind": _choice(kind, FAILURE_KINDS, "failure kind"),
            "hostname": _text(hostname, "hostname", required=False),
            "note": _text(note, "note", required=False, max_len=10_000),
            "recorded_by": _text(recorded_by, "recorded_by", required=False),
            "recorded_at": datetime.now(UTC),
        }
        if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int | np.integer) or xid < 0):
            raise StoreError(f"xid must be a non-negative integer, got {xid!r}")
        row["xid"] = None if xid is None else int(xid)
        with self._tx(write=True) as conn:
            known = conn.execute(sa.select(T_GPUS.c.hostname).where(T_GPUS.c.uuid == uuid)).first()
            if known is None and row["hostname"] is None:
                raise NotFound(f"GPU {uuid} not found; give its hostname to record a GPU that never reported here")
            if row["hostname"] is None and known is not None:
                row["hostname"] = known.hostname
            new_id = conn.execute(sa.insert(T_FAILURES).returning(T_FAILURES.c.id), row).scalar_one()
            out = conn.execute(sa.select(T_FAILURES).where(T_FAILURES.c.id == new_id)).mappings().one()
        return dict(out)

    def failures(self, *, since: datetime | None = None, limit: int = 1000) -> list[dict[str, Any]]:
        """Failure and RMA records, newest first."""
        _paging(limit, 0)
        f = T_FAILURES.c
        q = sa.select(T_FAILURES).order_by(f.failed_at.desc(), f.id.desc()).limit(limit)
        if since is not None:
            q = q.where(f.failed_at >= _utc(since, "since"))
        with self._tx() as conn:
            return [dict(r) for r in conn.execute(q).mappings()]

    def failures_frame(self) -> pd.DataFrame:
        """All failure labels in the history format (gpu_uuid, failed_at, mode, hostname, xid) for training.

        Failure and RMA records both count; a record repeating (gpu_uuid, failed_at, mode) is dropped.
        """
        f = T_FAILURES.c
        with self._tx() as conn:
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
        """Store an Alertmanager webhook (version 4) notification; returns the alerts stored.

        One row per alert instance (fingerprint, startsAt): a later notification about it (resolved,
        new annotations) updates that row. Alerts link to GPUs by their UUID label.
        """
        at = _utc(received_at, "received_at")
        if not isinstance(payload, Mapping):
            raise StoreError("Alertmanager payload must be a JSON object")
        version = payload.get("version")
        if version is not None and str(version) != "4":
            raise StoreError(f"unsupported Alertmanager payload version {version!r}; expected 4")
        alerts = payload.get("alerts")
        if not isinstance(alerts, list):
            raise StoreError("Alertmanager payload has no alerts list")
        group_key = payload.get("groupKey")
        receiver = payload.get("receiver")
        rows: dict[tuple[str, datetime], dict[str, Any]] = {}
        for i, a in enumerate(alerts):
            if not isinstance(a, Mapping):
                raise StoreError(f"alert {i}: expected an object, got {type(a).__name__}")
            labels = _string_map(a.get("labels"), f"alert {i}: labels")
            annotations = _string_map(a.get("annotations"), f"alert {i}: annotations")
            status = _choice(a.get("status"), ALERT_STATUSES, f"alert {i}: status")
            if a.get("startsAt") is None:
                raise StoreError(f"alert {i}: startsAt is required")
            starts = _parse_time(a.get("startsAt"), f"alert {i}: startsAt")
            ends_raw = a.get("endsAt")
            ends = None if ends_raw in (None, "", UNSET_ALERT_TIME) else _parse_time(ends_raw, f"alert {i}: endsAt")
            if ends is not None and ends.year <= 1:
                ends = None
            fingerprint = _clean(str(a.get("fingerprint") or ""))
            if not fingerprint or len(fingerprint) > ALERT_COLUMN_CHARS["fingerprint"]:
                # Alertmanager always sends one of 16 hex digits; other senders may send none, or a long one
                fingerprint = hashlib.sha256((fingerprint or json.dumps(labels, sort_keys=True)).encode()).hexdigest()[
                    :16
                ]
            instance = labels.get("instance")
            host = (
                labels.get("Hostname") or labels.get("hostname") or (instance.rsplit(":", 1)[0] if instance else None)
            )
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
                "generator_url": _clean_or_none(a.get("generatorURL")),
                "group_key": _clean_or_none(group_key),
                "receiver": _clean_or_none(receiver),
            }
            for col, n in ALERT_COLUMN_CHARS.items():  # the same on SQLite, which does not enforce lengths
                if isinstance(row[col], str) and len(row[col]) > n:
                    row[col] = row[col][:n]
            rows[(fingerprint, starts)] = row
        if not rows:
            return 0
        ins = self._insert(T_ALERTS)
        update = ("received_at", "status", "alertname", "severity", "action", "gpu_uuid", "hostname", "labels",
                  "annotations", "ends_at", "generator_url", "group_key", "receiver")  # fmt: skip
        with self._tx(write=True) as conn:
            conn.execute(
                ins.on_conflict_do_update(
                    index_elements=["fingerprint", "starts_at"], set_={c: ins.excluded[c] for c in update}
                ),
                list(rows.values()),
            )
        return len(rows)

    def alerts(
        self, *, status: str | None = None, gpu_uuid: str | None = None, limit: int = 100, offset: int = 0
    ) -> tuple[list[dict[str, Any]], int]:
        """Stored alerts, most recently received first, and how many match."""
        _paging(limit, offset)
        a = T_ALERTS.c
        where = sa.and_(sa.true())
        if status is not None:
            where = sa.and_(where, a.status == _choice(status, ALERT_STATUSES, "alert status"))
        if gpu_uuid is not None:
            where = sa.and_(where, a.gpu_uuid == gpu_uuid)
        with self._tx() as conn:
            total = conn.execute(sa.select(sa.func.count()).select_from(T_ALERTS).where(where)).scalar_one()
            rows = conn.execute(
                sa.select(T_ALERTS).where(where).order_by(a.received_at.desc(), a.id.desc()).limit(limit).offset(offset)
            ).mappings()
            return [dict(r) for r in rows], int(total)

    def add_probe_results(self, results: Sequence[Mapping[str, Any]]) -> int:
        """Store probe results: gpu_uuid, ran_at, test, status, value, unit, expected, ratio, duration_s, details."""
        rows = []
        for i, r in enumerate(results):
            if not isinstance(r, Mapping):
                raise StoreError(f"probe result {i}: expected a mapping, got {type(r).__name__}")
            details = r.get("details")
            if details is not None and not isinstance(details, Mapping):
                raise StoreError(f"probe result {i}: details must be an object")
            rows.append(
                {
                    "gpu_uuid": _text(r.get("gpu_uuid"), f"probe result {i}: gpu_uuid", max_len=64),
                    "ran_at": _utc(r.get("ran_at"), f"probe result {i}: ran_at"),
                    "test": _text(r.get("test"), f"probe result {i}: test", max_len=64),
                    "status": _choice(r.get("status"), PROBE_STATUSES, f"probe result {i}: status"),
                    "unit": _text(r.get("unit"), f"probe result {i}: unit", required=False, max_len=32),
                    "details": None if details is None else dict(details),
                    **{
                        k: _float(r.get(k), f"probe result {i}: {k}")
                        for k in ("value", "expected", "ratio", "duration_s")
                    },
                }
            )
        if not rows:
            return 0
        with self._tx(write=True) as conn:
            conn.execute(sa.insert(T_PROBES), rows)
        return len(rows)

    def probe_results(self, uuid: str, *, limit: int = 100) -> list[dict[str, Any]]:
        """A GPU's probe results, newest first; NotFound if the GPU is unknown."""
        _paging(limit, 0)
        p = T_PROBES.c
        with self._tx() as conn:
            self._require_gpu(conn, uuid)
            rows = conn.execute(
                sa.select(T_PROBES).where(p.gpu_uuid == uuid).order_by(p.ran_at.desc(), p.id.desc()).limit(limit)
            ).mappings()
            return [dict(r) for r in rows]

    def recent_probe_results(self, since: datetime, until: datetime | None = None) -> list[dict[str, Any]]:
        """Every GPU's probe results that ran in [since, until], oldest first (for the scoring loop)."""
        p = T_PROBES.c
        q = sa.select(T_PROBES).where(p.ran_at >= since)
        if until is not None:
            q = q.where(p.ran_at <= until)
        with self._tx() as conn:
            return [dict(r) for r in conn.execute(q.order_by(p.ran_at, p.id)).mappings()]

    def counts(self) -> dict[str, int]:
        """Row counts for /metrics: gpus, nodes, samples, …, and active decisions per decision value."""
        tables = {
            "gpus": T_GPUS,
            "nodes": T_NODES,
            "samples": samples,
            "samples_hourly": samples_hourly,
            "risk_scores": T_SCORES,
            "failures": T_FAILURES,
            "alerts": T_ALERTS,
            "probe_results": T_PROBES,
        }
        d = T_DECISIONS.c
        with self._tx() as conn:
            out = {
                k: int(conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()) for k, t in tables.items()
            }
            per: dict[str, int] = dict(
                conn.execute(
                    sa.select(d.decision, sa.func.count()).where(_not_closed(d.state)).group_by(d.decision)
                ).all()
            )
        for value in DECISIONS[1:]:
            out[f"decisions_{value}"] = int(per.get(value, 0))
        out["decisions_active"] = sum(int(v) for v in per.values())
        return out
