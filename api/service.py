"""The service's background work: a bounded ingest buffer and the scoring loop.

Both talk to the store from their own threads. When the database is down the
buffer keeps samples in memory (oldest dropped first once full, and counted) and
writes them when it is back; the scoring loop skips a round and tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from gpuhealth.history import HistoryError
from gpuhealth.worker import Worker
from predictor.model import RiskModel
from predictor.policy import DECISIONS, SEVERITY, Thresholds
from predictor.probes import slow_gpus
from predictor.score import score, to_records
from store import CLOCK_SKEW, Retention, Store, StoreError, StoreUnavailable

log = logging.getLogger(__name__)

PROBE_WINDOW = timedelta(days=7)
"""Probe results older than this no longer say anything about the GPU."""
PRUNE_EVERY = timedelta(hours=1)
SCORE_WINDOW = timedelta(days=31)
"""History read for one scoring round: the longest feature window (30 d) and a margin."""


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

    def add_probes(self, results: Sequence[Mapping[str, Any]]) -> None:
        """Queue probe results (`Store.add_probe_results` rows); never blocks on the database."""
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
            self.store.add_probe_results(results)
        except StoreUnavailable:
            with self._lock:
                self._probes.extendleft(reversed(results))  # older than anything queued meanwhile
                self.stats.probes_dropped += _drop_oldest(self._probes, self.probe_capacity)
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
                inserted = self.store.ingest(pd.DataFrame(chunk), not_after=not_after)
                self.stats.written += inserted
                self.stats.duplicates += len(chunk) - inserted
                written += inserted
                chunk = []
            if gpus:  # after the samples: ingesting a GPU's samples marks it active again
                self.store.upsert_gpus(gpus)
                gpus = []  # written: not requeued if the probe results fail below
            self.store_up = True
            self.stats.last_error = None
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
        """Put a chunk that was not written back in front (it is older than anything queued meanwhile)."""
        with self._lock:
            self._rows.extendleft(reversed(chunk))
            self.stats.dropped += _drop_oldest(self._rows, self.capacity)

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


@dataclass
class ScoreState:
    """The latest scores, kept in memory for /metrics (refreshed by every scoring round)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    identities: dict[str, dict[str, Any]] = field(default_factory=dict)
    scored_at: datetime | None = None
    last_run: float | None = None
    last_duration_s: float | None = None
    last_error: str | None = None
    runs: int = 0
    failures: int = 0


class Scorer(Worker):
    """Scores every GPU from the store's recent history and records risks and decisions."""

    thread_name = "gpuhealth-scorer"
    stop_timeout_s = 30.0

    def __init__(
        self,
        store: Store,
        model: RiskModel,
        thresholds: Thresholds,
        interval_s: float,
        now: Callable[[], datetime] | None = None,
        retention: Retention | None = None,
        on_scored: Callable[[list[dict[str, Any]], datetime], list[dict[str, Any]]] | None = None,
    ) -> None:
        self.store = store
        self.model = model
        self.thresholds = thresholds
        self.interval_s = interval_s
        self.now = now
        self.on_scored = on_scored
        """Optional hook that may add reasons or raise decisions before they are stored."""
        self.retention = retention
        self._pruned_at: datetime | None = None
        self.state = ScoreState()
        self._lock = threading.Lock()
        super().__init__()

    def run_once(self, at: datetime | None = None) -> list[dict[str, Any]]:
        """One scoring round; returns the records stored (empty when there is no history yet)."""
        with self._lock:
            t0 = time.perf_counter()
            at = at or (self.now() if self.now else None)
            until = at or datetime.now(UTC)
            frame = self.store.history(since=until - SCORE_WINDOW, until=until)
            if len(frame) == 0:
                return []
            scored = score(self.model, frame, at=pd.Timestamp(at) if at else None, thresholds=self.thresholds)
            cutoff = scored["cutoff"].max()
            scored_at = cutoff.to_pydatetime() if isinstance(cutoff, pd.Timestamp) else until
            gpus = all_gpus(self.store)
            records = with_lost_gpus(to_records(scored), gpus)
            records = with_probe_findings(records, self.store.recent_probe_results(scored_at - PROBE_WINDOW, scored_at))
            if self.on_scored is not None:
                records = self.on_scored(records, scored_at)
            self.store.write_scores(records, scored_at)
            ids = {str(g["uuid"]): {"gpu_index": g.get("gpu_index")} for g in gpus}
            st = self.state
            st.records, st.identities, st.scored_at = records, ids, scored_at
            st.last_run, st.last_duration_s, st.last_error = time.time(), time.perf_counter() - t0, None
            st.runs += 1
        self.prune_if_due(scored_at)
        return records

    def prune_if_due(self, now: datetime) -> None:
        """Apply the retention to every table, at most once an hour (of data time)."""
        if self.retention is None or (self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY):
            return
        done = self.store.apply_retention(now, self.retention)
        self._pruned_at = now
        if any(done.values()):
            log.info("retention: %s", ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in done.items() if v))

    def load_latest(self) -> None:
        """Fill the in-memory state from the store (after a restart, before the first round)."""
        try:
            items = all_gpus(self.store)
        except StoreError as err:
            log.warning("could not load the latest scores: %s", err)
            return
        recs = []
        for it in items:
            if it.get("scored_at") is None:
                continue
            recs.append({
                "gpu_uuid": it["uuid"], "hostname": it["hostname"], "model_name": it["model_name"],
                "risk": it["risk"], "risk_ecc": it["risk_ecc"], "risk_thermal": it["risk_thermal"],
                "risk_pcie": it["risk_pcie"], "decision": it["decision"] or "ok", "reasons": it["reasons"],
            })  # fmt: skip
            self.state.identities[it["uuid"]] = {"gpu_index": it["gpu_index"]}
        self.state.records = recs

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except StoreUnavailable as err:
                self.state.failures += 1
                self.state.last_error = str(err)
                log.warning("scoring skipped, database unavailable: %s", err)
            except Exception as err:  # one bad round must not end the loop
                self.state.failures += 1
                self.state.last_error = str(err)
                log.exception("scoring failed")
            self._stop.wait(self.interval_s)


