"""The database under the store: URL, engine, transactions, error translation and dialect SQL.

Every part of the store (`store.gpus`, `store.samples`, `store.decisions`, …) works through one
`Database`: it owns the SQLAlchemy Engine, turns driver errors into StoreErrors, writes the SQL
that differs between SQLite and PostgreSQL, and keeps the per-thread SQLite read connections of
the hottest read (`Gpus.get`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.util.exc import CommandError
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import URL, Connection, Dialect, Engine, make_url
from sqlalchemy.pool import StaticPool

from store.errors import StoreError, StoreUnavailable

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
SQLITE_TS = "%Y-%m-%d %H:%M:%S.%f"
"""SQLAlchemy's own SQLite DATETIME text: bulk paths write the same so comparisons stay textual."""
_WRITE = "gpuhealth_write"
_DRIVER_ERRORS = (sa_exc.StatementError, psycopg.Error, sqlite3.Error)


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic configured in code: the packaged migrations, run on `connection`."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    cfg.set_main_option("path_separator", "os")
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def parse_url(url: str) -> URL:
    """A database URL we support (SQLite file or memory, PostgreSQL through psycopg), checked."""
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


def create_engine(u: URL) -> Engine:
    """The Engine for `u`: PostgreSQL with a short connect timeout, SQLite in WAL mode with our own BEGINs."""
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


def known_reason(err: BaseException) -> str | None:
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


def reason_of(err: BaseException) -> str:
    """A short, one-line reason for a database error (the driver's first line)."""
    return known_reason(err) or " ".join(str(getattr(err, "orig", None) or err).split())[:300]


