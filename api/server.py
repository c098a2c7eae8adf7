"""The HTTP server of `gpuhealth serve`: uvicorn's h11 protocol, with a deadline for request heads.

uvicorn (0.55) has no timeout before a request's head is complete, and h11 none either: a
connection that sends nothing, or its headers a byte at a time, is held for good, and
`limit_concurrency` counts it, so 1,001 silent connections made every answer 503, `/healthz`
included, until they left. `GuardedH11Protocol` closes a connection whose request line and
headers are not complete within `header_timeout_s` (Go's `ReadHeaderTimeout`: from the
connection's start, or from the first byte of a later request on a kept-alive one; idle time
between requests stays `timeout_keep_alive`'s), and, once `max_connections` are open, closes
the longest-waiting connection that has no request in flight to make room for a new one, so a
burst of silent connections cannot keep a liveness probe out even before their deadline.
Connections with a request in flight are never closed to make room: past `max_connections` of
those, uvicorn answers 503 as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

HEADER_TIMEOUT_S = 5.0
"""A request's line and headers arrive within milliseconds from Prometheus, the kubelet or curl;
5 s leaves room for a slow link and bounds what a silent connection holds (core/settings.py)."""
MAX_HEAD_BYTES = 16 * 1024
"""Request line and headers: 16 KiB (h11's default, pinned); more is 400."""
REPORT_EVERY_S = 60.0
"""Connections closed by the deadline or to make room are logged as one warning a minute at most."""


@dataclass(frozen=True)
class ServerLimits:
    """What slow or many clients may hold (the body timeout is the API's own, in `BodyLimit`)."""

    keep_alive_s: float = 5.0
    max_connections: int = 1000
    header_timeout_s: float = HEADER_TIMEOUT_S


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head; idle connections make room first.

    Use `guarded_protocol()`, which gives each server its own register of waiting connections.
    """

    header_timeout_s: ClassVar[float] = HEADER_TIMEOUT_S
    waiting: ClassVar[OrderedDict[GuardedH11Protocol, None]]
    """Connections with no request in flight (new, or kept alive between requests), oldest first."""
    closed: ClassVar[dict[str, int]]
    """Connections closed since the last warning, by why: "late" (the deadline) or "room"."""
    reported_at: ClassVar[list[float]]
    """The loop time of the last warning (a list, so that instances update the class's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()
        self.waiting[self] = None
        self._make_room()

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and self.conn.their_state is h11.IDLE:
            self._start_head_timer()  # the first bytes of a kept-alive connection's next request
        super().data_received(data)
        self._note_state()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._note_state()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        super().connection_lost(exc)

    def _start_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_overdue)

    def _note_state(self) -> None:
        """After h11 has read what came: a complete head stops the clock; waiting for one, it may make room."""
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE:
            self.waiting.setdefault(self, None)  # waiting for a request head (kept alive: uvicorn's timer runs)
        else:
            self._head_done()

    def _head_done(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self.waiting.pop(self, None)

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE:
            log.debug("%s: no complete request head within %gs; closing", self.client, self.header_timeout_s)
            self._close("late")

    def _make_room(self) -> None:
        """Past max_connections, close the longest-waiting connections with no request in flight."""
        if self.limit_concurrency is None:
            return
        for other in list(self.waiting):
            if len(self.connections) < self.limit_concurrency:
                return
            if other is not self:
                log.debug("%s: closed to make room (%d connections)", other.client, len(self.connections))
                other._close("room")

    def _close(self, why: str) -> None:
        self._head_done()
        self.connections.discard(self)  # now, not when the loop reports the loss: it no longer counts
        self.transport.close()
        self.closed[why] = self.closed.get(why, 0) + 1
        now = self.loop.time()
        if now - self.reported_at[0] >= REPORT_EVERY_S:
            late, room = self.closed.pop("late", 0), self.closed.pop("room", 0)
            self.reported_at[0] = now
            log.warning(
                "closed %d connections that sent no complete request head within %gs, and %d idle ones "
                "to make room past %s connections (a slow client, or a flood of idle ones)",
                late, self.header_timeout_s, room, self.limit_concurrency,
            )  # fmt: skip


def guarded_protocol(header_timeout_s: float = HEADER_TIMEOUT_S) -> type[GuardedH11Protocol]:
    """`GuardedH11Protocol` for one server: its deadline, and a register of waiting connections of its own."""
    attrs = {
        "header_timeout_s": header_timeout_s,
        "waiting": OrderedDict(),
        "closed": {},
        "reported_at": [-REPORT_EVERY_S],
    }
    return type("GuardedH11Protocol", (GuardedH11Protocol,), attrs)


def uvicorn_config(
    app: Any, host: str, port: int, limits: ServerLimits | None = None, log_level: str = "info"
) -> uvicorn.Config:
    """The uvicorn config `gpuhealth serve` runs `app` under."""
    lim = limits or ServerLimits()
    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level.lower(), access_log=False,
        http=guarded_protocol(lim.header_timeout_s),  # h11 always: httptools, if installed, has no deadline
        ws="none",  # no route speaks WebSocket, and uvicorn's WebSocket protocols bypass the deadline
        timeout_keep_alive=max(1, round(lim.keep_alive_s)),
        limit_concurrency=lim.max_connections,  # past it: idle connections make room, then 503 at once
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
    )  # fmt: skip
