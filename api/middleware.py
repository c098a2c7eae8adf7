"""ASGI middleware: request bodies too large or too slow are refused before FastAPI reads them."""

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from api.config import BODY_TIMEOUT_S

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, declared or streamed, and bodies that
    do not arrive within `timeout_s` with 408 (a slow client must not hold a socket and a task).

    Not FastAPI's own `max_body_size`: it answers a declared oversize in plain text
    ("Content Too Large"), without the limit, and lets a malformed Content-Length through;
    every other error of ours is one line of JSON that says what to change.
    """

    def __init__(self, app: ASGIApp, limit: int, timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.app = app
        self.limit = limit
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _problem(send, 413, f"request body too large: the limit is {self.limit} bytes")
            return
        body = _GuardedBody(receive, send, self.limit, self.timeout_s)
        try:
            await self.app(scope, body.receive, body.send)
        except ClientDisconnect:
            if not body.refused:
                raise


class _GuardedBody:
    """One request's receive and send, counting the body against the limit and the deadline."""

    def __init__(self, receive: Receive, send: Send, limit: int, timeout_s: float) -> None:
        self._receive, self._send = receive, send
        self.limit, self.timeout_s = limit, timeout_s
        self.seen = 0
        self.refused = False
        self.complete = False
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + timeout_s

    async def receive(self) -> Message:
        # Past the limit or the deadline, answer at once and tell the app the client went away:
        # an exception here would reach FastAPI's body parsing, which turns it into a 400.
        if self.refused:
            return {"type": "http.disconnect"}
        if self.complete:  # the body is in: what follows is a wait for the disconnect, not timed
            return await self._receive()
        try:
            msg = await asyncio.wait_for(self._receive(), max(0.0, self._deadline - self._loop.time()))
        except TimeoutError:
            return await self._refuse(408, f"request body not received within {self.timeout_s:g}s")
        if msg["type"] == "http.request":
            self.seen += len(msg.get("body", b""))
            self.complete = not msg.get("more_body", False)
            if self.seen > self.limit:
                return await self._refuse(413, f"request body too large: the limit is {self.limit} bytes")
        return msg

    async def send(self, msg: Message) -> None:
        if not self.refused:  # after the 413 or 408, whatever the app answers is dropped
            await self._send(msg)

    async def _refuse(self, status: int, detail: str) -> Message:
        self.refused = True
        await _problem(self._send, status, detail)
        return {"type": "http.disconnect"}


async def _problem(send: Send, status: int, detail: str) -> None:
    body = JSONResponse({"detail": detail}).body
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 408:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
