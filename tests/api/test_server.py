"""The service's HTTP server (`api.server`, what `gpuhealth serve` runs): silent and slow clients cannot take it."""

from __future__ import annotations

import resource
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest
import typer
import uvicorn

from api.app import ApiConfig, create_app
from api.server import ServerLimits, uvicorn_config
from core.settings import Settings
from gpuhealth.cli.serve import server_limits
from store import Store
from tests.api.conftest import TOKEN
from tests.api.live import free_port

SILENT = ServerLimits().max_connections + 1
"""One past the default max_connections: what made every answer 503, /healthz included, for good."""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(f"sqlite:///{tmp_path / 'server.db'}")
    yield s
    s.close()


@contextmanager
def served(store: Store, limits: ServerLimits) -> Iterator[int]:
    """`gpuhealth serve`'s server (the same uvicorn config) on a free loopback port, in a thread; yields the port."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn_config(create_app(store, ApiConfig(token=TOKEN)), "127.0.0.1", port, limits, "warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(15)


def _room_for(sockets: int) -> None:
    """Raise this process's open-file limit for `sockets` client sockets and their server ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * sockets + 256
    if soft < need:
        assert hard == resource.RLIM_INFINITY or hard >= need, f"the open-file limit {hard} is below {need}"
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def _open(port: int, n: int, stack: ExitStack) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
        socks.append(sock)
    return socks


def _closed_by_server(socks: list[socket.socket], within_s: float) -> tuple[int, float]:
    """How many of `socks` the server closed within `within_s` (EOF or reset), and when the last one was."""
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    started, last, closed = time.monotonic(), 0.0, 0
    while closed < len(socks) and (left := started + within_s - time.monotonic()) > 0:
        for key, _ in sel.select(timeout=left):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except ConnectionError:
                data = b""
            if not data:  # the server hung up
                sel.unregister(sock)
                closed, last = closed + 1, time.monotonic() - started
    sel.close()
    return closed, last


def test_silent_connections_neither_refuse_health_nor_stay_open(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """Before: 1,001 connections that send nothing made every answer 503, /healthz included, for good."""
    _room_for(SILENT + 10)
    limits = ServerLimits(header_timeout_s=2.0)
    with served(store, limits) as port, ExitStack() as stack:
        silent = _open(port, SILENT, stack)
        time.sleep(0.5)  # the server has taken them all in
        started = time.monotonic()
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
        health_s = time.monotonic() - started
        closed, last_s = _closed_by_server(silent, within_s=limits.header_timeout_s + 8)
        after = httpx.get(f"http://127.0.0.1:{port}/v1/gpus", timeout=10)
    print(f"/healthz among {SILENT} silent connections: {health.status_code} in {health_s * 1000:.0f} ms; "
          f"{closed} closed, the last {last_s:.1f} s after")  # fmt: skip
    assert health.status_code == 200, health.text
    assert health_s < limits.header_timeout_s, "answered at once, not once the silent ones time out"
    assert closed == SILENT, f"{SILENT - closed} silent connections still open"
    assert after.status_code == 200
    said = [r.getMessage() for r in caplog.records if r.name == "api.server" and r.levelname == "WARNING"]
    assert said and "no complete request head within 2s" in said[0], "an operator hears of it, once a minute"


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off(store: Store) -> None:
    """A slowloris: each byte in time for any per-read timeout, the head never complete."""
    with served(store, ServerLimits(header_timeout_s=1.0)) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            started = time.monotonic()
            head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
            try:
                for byte in head:
                    sock.sendall(bytes([byte]))
                    time.sleep(0.1)
                    if time.monotonic() - started > 10:
                        break
                answer = sock.recv(4096)
            except OSError:  # reset, or (before) the 10 s client timeout
                answer = b""
            dripped_s = time.monotonic() - started
        assert answer == b"" and dripped_s < 3.0, (answer, dripped_s)
        # a head that arrives in time, on a connection kept alive across requests, is served as before
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            assert client.get("/healthz").status_code == 200
            time.sleep(1.5)  # longer than the head timeout, shorter than keep-alive: idle is not slow
            assert client.get("/healthz").status_code == 200
            assert client.get("/healthz").status_code == 200


def test_busy_connections_are_not_shed(store: Store) -> None:
    """Only connections waiting for a request head make room; past max_connections requests in flight, 503."""
    limits = ServerLimits(max_connections=5, header_timeout_s=5.0)
    with served(store, limits) as port, ExitStack() as stack:
        # three requests in flight: heads sent, their bodies (10 bytes) not yet
        busy = _open(port, 3, stack)
        for sock in busy:
            sock.sendall(b"POST /v1/failures HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        time.sleep(0.3)
        silent = _open(port, 3, stack)
        time.sleep(0.3)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200
        closed, _ = _closed_by_server(silent, within_s=0.5)
        assert closed == 3, "the silent ones made room"
        still, _ = _closed_by_server(busy, within_s=0.5)
        assert still == 0, "a request in flight is never cut off to make room"


def test_the_limits_come_from_settings() -> None:
    s = Settings(header_timeout="2s", keep_alive_timeout="7s", max_connections=50)
    assert server_limits(s) == ServerLimits(keep_alive_s=7.0, max_connections=50, header_timeout_s=2.0)
    config = uvicorn_config(None, "127.0.0.1", 1, server_limits(s))
    assert (config.timeout_keep_alive, config.limit_concurrency, config.ws) == (7, 50, "none")
    assert isinstance(config.http, type) and config.http.header_timeout_s == 2.0, "h11 with the deadline"
    for bad in ("0", "soon"):
        with pytest.raises(typer.Exit):
            server_limits(Settings(header_timeout=bad))
