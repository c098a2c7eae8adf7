"""`gpuhealth serve` wired up: the service's loops (`service.assemble`) and the API over them.

This module (with the rest of the command line) is the only place that joins the
collector and the API.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from fastapi import FastAPI

from actuate.target import Target
from api.app import BODY_TIMEOUT_S, ApiConfig, create_app
from collector.attribution import Attributor
from collector.backends.base import Backend
from collector.probes import ProbeConfig, ProbeScheduler
from collector.sampler import Sampler
from core.catalog import Field
from core.labels import HOSTNAME
from predictor.model import RiskModel
from predictor.thresholds import Thresholds
from service.actuator import Actuator, ActuatorConfig
from service.assemble import Loops, build_loops
from service.assemble import warm_up as warm_up_loops
from service.ingest import IngestBuffer
from service.puller import PrometheusPuller
from service.replicas import Replica
from service.scorer import Scorer
from store import Retention, Store


@dataclass
class Service:
    """The loops and the API over them (tests drive the loops directly)."""

    app: FastAPI
    loops: Loops

    @property
    def store(self) -> Store:
        return self.loops.store

    @property
    def backend(self) -> Backend | None:
        return self.loops.backend

    @property
    def sampler(self) -> Sampler | None:
        return self.loops.sampler

    @property
    def buffer(self) -> IngestBuffer | None:
        return self.loops.buffer

    @property
    def scorer(self) -> Scorer:
        return self.loops.scorer

    @property
    def probes(self) -> ProbeScheduler | None:
        return self.loops.probes

    @property
    def puller(self) -> PrometheusPuller | None:
        return self.loops.puller

    @property
    def replica(self) -> Replica | None:
        return self.loops.replica

    @property
    def actuator(self) -> Actuator | None:
        return self.loops.actuator

    def data_now(self) -> datetime:
        return self.loops.data_now()


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
    hostname_label: str = HOSTNAME,
    probes: ProbeConfig | None = None,
    sim_seed: int = 0,
    retention: Retention | None = None,
    puller: PrometheusPuller | None = None,
    replica: Replica | None = None,
    actuation: tuple[Target, ActuatorConfig] | None = None,
    attributors: Sequence[Attributor] = (),
) -> Service:
    """Assemble (not start) the loops and the API; without a backend or a puller it is API and scoring only."""
    loops = build_loops(
        store, model, backend=backend, fields=fields, interval_s=interval_s, score_interval_s=score_interval_s,
        thresholds=thresholds, buffer_samples=buffer_samples, hostname_label=hostname_label, probes=probes,
        sim_seed=sim_seed, retention=retention, puller=puller, replica=replica, actuation=actuation,
        attributors=attributors,
    )  # fmt: skip
    cfg = ApiConfig(
        token=token,
        read_open=read_open,
        metrics_open=metrics_open,
        max_request_bytes=max_request_bytes,
        body_timeout_s=body_timeout_s,
        host_label=hostname_label,
        scorer=loops.scorer,
        buffer=loops.buffer,
        actuator=loops.actuator,
        collector_health=loops.health,
        extra_metrics=loops.extra_metrics,
        on_start=[loops.start],
        on_stop=[loops.stop],
    )
    return Service(create_app(store, cfg), loops)


def warm_up(svc: Service, steps: int) -> int:
    """Sample `steps` times as fast as the backend goes and store it all (the demo starts with days of history)."""
    return warm_up_loops(svc.loops, steps)
