"""The ingest buffer: samples and probe results on their way to the store, written by one thread.

When the database is down the buffer keeps them in memory (oldest dropped first once
full, and counted) and writes them when it is back.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pandas as pd

from core.history import HistoryError
from core.worker import Worker
from store import CLOCK_SKEW, Store, StoreError, StoreUnavailable

log = logging.getLogger(__name__)


@dataclass
class BufferStats:
    """What the ingest buffer did since start (exported as metrics)."""

    received: int = 0
    written: int = 0
    dropped: int = 0
    duplicates: int = 0
    failed_flushes: int = 0
    last_error: str | None = None
    probes_received: int = 0
    probes_written: int = 0
    probes_dropped: int = 0


def _drop_oldest(queue: deque[dict[str, Any]], bound: int) -> int:
    """Pop from the left until `queue` holds at most `bound` items; returns how many went."""
    over = max(0, len(queue) - bound)
    for _ in range(over):
        queue.popleft()
    return over


def _put_back(queue: deque[dict[str, Any]], items: list[dict[str, Any]], bound: int) -> int:
    """Put items that were not written back in front (older than anything queued meanwhile), then
    bound the queue; returns how many the bound dropped."""
    queue.extendleft(reversed(items))
    return _drop_oldest(queue, bound)


class IngestBuffer(Worker):
    """Samples on their way to the store: appended by the sampler, written in batches by one thread.

    `capacity` bounds the rows held while the database is unreachable; beyond it the
    oldest rows are dropped and counted (`stats.dropped`), so memory stays bounded and
    the loss is visible. Rows are dicts in the history-frame format.

    Probe results wait the same way (`add_probes`, bounded by `probe_capacity`), and are
    written after the samples and GPU states of the same flush.
    """

    thread_name = "gpuhealth-ingest"
    stop_timeout_s = 10.0

    def __init__(
        self,
        store: Store,
        capacity: int = 200_000,
        flush_s: float = 1.0,
        batch: int = 20_000,
        probe_capacity: int = 10_000,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if capacity < 1 or probe_capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, got {min(capacity, probe_capacity)}")
        self.store = store
        self.clock = clock
        """The wall clock, when samples are stamped with it: the store refuses samples dated past it
        (plus `CLOCK_SKEW`). None for simulated or replayed time, which runs ahead by design."""
        self.capacity = capacity
        self.probe_capacity = probe_capacity
        self._probes: deque[dict[str, Any]] = deque()
        self.flush_s = flush_s
        self.batch = batch
        self.stats = BufferStats()
        self._rows: deque[dict[str, Any]] = deque()
        self._gpus: dict[str, dict[str, Any]] = {}
        self._workloads: dict[str, list[dict[str, str]]] = {}
        """Workloads per GPU waiting to be written: only changes, the latest wins."""
        self._workloads_written: dict[str, list[dict[str, str]]] = {}
        self._workloads_at: datetime | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        super().__init__()
        self.store_up = True

    def __len__(self) -> int:
        return len(self._rows)

    def add(self, rows: Sequence[dict[str, Any]], gpus: Sequence[Mapping[str, Any]] = ()) -> None:
        """Queue samples (and GPU identity/state updates); never blocks on the database."""
        with self._lock:
            self._rows.extend(rows)
            self.stats.received += len(rows)
            self.stats.dropped += _drop_oldest(self._rows, self.capacity)
            for g in gpus:
                self._gpus[str(g["uuid"])] = dict(g)
        if len(self._rows) >= self.batch:
            self._wake.set()

    def add_workloads(self, per_gpu: Mapping[str, Sequence[Mapping[str, str]]], at: datetime) -> None:
        """Queue the workloads on these GPUs (pods, jobs) where they changed; never blocks on the database."""
        with self._lock:
            for uuid, sets in per_gpu.items():
                now = [dict(w) for w in sets]
                if self._workloads_written.get(uuid) != now:
                    self._workloads[uuid] = now
            if self._workloads:
                self._workloads_at = at

    def _flush_workloads(self) -> None:
        """Write the changed workloads; kept for the next flush on StoreUnavailable (re-raised)."""
        with self._lock:
            pending, at = dict(self._workloads), self._workloads_at
            self._workloads.clear()
        if not pending or at is None:
            return
        try:
            self.store.workloads.replace(pending, at)
        except StoreUnavailable:
            with self._lock:
                for uuid, sets in pending.items():
                    self._workloads.setdefault(uuid, sets)
            raise
        except StoreError as err:  # rejected: the next change is written again
            log.error("workloads of %d GPU(s) rejected by the store: %s", len(pending), err)
            return
        with self._lock:
            self._workloads_written.update(pending)

    def add_probes(self, results: Sequence[Mapping[str, Any]]) -> None:
        """Queue probe results (`Probes.add` rows); never blocks on the database."""
        with self._lock:
            self._probes.extend(dict(r) for r in results)
            self.stats.probes_received += len(results)
            self.stats.probes_dropped += _drop_oldest(self._probes, self.probe_capacity)
        self._wake.set()

    def probes_held(self) -> int:
        return len(self._probes)

    def _flush_probes(self) -> None:
        """Write the queued probe results; kept on StoreUnavailable (re-raised), dropped if rejected."""
        with self._lock:
            results = list(self._probes)
            self._probes.clear()
        if not results:
            return
        try:
            self.store.probes.add(results)
        except StoreUnavailable:
            with self._lock:
                self.stats.probes_dropped += _put_back(self._probes, results, self.probe_capacity)
            raise
        except StoreError as err:
            with self._lock:
                self.stats.probes_dropped += len(results)
            self.stats.last_error = str(err)
            log.error("dropped %d probe result(s) the store rejected: %s", len(results), err)
            return
        with self._lock:
            self.stats.probes_written += len(results)

    def flush(self) -> int:
        """Write what is queued; on a database error keep it for the next try. Returns rows written.

        A chunk being written leaves the queue first: rows that arrive meanwhile are bounded
        by `capacity` on their own, and a chunk the store took is never counted as dropped.
        """
        written = 0
        chunk: list[dict[str, Any]] = []
        with self._lock:
            gpus = list(self._gpus.values())
            self._gpus.clear()
        try:
            while True:
                with self._lock:
                    chunk = [self._rows.popleft() for _ in range(min(len(self._rows), self.batch))]
                if not chunk:
                    break
                not_after = None if self.clock is None else self.clock() + CLOCK_SKEW
                inserted = self.store.samples.ingest(pd.DataFrame(chunk), not_after=not_after)
                self.stats.written += inserted
                self.stats.duplicates += len(chunk) - inserted
                written += inserted
                chunk = []
            if gpus:  # after the samples: ingesting a GPU's samples marks it active again
                self.store.gpus.upsert(gpus)
                gpus = []  # written: not requeued if the probe results fail below
            self.store_up = True
            self.stats.last_error = None
            self._flush_workloads()
            self._flush_probes()
        except StoreUnavailable as err:
            self._requeue(chunk)
            self._requeue_gpus(gpus)
            self.store_up = False
            self.stats.failed_flushes += 1
            self.stats.last_error = str(err)
            log.warning("database unavailable, %d sample(s) held in memory: %s", len(self._rows), err)
        except (StoreError, HistoryError, ValueError) as err:
            # Rows the store rejects would block the queue forever: drop that chunk (only it), loudly.
            with self._lock:
                self.stats.dropped += len(chunk)
            self.stats.last_error = str(err)
            log.error("dropped %d sample(s) the store rejected: %s", len(chunk), err)
        except BaseException:
            self._requeue(chunk)  # an unexpected error: the rows stay queued (bounded) for the next try
            self._requeue_gpus(gpus)
            raise
        return written

    def _requeue(self, chunk: list[dict[str, Any]]) -> None:
        """Put a chunk of samples that was not written back in front, within the bound."""
        with self._lock:
            self.stats.dropped += _put_back(self._rows, chunk, self.capacity)

    def _requeue_gpus(self, gpus: list[dict[str, Any]]) -> None:
        with self._lock:
            for g in gpus:
                self._gpus.setdefault(str(g["uuid"]), g)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.flush_s)
            self._wake.clear()
            self._flush_logged()
        self._flush_logged()

    def _flush_logged(self) -> None:
        try:
            self.flush()
        except Exception as err:  # a bug must not end the writer: the rows stay queued, bounded and counted
            self.stats.failed_flushes += 1
            self.stats.last_error = f"{type(err).__name__}: {err}"
            log.exception("ingest flush failed")

    def stop(self, timeout: float | None = None) -> None:
        """Stop after one last flush (of what the database takes), and log what was done."""
        self._stop.set()
        self._wake.set()
        super().stop(timeout)
        st = self.stats
        log.info(
            "ingest stopped: received %d, written %d, duplicates %d, dropped %d, still held %d;"
            " probe results received %d, written %d, dropped %d, still held %d",
            st.received, st.written, st.duplicates, st.dropped, len(self._rows),
            st.probes_received, st.probes_written, st.probes_dropped, len(self._probes),
        )  # fmt: skip
