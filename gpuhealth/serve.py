"""`gpuhealth serve` wired up: collector → ingest buffer → store ← scoring loop, API and /metrics in one process.

This module (with the CLI) is the only place that joins the collector and the API.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi import FastAPI
from prometheus_client.registry import CollectorRegistry

from api.app import ApiConfig, create_app
from api.service import IngestBuffer, Scorer
from collector.backends.base import Backend
from collector.exporter import GpuCollector, SelfCollector, render
from collector.records import snapshot_rows
from collector.sampler import Sampler
from gpuhealth.catalog import Field
from predictor.model import RiskModel
from predictor.policy import Thresholds
from store import Store

log = logging.getLogger(__name__)


@dataclass
class Service:
    """A service's running parts (tests drive them directly)."""

    app: FastAPI
    store: Store
    backend: Backend | None
    sampler: Sampler | None
    registry: CollectorRegistry | None
    buffer: IngestBuffer | None
    scorer: Scorer

    def data_now(self) -> datetime:
        """The time the newest readings describe: simulated/replayed time, or the wall clock."""
        snap = self.sampler.latest if self.sampler is not None else None
        return datetime.fromtimestamp(snap.sample_time if snap is not None else time.time(), UTC)

    def start(self) -> None:
        """Start the background threads (the app's lifespan calls this)."""
        if self.buffer is not None:
            self.buffer.start()
        if self.sampler is not None:
            self.sampler.start()
        self.scorer.load_latest()
        self.scorer.start()

    def stop(self) -> None:
        self.scorer.stop()
        if self.sampler is not None:
            self.sampler.stop()
        if self.buffer is not None:
            self.buffer.stop()  # writes what is left when the database is there
        if self.backend is not None:
            self.backend.close()


def build_service(
    store: Store,
    model: RiskModel,
    *,
    backend: Backend | None = None,
    fields: list[Field] | None = None,
    interval_s: float = 10.0,
    score_interval_s: float = 300.0,
    thresholds: Thresholds | None = None,
    token: str | None = None,
    read_open: bool = True,
    max_request_bytes: int = 1_048_576,
    buffer_samples: int = 200_000,
    hostname_label: str = "Hostname",
) -> Service:
    """Assemble (not start) the service; without a backend it is API and scoring only."""
    sampler = registry = buffer = None
    extra: Callable[[], bytes] | None = None
    health: Callable[[], tuple[bool, str]] | None = None
    if backend is not None:
        sampler = Sampler(backend, interval_s)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(GpuCollector(lambda: sampler.latest, fields or [], hostname_label))
        registry.register(SelfCollector(sampler))
        buffer = IngestBuffer(store, capacity=buffer_samples)
        sampler.subscribe(lambda snap: buffer.add(*snapshot_rows(snap)))
        reg = registry
        extra = lambda: render(reg.collect())  # noqa: E731
        health = sampler.health
    svc_ref: dict[str, Service] = {}
    scorer = Scorer(
        store,
        model,
        thresholds or Thresholds(),
        score_interval_s,
        now=lambda: svc_ref["svc"].data_now(),
    )
    cfg = ApiConfig(
        token=token,
        read_open=read_open,
        max_request_bytes=max_request_bytes,
        host_label=hostname_label,
        scorer=scorer,
        buffer=buffer,
        collector_health=health,
        extra_metrics=extra,
    )
    app = create_app(store, cfg)
    svc = Service(app, store, backend, sampler, registry, buffer, scorer)
    svc_ref["svc"] = svc
    cfg.on_start.append(svc.start)
    cfg.on_stop.append(svc.stop)
    return svc


def warm_up(svc: Service, steps: int) -> int:
    """Sample `steps` times as fast as the backend goes and store it all (the demo starts with days of history)."""
    assert svc.sampler is not None and svc.buffer is not None
    for _ in range(steps):
        svc.sampler.sample_once()  # the buffer gets every snapshot
    return svc.buffer.flush()
