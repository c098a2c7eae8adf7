"""What the HTTP client tests share: a scripted answer, a port nothing listens on, hostile bodies.

Kept apart from the tests of `core.service_client` so that tests of the node agent need not load
the service's app.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
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
