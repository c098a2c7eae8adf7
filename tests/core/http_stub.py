"""What the HTTP client tests share: a scripted service, a port nothing listens on, hostile bodies.

Kept apart from the tests of `core.service_client` so that tests of the node agent need not load
the service's app.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    """JSON-encoded unless bytes."""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    drip_s: float = 0.0
    """Send the body one byte at a time, this long apart (the head too when `drip_head`)."""
    drip_head: bool = False
    pad: int = 0
    """Spaces after the body (valid JSON still), sent 64 KiB at a time."""
    length: bool = True
    """Send a Content-Length (else the body ends when the connection closes, HTTP/1.0 style)."""


def drip(out: Any, data: bytes, every_s: float) -> None:
    for i in range(len(data)):
        out.write(data[i : i + 1])
        out.flush()
        time.sleep(every_s)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NESTED = b"[" * 100_000 + b"]" * 100_000


@dataclass
class Seen:
    """One request the stub answered."""

    path: str
    headers: dict[str, str]
    method: str = "GET"
    body: bytes = b""


class StubService:
    """A stdlib HTTP server answering every GET and POST with `answer` (or `answers[path]`), recording requests."""

    def __init__(self) -> None:
        self.answer = Answer(body={"hostname": "node-a", "gpus": []})
        self.answers: dict[str, Answer] = {}
        self.seen: list[Seen] = []
        self.sent_pad = 0
        """Padding bytes written so far (the client may have stopped reading long before)."""
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size) if size else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                stub.seen.append(Seen(self.path, headers, self.command, body))
                a = stub.answers.get(self.path, stub.answer)
                if a.delay_s:
                    time.sleep(a.delay_s)
                data = a.body if isinstance(a.body, bytes) else json.dumps(a.body).encode()
                try:
                    if a.drip_head:  # the status line byte by byte; the headers follow it as usual
                        drip(self.wfile, f"HTTP/1.0 {a.status} OK\r\n".encode(), a.drip_s)
                    else:
                        self.send_response(a.status)
                    ctype = "application/json" if not isinstance(a.body, bytes) else "text/html"
                    for k, v in {"Content-Type": ctype, **a.headers}.items():
                        self.send_header(k, v)
                    if a.length:
                        self.send_header("Content-Length", str(len(data) + a.pad))
                    self.end_headers()
                    if a.drip_s:
                        drip(self.wfile, data, a.drip_s)
                    else:
                        self.wfile.write(data)
                    for start in range(0, a.pad, 1 << 16):
                        self.wfile.write(b" " * min(1 << 16, a.pad - start))
                        stub.sent_pad = start + (1 << 16)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out or gave up
                    pass

            do_POST = do_GET

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> StubService:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()