def all_gpus(store: Store, page: int = 10_000) -> list[dict[str, Any]]:
    """Every GPU the store knows, page by page."""
    out: list[dict[str, Any]] = []
    while True:
        items, total = store.list_gpus(limit=page, offset=len(out))
        out.extend(items)
        if not items or len(out) >= total:
            return out


def with_lost_gpus(records: list[dict[str, Any]], gpus: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Drain GPUs the collector reports lost (fallen off the bus), whatever their history says.

    A lost GPU has no readings, so its history stops without a trace of why; the
    collector's lost state is the evidence (NVIDIA: XID 79, drain and reset or reseat).
    """
    by_uuid = {str(r["gpu_uuid"]): r for r in records}
    for g in gpus:
        if g.get("state") != "lost":
            continue
        seen = g.get("last_seen")
        since = f" since {seen:%Y-%m-%d %H:%M} UTC" if isinstance(seen, datetime) else ""
        reason = f"GPU lost: the driver has not seen it{since} (fell off the bus, XID 79): drain, then reset or reseat"
        rec = by_uuid.get(str(g["uuid"]))
        if rec is None:
            rec = {"gpu_uuid": g["uuid"], "hostname": g["hostname"], "model_name": g.get("model_name") or "",
                   "risk": None, "risk_ecc": None, "risk_thermal": None, "risk_pcie": None,
                   "decision": "ok", "reasons": []}  # fmt: skip
            records.append(rec)
        if SEVERITY[str(rec["decision"])] < SEVERITY["drain"]:
            rec["decision"] = "drain"
        rec["reasons"] = [reason, *rec["reasons"]]
    return records


def _raise_to(rec: dict[str, Any], decision: str, reason: str) -> None:
    if SEVERITY[str(rec["decision"])] < SEVERITY[decision]:
        rec["decision"] = decision
    rec["reasons"] = [*rec["reasons"], reason]


def with_probe_findings(records: list[dict[str, Any]], results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Watch GPUs whose probes say so: GEMM >10% below same-model peers (slow), memtest bit errors,
    or a GEMM result that did not verify (silent data corruption)."""
    if not results:
        return records
    frame = pd.DataFrame(list(results))
    by_uuid = {str(r["gpu_uuid"]): r for r in records}
    for row in slow_gpus(frame).itertuples():
        rec = by_uuid.get(str(row.gpu_uuid))
        if rec is not None and row.slow:
            _raise_to(rec, "watch", f"slow: {row.reason}")
    latest = frame.sort_values("ran_at").groupby(["gpu_uuid", "test"], sort=False).tail(1)
    for row in latest[latest["status"] == "fail"].itertuples():
        rec = by_uuid.get(str(row.gpu_uuid))
        if rec is None or row.test not in ("memtest", "gemm", "gemm_fp32"):
            continue
        errors = row.details.get("errors", row.value) if isinstance(row.details, dict) else row.value
        found = f"{errors:g}" if isinstance(errors, int | float) and errors == errors else "?"
        what = "memory test found bit errors" if row.test == "memtest" else "GEMM results did not verify"
        _raise_to(rec, "watch", f"probe {row.test} failed: {what} ({found}); run dcgmi diag -r 3")
    return records


def decision_counts(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """GPUs per decision, every decision present (zeros included)."""
    counts = dict.fromkeys(DECISIONS, 0)
    for r in records:
        counts[str(r["decision"])] = counts.get(str(r["decision"]), 0) + 1
    return counts
