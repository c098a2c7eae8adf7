"""A loop on a daemon thread: the sampler, the probe scheduler, the ingest buffer, the scorer, the puller."""

from __future__ import annotations

import threading
from typing import ClassVar


class Worker:
    """Runs `_run` on a daemon thread from `start()` until `stop()`.

    `_run` loops until `self._stop` is set, waiting on it between rounds, so a stop ends
    the wait at once. The thread is a daemon: a call hanging in a driver is left behind.
    """

    thread_name: ClassVar[str] = "gpuhealth-worker"
    stop_timeout_s: ClassVar[float] = 10.0

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Start the loop (a second call does nothing)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the loop to end and wait for it, at most `timeout` (default: `stop_timeout_s`) seconds."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.stop_timeout_s if timeout is None else timeout)
            self._thread = None
