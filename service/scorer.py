"""The scoring loop: every GPU scored from the store's recent history, risks and decisions recorded.

It talks to the store from its own thread; when the database is down it skips a round
and tries again. It also applies the retention, once an hour.

Each round first asks the store which stored model is active (one short row) and loads it
when it changed since the last round (`gpuhealth model promote`), so a new model takes over
without a restart. A model that does not load is logged and counted, and the loop keeps the
one it has; without any active stored model it keeps the model it was started with (the
`--model` file or the shipped one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pandas as pd
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from core.memory import keep_long_lived
from core.worker import Worker
from predictor.fabric import COLUMNS as FINDING_COLUMNS
from predictor.fabric import with_node_findings
from predictor.findings import with_lost_gpus, with_probe_findings
from predictor.model import RiskModel
from predictor.policy import DECISIONS, decision_changes
from predictor.score import SCORE_COLUMNS, score, to_records
from predictor.thresholds import Thresholds
from service.remediation import forget_before_return
from service.replicas import Replica, Share, round_of, until_next_round
from service.stored_rounds import StoredRounds
from store import GpuItem, Retention, ScoreRecord, Store, StoreError, StoreUnavailable
from store.gpus import GpuIdentity
from store.window import HourWindow, WindowStats

log = logging.getLogger(__name__)

PROBE_WINDOW = timedelta(days=7)
"""Probe results older than this no longer say anything about the GPU."""
PRUNE_EVERY = timedelta(hours=1)
SCORE_WINDOW = timedelta(days=31)
"""History read for one scoring round: the longest feature window (30 d) and a margin."""
ROUND_COLUMNS = (*SCORE_COLUMNS, *FINDING_COLUMNS)
"""The history columns a round reads: `score`'s (the XIDs `forget_before_return` clears among them) and the
node findings' (`with_node_findings`). The window holds only these."""


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


