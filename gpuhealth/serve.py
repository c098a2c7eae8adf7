"""`gpuhealth serve` wired up: collector → ingest buffer → store ← scoring loop, API and /metrics in one process.

This module (with the CLI) is the only place that joins the collector and the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from api.app import BODY_TIMEOUT_S, ApiConfig, create_app
from api.puller import PrometheusPuller
from api.service import IngestBuffer, Scorer
from collector.backends.base import Backend
from collector.exporter import render
from collector.probes import ProbeConfig, ProbeScheduler
from collector.records import snapshot_rows
from collector.run import build_sampling
from collector.sampler import Sampler
from gpuhealth.catalog import Field
from predictor.model import RiskModel
from predictor.policy import Thresholds
from store import Retention, Store


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
    probes: ProbeScheduler | None = None
    puller: PrometheusPuller | None = None

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
        if self.probes is not None:
            self.probes.start()
        if self.puller is not None:
            self.puller.start()
        self.scorer.load_latest()
        self.scorer.start()

    def stop(self) -> None:
        self.scorer.stop()
        if self.puller is not None:
            self.puller.stop()
        if self.probes is not None:
            self.probes.stop()
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
    metrics_open: bool | None = None,
    max_request_bytes: int = 1_048_576,
    body_timeout_s: float = BODY_TIMEOUT_S,
    buffer_samples: int = 200_000,
    hostname_label: str = "Hostname",
    probes: ProbeConfig | None = None,
    sim_seed: int = 0,
    retention: Retention | None = None,
    puller: PrometheusPuller | None = None,
) -> Service:
    """Assemble (not start) the service; without a backend or a puller it is API and scoring only."""
    sampler = registry = buffer = None
    svc_ref: dict[str, Service] = {}
    extra: Callable[[], bytes] | None = None
    health: Callable[[], tuple[bool, str]] | None = None
    probe_scheduler = None
    if backend is not None:
        simulated = callable(getattr(backend, "data_time", None))  # its own clock, ahead of ours by design
        buffer = IngestBuffer(store, capacity=buffer_samples, clock=None if simulated else lambda: datetime.now(UTC))
        buf = buffer
        sampling = build_sampling(
            backend, fields or [], interval_s, hostname_label, probes=probes, sim_seed=sim_seed,
            on_probe_results=lambda rows: buf.add_probes(_probe_rows(rows, svc_ref)),
        )  # fmt: skip
        sampler, registry, probe_scheduler = sampling.sampler, sampling.registry, sampling.probes
        sampler.subscribe(lambda snap: buffer.add(*snapshot_rows(snap)))
        reg = registry
        extra = lambda: render(reg.collect())  # noqa: E731
        health = sampler.health
    elif puller is not None:  # fleet mode: the samples come from Prometheus
        pull_reg = CollectorRegistry(auto_describe=False)
        pull_reg.register(puller)
        extra = lambda: generate_latest(pull_reg)  # noqa: E731
        health = puller.health
    scorer = Scorer(
        store,
        model,
        thresholds or Thresholds(),
        score_interval_s,
        now=lambda: svc_ref["svc"].data_now(),
        retention=retention,
    )
    cfg = ApiConfig(
        token=token,
        read_open=read_open,
        metrics_open=metrics_open,
        max_request_bytes=max_request_bytes,
        body_timeout_s=body_timeout_s,
        host_label=hostname_label,
        scorer=scorer,
        buffer=buffer,
        collector_health=health,
        extra_metrics=extra,
    )
    app = create_app(store, cfg)
    svc = Service(app, store, backend, sampler, registry, buffer, scorer, probe_scheduler, puller)
    svc_ref["svc"] = svc
    cfg.on_start.append(svc.start)
    cfg.on_stop.append(svc.stop)
    return svc


def _probe_rows(rows: list[dict[str, Any]], svc_ref: dict[str, Service]) -> list[dict[str, Any]]:
    """Probe results to keep; a simulated or replayed fleet files them under its own clock.

    They go through the ingest buffer, so a database outage holds them instead of losing them."""
    svc = svc_ref.get("svc")
    snap = svc.sampler.latest if svc is not None and svc.sampler is not None else None
    if svc is not None and snap is not None and snap.data_time is not None:
        at = svc.data_now()
        rows = [{**r, "ran_at": at} for r in rows]
    return rows


def warm_up(svc: Service, steps: int) -> int:
    """Sample `steps` times as fast as the backend goes and store it all (the demo starts with days of history)."""
    assert svc.sampler is not None and svc.buffer is not None
    for _ in range(steps):
        svc.sampler.sample_once()  # the buffer gets every snapshot
    return svc.buffer.flush()
