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
        seen = 0
        refused = False
        complete = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s

        async def counted() -> Message:
            # Past the limit or the deadline, answer at once and tell the app the client went away:
            # an exception here would reach FastAPI's body parsing, which turns it into a 400.
            nonlocal seen, refused, complete
            if refused:
                return {"type": "http.disconnect"}
            if complete:  # the body is in: what follows is a wait for the disconnect, not timed
                return await receive()
            try:
                msg = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                refused = True
                await _problem(send, 408, f"request body not received within {self.timeout_s:g}s")
                return {"type": "http.disconnect"}
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                complete = not msg.get("more_body", False)
                if seen > self.limit:
                    refused = True
                    await _problem(send, 413, f"request body too large: the limit is {self.limit} bytes")
                    return {"type": "http.disconnect"}
            return msg

        async def unless_refused(msg: Message) -> None:
            if not refused:  # after the 413 or 408, whatever the app answers is dropped
                await send(msg)

        try:
            await self.app(scope, counted, unless_refused)
        except ClientDisconnect:
            if not refused:
                raise


async def _problem(send: Send, status: int, detail: str) -> None:
    body = JSONResponse({"detail": detail}).body
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 408:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