@dataclass(frozen=True)
class ModelState:
    """The model the loop scores with and how reloading from the store went (replaced whole, never changed)."""

    source: str = "file"
    """"file" (the `--model` file or the shipped one) or "store" (the active stored model)."""
    version: str | None = None
    """The stored model's version; None for a file."""
    loaded_at: datetime | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    reloads: int = 0
    load_failures: int = 0
    failed_version: str | None = None
    """The active version that failed to load: not tried again until another one is active."""
    last_error: str | None = None


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
        replica: Replica | None = None,
        window_mb: float | None = None,
        lanes: int = 1,
    ) -> None:
        self.store = store
        self.model = model
        self.thresholds = thresholds
        self.interval_s = interval_s
        self.now = now
        self.on_scored = on_scored
        """Optional hook that may add reasons or raise decisions before they are stored."""
        self.retention = retention
        self.replica = replica
        """Several replicas: score only this one's share, in rounds aligned on the database's clock."""
        self.lanes = lanes
        """Threads a round computes its feature families in (1: memory sizes a replica, decision 0091)."""
        self._pruned_at: datetime | None = None
        self.window = HourWindow(
            store.samples.db, SCORE_WINDOW, None if window_mb is None else int(window_mb * 1e6), ROUND_COLUMNS
        )
        """The hour rows kept between rounds, in `window_mb` MB (None: no bound): a round reads what changed."""
        self.state = ScoreState()
        self.model_state = ModelState(meta=dict(model.meta))
        self._lock = threading.Lock()
        super().__init__()

    def refresh_model(self) -> bool:
        """Load the store's active model if it changed since the last round; True when one was loaded.

        StoreUnavailable propagates (the round is skipped as for any other read); a model that
        cannot be loaded is logged, counted, and the current one kept.
        """
        st = self.model_state
        try:
            active = self.store.models.active_info()
        except StoreUnavailable:
            raise
        except StoreError as err:  # e.g. a database not yet upgraded to the models table
            log.warning("could not ask the store for the active model: %s", err)
            return False
        if active is None:
            return False
        version = active["version"]
        if version in (st.version, st.failed_version):
            return False
        try:
            stored = self.store.models.get(version)
        except StoreUnavailable:
            raise
        except StoreError as err:  # gone between the two reads: ask again next round
            log.warning("could not read the active model %s: %s", version, err)
            return False
        try:
            model = RiskModel.from_bytes(stored["data"], name=version)
        except Exception as err:  # ModelError, or whatever a damaged archive makes skops raise
            kept = f"model {st.version}" if st.version else "the model it started with"
            log.error("the active model %s does not load, scoring goes on with %s: %s", version, kept, err)
            self.model_state = replace(st, load_failures=st.load_failures + 1, failed_version=version,
                                       last_error=f"model {version}: {err}")  # fmt: skip
            return False
        self.model = model
        self.model_state = replace(
            st, source="store", version=version, loaded_at=datetime.now(UTC), meta=dict(model.meta),
            reloads=st.reloads + 1, failed_version=None, last_error=None,
        )  # fmt: skip
        log.info("scoring with the active model %s from the store now", version)
        return True

    def run_once(self, at: datetime | None = None) -> list[dict[str, Any]]:
        """One scoring round; returns the records stored (empty when there is no history yet)."""
        with self._lock:
            t0 = time.perf_counter()
            self.refresh_model()
            at = at or (self.now() if self.now else None)
            until = at or datetime.now(UTC)
            share = self.replica.share() if self.replica is not None else None
            gpus: list[GpuIdentity] | None = None
            hosts: list[str] | None = None
            if share is not None:  # the share's GPUs (lost ones, probe findings, actions: only ours), their hosts
                gpus = self._gpus_of(share)
                hosts = share.hosts([str(g["hostname"]) for g in gpus])
            frame = self.window.frame(until=until, hostnames=hosts)
            frame = forget_before_return(frame, self.store.remediations.returned_at())
            if len(frame) == 0:
                if share is not None:  # nothing of ours (no shard held): /metrics must not show GPUs given up
                    self.state.records, self.state.identities = [], {}
                    if 0 in share.shards:  # the retention is shard 0's holder's, whatever its hosts
                        self.prune_if_due(until)
                return []
            scored = score(
                self.model,
                frame,
                at=pd.Timestamp(at) if at else None,
                thresholds=self.thresholds,
                failures=self.store.labels.failures_frame(),  # repeat offenders: the fleet's own record
                past=StoredRounds(self.store, self.thresholds),  # the rounds before, under this round's hold
                lanes=self.lanes,
            )
            cutoff = scored["cutoff"].max()
            scored_at = cutoff.to_pydatetime() if isinstance(cutoff, pd.Timestamp) else until
            if gpus is None:
                gpus = self.store.gpus.identities()
            records = with_lost_gpus(to_records(scored, heat=True), gpus)
            probes = self.store.probes.recent(scored_at - PROBE_WINDOW, scored_at)
            if share is not None:
                mine = {str(g["uuid"]) for g in gpus}
                probes = [p for p in probes if str(p["gpu_uuid"]) in mine]
            records = with_probe_findings(records, probes)
            records = with_node_findings(records, frame)  # the fabric, NVLink links, IB rails
            if self.on_scored is not None:
                records = self.on_scored(records, scored_at)
            records = self._write(records, scored_at, share)
            ids = {str(g["uuid"]): {"gpu_index": g.get("gpu_index")} for g in gpus}
            st = self.state
            st.records, st.identities, st.scored_at = records, ids, scored_at
            st.last_run, st.last_duration_s, st.last_error = time.time(), time.perf_counter() - t0, None
            st.runs += 1
        if share is None or 0 in share.shards:  # one replica applies the retention: shard 0's
            self.prune_if_due(scored_at)
        return records

    def _gpus_of(self, share: Share) -> list[GpuIdentity]:
        """The store's GPUs on the share's hosts."""
        return [g for g in self.store.gpus.identities() if share.has(str(g["hostname"]))]

    def _write(self, records: list[dict[str, Any]], scored_at: datetime, share: Share | None) -> list[dict[str, Any]]:
        """Store the round (one transaction); with a share, only the shards the store still admits."""
        # to_records' dicts have ScoreRecord's keys; the store checks every record anyway.
        rows = cast(list[ScoreRecord], records)
        if share is None or self.replica is None:
            self.store.decisions.write_scores(rows, scored_at, rule=decision_changes)
            return records
        fence = self.replica.fence(share, round_of(scored_at, self.interval_s))
        self.store.decisions.write_scores(rows, scored_at, rule=decision_changes, fence=fence)
        written = [r for r in records if fence.admits(str(r["hostname"]))]
        self.replica.note_round(share, fence, len({str(r["hostname"]) for r in written}))
        return written

    def prune_if_due(self, now: datetime) -> None:
        """Apply the retention to every table, at most once an hour (of data time)."""
        if self.retention is None or (self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY):
            return
        done = self.store.pruner.apply(now, self.retention)
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
        if self.replica is not None:  # the shards held now (other replicas show the rest)
            share = self.replica.share(timedelta(0))
            items = [it for it in items if share.has(str(it["hostname"]))]
        recs = []
        for it in items:
            if it.get("scored_at") is None:
                continue
            recs.append({
                "gpu_uuid": it["uuid"], "hostname": it["hostname"], "model_name": it["model_name"],
                "risk": it["risk"], "risk_ecc": it["risk_ecc"], "risk_thermal": it["risk_thermal"],
                "risk_pcie": it["risk_pcie"], "decision": it["decision"] or "ok", "reasons": it["reasons"],
                "remedy": it["remedy"], "remedy_when": it["remedy_when"],
            })  # fmt: skip
            self.state.identities[it["uuid"]] = {"gpu_index": it["gpu_index"]}
        self.state.records = recs

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
                keep_long_lived()  # once, after the first round: the imports, the model and the store are in
            except StoreUnavailable as err:
                self.state.failures += 1
                self.state.last_error = str(err)
                log.warning("scoring skipped, database unavailable: %s", err)
            except Exception as err:  # one bad round must not end the loop
                self.state.failures += 1
                self.state.last_error = str(err)
                log.exception("scoring failed")
            self._stop.wait(self._until_next_round())

    def _until_next_round(self) -> float:
        """The interval; with replicas, until the next multiple of it on the database's clock, so that
        every replica scores a round at the same time."""
        if self.replica is None:
            return self.interval_s
        # A moment past the boundary: our estimate of the database's clock moves a little at each tick.
        return until_next_round(self.replica.now(), self.interval_s) + min(1.0, self.interval_s / 100)


