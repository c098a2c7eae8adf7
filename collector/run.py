"""Wiring of a running collector: backend -> sampler -> collectors -> HTTP server."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client.registry import CollectorRegistry

from collector.backends.base import Backend
from collector.exporter import ExporterServer, GpuCollector, SelfCollector
from collector.sampler import Sampler
from gpuhealth.catalog import Field


@dataclass
class RunningCollector:
    """A running collector's parts, for the CLI, the service and tests."""

    backend: Backend
    sampler: Sampler
    registry: CollectorRegistry
    server: ExporterServer

    def start(self) -> None:
        self.sampler.start()
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
        self.sampler.stop()
        self.backend.close()


def build_collector(
    backend: Backend,
    fields: Sequence[Field],
    interval_s: float,
    host: str = "0.0.0.0",
    port: int = 9400,
    hostname_label: str = "Hostname",
) -> RunningCollector:
    """Assemble (but do not start) a collector serving `backend` on host:port."""
    sampler = Sampler(backend, interval_s)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(lambda: sampler.latest, fields, hostname_label))
    registry.register(SelfCollector(sampler))
    server = ExporterServer(registry, sampler.health, host, port)
    return RunningCollector(backend, sampler, registry, server)


def run_until_signalled(collector: RunningCollector) -> None:
    """Start, block until SIGINT/SIGTERM, stop cleanly."""
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    collector.start()
    try:
        done.wait()
    finally:
        collector.stop()
