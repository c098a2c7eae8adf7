"""core.http_deadline.Deadline on its own: which connections it ends, and when."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from core.http_deadline import Deadline


class Stream:
    """What httpcore's trace hands over: a network stream that knows its socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def get_extra_info(self, info: str) -> Any:
        return self.sock if info == "socket" else None


@pytest.mark.parametrize(
    "event", ["connection.connect_tcp.complete", "proxy.start_tls.complete", "socks.connect_tcp.complete"]
)
def test_the_socket_of_a_new_connection_is_shut_at_the_deadline(event: str) -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        deadline = Deadline(0.3)
        deadline.trace(event, {"return_value": Stream(ours)})
        ours.settimeout(5.0)
        t0 = time.monotonic()
        assert ours.recv(1) == b""  # woken by the shutdown, not by the 5 s timeout
        assert 0.2 < time.monotonic() - t0 < 2.0 and deadline.passed


def test_other_events_and_a_cancelled_deadline_leave_sockets_alone() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        Deadline(0.05).trace("http11.receive_response_headers.complete", {"return_value": Stream(ours)})
        cancelled = Deadline(0.05)
        cancelled.trace("connection.connect_tcp.complete", {"return_value": Stream(ours)})
        cancelled.cancel()
        time.sleep(0.2)
        theirs.sendall(b"x")
        ours.settimeout(1.0)
        assert ours.recv(1) == b"x"