class ModelMetrics(Collector):
    """The scoring loop's model for /metrics: which one, how reloading it goes, and its window (from memory)."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def collect(self) -> Iterator[Metric]:
        st = self.scorer.model_state
        info = GaugeMetricFamily(
            "gpuhealth_model_info", "The risk model scoring uses (always 1)", labels=["source", "version"]
        )
        info.add_metric([st.source, st.version or ""], 1.0)
        yield info
        yield CounterMetricFamily(
            "gpuhealth_model_reloads", "Active models loaded from the store without a restart", value=st.reloads
        )
        yield CounterMetricFamily(
            "gpuhealth_model_load_failures",
            "Active stored models that failed to load (the previous model kept scoring)",
            value=st.load_failures,
        )
        yield from window_metrics(self.scorer.window.stats)


def window_metrics(ws: WindowStats) -> Iterator[Metric]:
    """The scorer's window (`store.window`): GPUs held in memory and read every round, its memory."""
    gpus = GaugeMetricFamily(
        "gpuhealth_score_window_gpus",
        "GPUs whose hour rows the scorer keeps between rounds (held=memory) or, past its memory cap "
        "(GPUHEALTH_SCORE_WINDOW_MB), reads every round (held=read)",
        labels=["held"],
    )
    gpus.add_metric(["memory"], ws.held_gpus)
    gpus.add_metric(["read"], ws.read_gpus)
    yield gpus
    yield GaugeMetricFamily(
        "gpuhealth_score_window_bytes", "Memory of the hour rows the scorer keeps between rounds", value=ws.bytes
    )
    yield CounterMetricFamily(
        "gpuhealth_score_window_full_reads",
        "Rounds that read the whole window (start-up, time went back): the others read what changed",
        value=ws.full_reads,
    )


def all_gpus(store: Store, page: int = 10_000) -> list[GpuItem]:
    """Every GPU the store knows, page by page."""
    out: list[GpuItem] = []
    while True:
        items, total = store.gpus.find(limit=page, offset=len(out))
        out.extend(items)
        if not items or len(out) >= total:
            return out


def decision_counts(records: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """GPUs per decision, every decision present (zeros included)."""
    counts = dict.fromkeys(DECISIONS, 0)
    for r in records:
        counts[str(r["decision"])] = counts.get(str(r["decision"]), 0) + 1
    return counts
