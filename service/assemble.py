"""The service's loops assembled: collector (or puller) → ingest buffer → store ← scorer.

No HTTP here: the command line joins these loops with the API (`gpuhealth.serve`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from actuate.target import Target
from collector.attribution import Attributor
from collector.backends.base import Backend
from collector.exporter import render
from collector.kernel_log import KernelLog, attach_for_backend
from collector.kernel_log_source import KernelLogOptions
from collector.probes import ProbeConfig, ProbeScheduler, snapshot_util
from collector.records import XidIntervals, snapshot_workloads
from collector.remediate import RemedyAgent, RemedyCollector
from collector.run import build_sampling
from collector.sampler import Sampler
from collector.verify import Verifier, verify_runner
from core.catalog import Field
from core.labels import HOSTNAME
from predictor.model import RiskModel
from predictor.thresholds import Thresholds
from service.actuator import Actuator, ActuatorConfig
from service.ingest import IngestBuffer
from service.puller import PrometheusPuller
from service.remedy_tasks import LocalRemedies
from service.replicas import Replica
from service.scorer import ModelMetrics, Scorer
from store import Retention, Store, StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopConfig:
    """How the loops sample, buffer, score and keep: the settings and flags of `serve`, in one value."""

    fields: Sequence[Field] = ()
    """The catalogue fields the in-process collector exports and stores."""
    interval_s: float = 10.0
    """Sampling interval of the in-process collector."""
    score_interval_s: float = 300.0
    score_window_mb: float | None = None
    """Memory for the hour rows the scorer keeps between rounds; None: no bound (`store.window`)."""
    score_lanes: int = 1
    """Threads a scoring round computes its feature families in (`features.build_features`)."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    buffer_samples: int = 200_000
    """The ingest buffer's bound: samples held in memory while the database is away."""
    hostname_label: str = HOSTNAME
    probes: ProbeConfig | None = None
    """When and what the in-process collector probes; None: no probes."""
    retention: Retention | None = None
    """What the scorer prunes after its rounds; None: it keeps everything."""
    attributors: Sequence[Attributor] = ()
    """Where the in-process collector reads the pods and jobs on each GPU."""
    allow_reset: bool = False
    """With the remediation loop on, the in-process node agent may reset GPUs (`collect --allow-reset`)."""
    remedy_poll_s: float = 30.0
    """How often the in-process node agent looks for its remedies."""
    kernel_log: KernelLogOptions | None = None
    """The kernel log the in-process collector reads on live GPUs (XIDs, SXIDs); None: none."""
    sysfs_root: Path | None = None
    """Where the in-process collector reads InfiniBand/RoCE ports (/sys on a node); None: none."""


@dataclass
class Loops:
    """The service's running parts, without the API (tests drive them directly)."""

    store: Store
    backend: Backend | None
    sampler: Sampler | None
    registry: CollectorRegistry | None
    buffer: IngestBuffer | None
    scorer: Scorer
    probes: ProbeScheduler | None = None
    puller: PrometheusPuller | None = None
    health: Callable[[], tuple[bool, str]] | None = None
    """The collector's or the puller's health (/healthz), when there is one."""
    extra_metrics: Callable[[], bytes] | None = None
    """Their own series, for the service's /metrics."""
    replica: Replica | None = None
    """Several replicas on one database: this one's leases (fleet mode)."""
    actuator: Actuator | None = None
    """The decisions acted on by the scheduler (`serve --actuate dry-run|on`)."""
    config: LoopConfig = field(default_factory=LoopConfig)
    """What they were built with."""
    agent: RemedyAgent | None = None
    """The in-process node agent carrying out the remediation loop's resets and verifications."""
    kernel_log: KernelLog[Any] | None = None
    """The in-process collector's reader of the node's kernel log (live GPUs)."""

    def data_now(self) -> datetime:
        """The time the newest readings describe: simulated/replayed time, or the wall clock."""
        return data_now(self.sampler)

    def start(self) -> None:
        """Start the background threads (the app's lifespan calls this)."""
        if self.buffer is not None:
            self.buffer.start()
        if self.kernel_log is not None:
            self.kernel_log.start()
        if self.sampler is not None:
            self.sampler.start()
        if self.probes is not None:
            self.probes.start()
        if self.replica is not None:
            self._first_heartbeat(self.replica)
            self.replica.start()
        if self.puller is not None:
            self.puller.start()
        self.scorer.load_latest()
        self.scorer.start()
        if self.actuator is not None:
            self.actuator.start()
        if self.agent is not None:
            self.agent.start()

    @staticmethod
    def _first_heartbeat(replica: Replica) -> None:
        """Claim shards before the first pull and round (a database that is down: the loop tries again)."""
        try:
            replica.tick()
        except StoreError as err:
            log.warning("replica %s: first heartbeat failed, retried in %gs: %s",
                        replica.replica_id, replica.lease_s / 3, err)  # fmt: skip

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
        if self.actuator is not None:
            self.actuator.stop()
        self.scorer.stop()
        if self.puller is not None:
            self.puller.stop()
        if self.replica is not None:
            self.replica.stop()  # gives the shards back: the others take them at once
        if self.probes is not None:
            self.probes.stop()
        if self.sampler is not None:
            self.sampler.stop()
        if self.kernel_log is not None:
            self.kernel_log.stop()
        if self.buffer is not None:
            self.buffer.stop()  # writes what is left when the database is there
        if self.backend is not None:
            self.backend.close()