def not_closed(state: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """`state != 'closed'` with the literal written into the SQL: the active-decision index is partial
    on exactly this condition, and SQLite re-prepares a statement on every run when a bound value
    decides whether it may use a partial index (45 µs instead of 8 for a GPU lookup)."""
    return state != sa.literal_column("'closed'")


class Compiled:
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
        """Run the statement on `cur`; the first row as {column key: value}, or None."""
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


class Sql:
    """What raw SQL needs to know of a backend: placeholders, timestamps, INSERT … ON CONFLICT.

    A `Database` is one; a migration makes one from its connection's dialect name.
    """

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect

    def insert(self, table: sa.Table) -> Any:
        """INSERT with ON CONFLICT support on either backend."""
        return (pg_dialect.insert if self.dialect == "postgresql" else sqlite_dialect.insert)(table)

    def least(self, a: Any, b: Any) -> Any:
        """SQL for the smaller of two values."""
        return sa.func.least(a, b) if self.dialect == "postgresql" else sa.func.min(a, b)

    def greatest(self, a: Any, b: Any) -> Any:
        """SQL for the larger of two values."""
        return sa.func.greatest(a, b) if self.dialect == "postgresql" else sa.func.max(a, b)

    @property
    def ph(self) -> str:
        """The driver's placeholder (sqlite3: ?, psycopg: %s)."""
        return "%s" if self.dialect == "postgresql" else "?"

    def bind_ts(self, t: datetime) -> Any:
        """A datetime as the driver should receive it in raw SQL."""
        return t if self.dialect == "postgresql" else t.astimezone(UTC).strftime(SQLITE_TS)

    def ts_us(self, col: str) -> str:
        """SQL for a timestamp column as integer microseconds since the epoch."""
        if self.dialect == "postgresql":
            return f"(EXTRACT(EPOCH FROM {col}) * 1000000)::bigint"
        return f"(CAST(strftime('%s', {col}) AS INTEGER) * 1000000 + CAST(substr({col}, 21, 6) AS INTEGER))"


class Database(Sql):
    """One Engine and what every part of the store does with it: transactions, errors, dialect SQL."""

    def __init__(self, url: str) -> None:
        """Create the engine (no connection yet)."""
        self.url_parts = parse_url(url)
        self.url = self.url_parts.render_as_string(hide_password=True)
        super().__init__(self.url_parts.get_backend_name())
        self.engine = create_engine(self.url_parts)
        # Per-thread read connections (SQLite files only; see `driver`)
        file_db = self.dialect == "sqlite" and self.url_parts.database not in (None, "", ":memory:")
        self._reader: threading.local | None = threading.local() if file_db else None
        self.readers: list[Any] = []
        self._readers_lock = threading.Lock()

    # -- connections and errors -------------------------------------------------------------

    def translate(self, err: BaseException) -> StoreError:
        """A driver error as StoreUnavailable (the database is down, refused, locked) or StoreError."""
        orig = getattr(err, "orig", None) or err
        unavailable = isinstance(err, sa_exc.DBAPIError) and err.connection_invalidated
        unavailable |= isinstance(orig, psycopg.OperationalError | psycopg.InterfaceError)
        if isinstance(orig, sqlite3.OperationalError):
            low = str(orig).lower()
            unavailable |= any(w in low for w in ("locked", "unable to open", "disk i/o", "readonly", "busy"))
        if unavailable:
            # The message (logs, the CLI) says where; `reason` (API answers) only what, since
            # a driver's text names the host, port and user.
            public = known_reason(err) or "unreachable (the server log says why)"
            return StoreUnavailable(f"cannot reach the database at {self.url}: {reason_of(err)}", public)
        return StoreError(f"database error: {reason_of(err)}")

    @contextmanager
    def tx(self, write: bool = False) -> Iterator[Connection]:
        """A connection in a transaction (committed on success); driver errors become StoreErrors."""
        try:
            with self.engine.connect() as conn:
                if write:
                    conn.execution_options(**{_WRITE: True})
                with conn.begin():
                    yield conn
        except _DRIVER_ERRORS as err:
            raise self.translate(err) from err

    @contextmanager
    def driver(self, wait: bool = True) -> Iterator[Any]:
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
                with self.engine.connect() as conn:
                    dbapi: Any = conn.connection.driver_connection
                    yield dbapi
                    # End the read here, so the pool's rollback on return has nothing to do: psycopg
                    # forgets its prepared statements on a rollback, and Gpus.get would be planned on
                    # every call (3 ms instead of 0.5 with 36 day partitions of samples).
                    dbapi.commit()
                return
            raw: Any = getattr(mine, "conn", None)
            if raw is None:
                fairy = self.engine.raw_connection()  # with the connect-time PRAGMAs
                raw = fairy.dbapi_connection
                fairy.detach()  # ours now: the pool neither counts nor closes it
                with self._readers_lock:
                    self.readers.append(raw)
                mine.conn, mine.wait = raw, True
            if mine.wait != wait:
                raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS if wait else 0}")
                mine.wait = wait
            yield raw
        except _DRIVER_ERRORS as err:
            if mine is not None and getattr(mine, "conn", None) is not None:
                self._drop_reader(mine)  # a fresh connection next time
            raise self.translate(err) from err

    def _drop_reader(self, mine: threading.local) -> None:
        raw, mine.conn = mine.conn, None
        with self._readers_lock:
            if raw in self.readers:
                self.readers.remove(raw)
        try:
            raw.close()
        except sqlite3.Error:
            log.debug("closing a broken read connection failed", exc_info=True)

    def close(self) -> None:
        """Close every pooled connection and every thread's read connection."""
        with self._readers_lock:
            readers, self.readers = self.readers, []
        for raw in readers:
            raw.close()
        self.engine.dispose()

    def ping(self) -> None:
        """Raises StoreUnavailable when the database cannot be reached or cannot take a write now.

        PostgreSQL: SELECT 1 (its row locks never keep a new transaction out). SQLite: the
        write lock is taken and given back, waiting at most `SQLITE_PING_WAIT_MS`, so a file
        that another process keeps locked is reported instead of answering SELECT 1 happily.
        """
        if self.dialect != "sqlite":
            with self.tx() as conn:
                conn.exec_driver_sql("SELECT 1")
            return
        try:
            with self.engine.connect() as conn:
                raw: Any = conn.connection.driver_connection
                raw.execute(f"PRAGMA busy_timeout={SQLITE_PING_WAIT_MS}")
                try:
                    raw.execute("BEGIN IMMEDIATE")
                    raw.execute("ROLLBACK")
                finally:
                    raw.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        except (sa_exc.StatementError, sqlite3.Error) as err:
            raise self.translate(err) from err

    # -- migrations -------------------------------------------------------------------------

    def upgrade(self) -> None:
        """Bring the schema to the newest migration."""
        with self.tx(write=True) as conn:
            if self.dialect == "postgresql":
                # Two processes upgrading at once (serve and the CLI) must not both create tables.
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(4713)")
            try:
                command.upgrade(alembic_config(conn), "head")
            except CommandError as err:  # e.g. a schema a newer release upgraded: one line, not a traceback
                current = MigrationContext.configure(conn).get_current_revision()
                raise StoreError(
                    f"the database's schema is at revision {current}, which this release does not know (a newer "
                    f"release upgraded it?): run the newer release, or restore the backup taken before ({err})"
                ) from err

    def revision(self) -> str | None:
        """The schema's current migration, or None for an empty database."""
        with self.tx() as conn:
            return MigrationContext.configure(conn).get_current_revision()


def quote(name: str) -> str:
    """A column name quoted for raw SQL (both backends)."""
    return f'"{name}"'
