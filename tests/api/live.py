"""A real uvicorn server on loopback in a thread, for tests that need sockets and the event loop."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def live_server(app: FastAPI, **config: Any) -> Iterator[str]:
    """Serve `app` with uvicorn (the same server `gpuhealth serve` runs) until the block ends; yields its URL."""
    port = free_port()
    cfg = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **config)
    server = uvicorn.Server(cfg)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