def data_now(sampler: Sampler | None) -> datetime:
    """The time of `sampler`'s latest snapshot (simulated or replayed time where the backend has its own), else now."""
    snap = sampler.latest if sampler is not None else None
    return datetime.fromtimestamp(snap.sample_time if snap is not None else time.time(), UTC)


def build_loops(
    store: Store,
    model: RiskModel,
    config: LoopConfig,
    *,
    backend: Backend | None = None,
    puller: PrometheusPuller | None = None,
    replica: Replica | None = None,
    actuation: tuple[Target, ActuatorConfig] | None = None,
) -> Loops:
    """Assemble (not start) the loops as `config` says; without a backend or a puller, scoring only.

    With a `replica` (several `serve --source prometheus` on one database), the scorer and the
    puller work on its share of the fleet and the scorer keeps the database's clock. With
    `actuation` (a scheduler and how to act on it), an actuator runs on the scorer's clock."""
    sampler = registry = buffer = None
    extra: Callable[[], bytes] | None = None
    health: Callable[[], tuple[bool, str]] | None = None
    probe_scheduler = None
    kernel_log = None
    if backend is not None:
        simulated = backend.data_time() is not None  # its own clock, ahead of ours by design
        buffer = IngestBuffer(store, capacity=config.buffer_samples, clock=None if simulated else _wall_clock)
        sampling = build_sampling(
            backend, config.fields, config.interval_s, config.hostname_label, probes=config.probes,
            on_probe_results=buffer.add_probes, attributors=config.attributors, sysfs_root=config.sysfs_root,
        )  # fmt: skip
        sampler, registry, probe_scheduler = sampling.sampler, sampling.registry, sampling.probes
        if config.kernel_log is not None:
            kernel_log = attach_for_backend(
                registry, sampler, backend, config.kernel_log, config.hostname_label, config.sysfs_root
            )
        xids = XidIntervals()  # the history keeps each interval's XID, the readings DCGM's last-seen gauge
        sampler.subscribe(lambda snap: buffer.add(*xids.rows(snap)))
        sampler.subscribe(lambda snap: buffer.add_workloads(*snapshot_workloads(snap)))
        reg = registry
        extra = lambda: render(reg.collect())  # noqa: E731
        health = sampler.health
    elif puller is not None:  # fleet mode: the samples come from Prometheus
        pull_reg = CollectorRegistry(auto_describe=False)
        pull_reg.register(puller)
        if replica is not None:
            pull_reg.register(replica)
        extra = lambda: generate_latest(pull_reg)  # noqa: E731
        health = puller.health if replica is None else _with_replica(puller.health, replica)
    clock_of = sampler
    now = replica.now if replica is not None else lambda: data_now(clock_of)
    scorer = Scorer(
        store, model, config.thresholds, config.score_interval_s, now=now, retention=config.retention, replica=replica,
        window_mb=config.score_window_mb, lanes=config.score_lanes,
    )  # fmt: skip
    actuator = None
    if actuation is not None:
        # On the scorer's clock: the settle period and the breaker's window are measured in the time
        # the decisions were made in (simulated time in the demo).
        target, acting = actuation
        actuator = Actuator(store, target, acting, now=now, owns=_share_of(replica) if replica is not None else None)
    agent = None
    if actuator is not None and actuator.remediator is not None and backend is not None and registry is not None:
        # The small install: the node agent's part in this process, on the same backend, without HTTP.
        local = LocalRemedies(store, actuator.remediator, now)
        live = sampler
        # The idle check of backends that cannot tell by themselves (DCGM): the latest sample's utilisation.
        util = snapshot_util(lambda: live.latest if live is not None else None, config.interval_s)
        verifier = Verifier(backend, verify_runner(backend), config.probes or ProbeConfig(), fallback_util=util)
        agent = RemedyAgent(local, backend, allow_reset=config.allow_reset, verifier=verifier,
                            poll_s=config.remedy_poll_s)  # fmt: skip
        registry.register(RemedyCollector(agent))
    return Loops(store, backend, sampler, registry, buffer, scorer, probe_scheduler, puller, health,
                 _with_model_metrics(extra, scorer), replica, actuator, config, agent, kernel_log)  # fmt: skip


def _share_of(replica: Replica) -> Callable[[], Callable[[str], bool]]:
    """Asked once per actuator pass: which hostnames the replica holds now."""
    return lambda: replica.share().has


def _with_replica(health: Callable[[], tuple[bool, str]], replica: Replica) -> Callable[[], tuple[bool, str]]:
    """`health` with what the replica holds added to its detail (holding no shard is not unhealthy)."""

    def both() -> tuple[bool, str]:
        ok, why = health()
        return ok, f"{why}; {replica.health()}"

    return both


def _with_model_metrics(extra: Callable[[], bytes] | None, scorer: Scorer) -> Callable[[], bytes]:
    """`extra`'s series followed by the scoring model's (`ModelMetrics`): which model, reloads, load failures."""
    model_reg = CollectorRegistry(auto_describe=False)
    model_reg.register(ModelMetrics(scorer))
    if extra is None:
        return lambda: generate_latest(model_reg)
    first = extra
    return lambda: first() + generate_latest(model_reg)


def _wall_clock() -> datetime:
    return datetime.now(UTC)


def warm_up(loops: Loops, steps: int) -> int:
    """Sample `steps` times as fast as the backend goes and store it all (the demo starts with days of history)."""
    assert loops.sampler is not None and loops.buffer is not None
    for _ in range(steps):
        loops.sampler.sample_once()  # the buffer gets every snapshot
    return loops.buffer.flush()
