"""One deadline for a whole HTTP request made with httpx, and a cap on the answer's size.

httpx's timeouts bound each read, not the request: a server that sends one byte a second keeps
a read timeout of 5 s from ever firing, in the answer's head as well as its body. `Deadline`
keeps the socket of each connection httpx opens for the request (through httpx's public
`trace` request extension) and shuts it down when the deadline passes, which ends a read that is
waiting; `read_capped` also looks at the clock between chunks and stops reading past `max_bytes`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

_CONNECTED = (".connect_tcp.complete", ".connect_unix_socket.complete", ".start_tls.complete")
"""Ends of httpcore's trace events whose `return_value` is the network stream of a new connection
(prefixed `connection.`, or `proxy.`/`socks.` for a tunnel through a proxy)."""


class DeadlinePassed(Exception):
    """The request was not answered in full before its deadline."""


class TooLarge(Exception):
    """The answer is longer than the cap; `length` is the length it announced, when it did."""

    def __init__(self, message: str, *, status: int, length: int | None) -> None:
        super().__init__(message)
        self.status = status
        self.length = length


@dataclass(frozen=True)
class Answer:
    """A response read in full: status, headers and body."""

    status_code: int
    headers: httpx.Headers
    content: bytes


class Deadline:
    """`seconds` from now, the sockets of the request's connections are shut down.

    Pass `trace` as the request's `trace` extension; `cancel` when the request is done.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._fired = False
        self._timer = threading.Timer(max(0.0, seconds), self._fire)
        self._timer.daemon = True
        self._timer.start()

    @property
    def passed(self) -> bool:
        return self._fired or time.monotonic() >= self._at

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpx's `trace` extension: keeps the socket of each new connection."""
        if not event.endswith(_CONNECTED):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.append(sock)
            late = self._fired
        if late:  # connected just as the deadline passed
            _shut(sock)

    def cancel(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        with self._lock:
            self._fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: it wakes a recv() waiting in another thread, and the fd stays httpx's to close
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def read_capped(
    client: httpx.Client,
    url: str,
    *,
    headers: Mapping[str, str],
    timeout: float,
    max_bytes: int,
    method: str = "GET",
    content: bytes | None = None,
) -> Answer:
    """`method` `url` (with `content` as the body) and read the answer, all of it within `timeout`
    seconds and at most `max_bytes` long.

    Raises `DeadlinePassed`, `TooLarge`, or httpx's own errors (a transport error that the
    deadline caused is `DeadlinePassed`).
    """
    deadline = Deadline(timeout)
    try:
        with client.stream(
            method, url, headers=headers, content=content, timeout=timeout, extensions={"trace": deadline.trace}
        ) as resp:
            length = _content_length(resp.headers)
            if length is not None and length > max_bytes:
                raise TooLarge(f"answer of {length} bytes is over the {max_bytes} bytes allowed",
                               status=resp.status_code, length=length)  # fmt: skip
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    raise TooLarge(f"answer is over the {max_bytes} bytes allowed", status=resp.status_code,
                                   length=length)  # fmt: skip
                if deadline.passed:
                    break
            # also after the last chunk: an answer without a length ends at the shutdown, cut short
            if deadline.passed:
                raise DeadlinePassed(f"no answer within {timeout:g}s")
            return Answer(resp.status_code, resp.headers, bytes(body))
    except httpx.TransportError as err:
        if deadline.passed:
            raise DeadlinePassed(f"no answer within {timeout:g}s") from err
        raise
    finally:
        deadline.cancel()


def _content_length(headers: httpx.Headers) -> int | None:
    try:
        return int(headers["content-length"])
    except (KeyError, ValueError):
        return None
