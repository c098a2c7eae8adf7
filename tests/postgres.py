"""A real PostgreSQL server for tests: the Debian package's binaries, on loopback, in a temp dir.

    server = start_postgres(tmp_dir)      # initdb + start; skips locally (fails in CI) without PostgreSQL
    url = server.create_database("t1")    # postgresql+psycopg://postgres@127.0.0.1:PORT/t1
    server.stop(); server.start()         # an outage: same port, same data
    server.close()                        # stop and remove the data

initdb refuses to run as root, and CI runs tests as root: then the server runs as the
`postgres` system user (runuser) in a directory handed to it. Trust auth on 127.0.0.1 only;
fsync off, since a test database need not survive a power cut.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.conftest import free_port, unavailable

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
SERVICE_USER = "postgres"
START_TIMEOUT_S = 60
"""pg_ctl waits for the server this long; it is ready in about a second here."""


def pg_bin_dir() -> Path:
    """The newest /usr/lib/postgresql/N/bin with initdb and pg_ctl; skip when absent, but fail in CI."""
    dirs = [
        Path(d) for d in glob.glob(PG_BIN_GLOB) if (Path(d) / "initdb").is_file() and (Path(d) / "pg_ctl").is_file()
    ]
    if not dirs:
        unavailable(f"PostgreSQL server binaries not found in {PG_BIN_GLOB}",
                    "CI must install them (apt-get install postgresql)")  # fmt: skip
    return max(dirs, key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)


@dataclass
class PostgresServer:
    """A PostgreSQL server started for tests; `stop()` and `start()` keep its port and data."""

    bin_dir: Path
    base: Path
    port: int
    run_as: str | None
    owns_base: bool
    databases: list[str] = field(default_factory=list)

    @property
    def data_dir(self) -> Path:
        return self.base / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base / "sock"

    @property
    def log_path(self) -> Path:
        return self.base / "postgres.log"

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the `postgres` database."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        """SQLAlchemy URL of one database on this server."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, args: Sequence[str], timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self.run_as:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")} | {"LC_ALL": "C"}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=self.base)
        if proc.returncode != 0:
            pytest.fail(
                f"{' '.join(cmd)} exited with {proc.returncode}\n{proc.stdout}\n{proc.stderr}\n"
                f"--- server log ---\n{self.log_tail()}",
                pytrace=False,
            )
        return proc

    def initdb(self) -> None:
        """Create the cluster: superuser postgres, trust auth, UTF-8, C collation (stable ordering)."""
        self._run([str(self.bin_dir / "initdb"), "-D", str(self.data_dir), "-U", "postgres", "--auth=trust",
                   "-E", "UTF8", "--no-locale", "--no-sync"])  # fmt: skip

    def start(self) -> None:
        """Start (or restart) the server on the same port and data; waits until it accepts connections."""
        options = " ".join([
            f"-p {self.port}", "-h 127.0.0.1", f"-k {self.socket_dir}",
            "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off",
        ])  # fmt: skip
        self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.log_path),
                   "-o", options, "-w", "-t", str(START_TIMEOUT_S), "start"])  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (fast: disconnect clients, like an operator's restart)."""
        self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop"])

    def running(self) -> bool:
        """Whether pg_ctl sees a running server."""
        cmd = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "status"]
        if self.run_as:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE need that)."""
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=database, autocommit=True) as c:
            c.execute(sql)  # test-owned statement, no user input

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create a database (optionally copied from `template`) and return its URL."""
        self.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        self.databases.append(name)
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, closing its sessions first."""
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.databases:
            self.databases.remove(name)

    def log_tail(self, max_chars: int = 4000) -> str:
        """The end of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as err:
            return f"(cannot read {self.log_path}: {err})"
        return text if len(text) <= max_chars else "...\n" + text[-max_chars:]

    def close(self) -> None:
        """Stop the server if it runs and remove what it wrote."""
        try:
            if self.data_dir.exists() and self.running():
                self.stop("immediate")
        finally:
            if self.owns_base:
                shutil.rmtree(self.base, ignore_errors=True)


def start_postgres(tmp_dir: Path) -> PostgresServer:
    """initdb and start a server on a free 127.0.0.1 port; as root it runs as the postgres user."""
    bin_dir = pg_bin_dir()
    run_as = None
    owns_base = False
    base = Path(tmp_dir)
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam(SERVICE_USER)
        except KeyError:
            pytest.fail(f"running as root needs the {SERVICE_USER!r} system user (from the postgresql package)")
        # pytest's temp dirs are private to root; the server needs a directory it owns and can reach.
        base = Path(tempfile.mkdtemp(prefix="gpuhealth-pg-"))
        owns_base = True
        os.chown(base, user.pw_uid, user.pw_gid)
        run_as = SERVICE_USER
    elif len(str(base / "sock" / ".s.PGSQL.65535")) > 100:  # unix socket paths are limited to ~107 bytes
        base = Path(tempfile.mkdtemp(prefix="gpuhealth-pg-"))
        owns_base = True
    server = PostgresServer(bin_dir=bin_dir, base=base, port=free_port(), run_as=run_as, owns_base=owns_base)
    sock = server.socket_dir
    sock.mkdir(parents=True, exist_ok=True)
    if run_as:
        user = pwd.getpwnam(run_as)
        os.chown(sock, user.pw_uid, user.pw_gid)
    server.initdb()
    server.start()
    return server


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole session (tests make their own databases on it)."""
    server = start_postgres(tmp_path_factory.mktemp("postgres"))
    try:
        yield server
    finally:
        server.close()
