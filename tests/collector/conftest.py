"""Fixtures of the collector's endpoint tests: a password's hash, and ExporterServers under web config files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import GaugeMetricFamily

from collector.exporter import ExporterServer
from collector.webconfig import WebConfigFile
from tests.collector.pki import bcrypt_hash
from tests.collector.web import PASSWORD


@pytest.fixture(scope="module")
def hashed() -> str:
    """A bcrypt hash of PASSWORD, at the lowest cost."""
    return bcrypt_hash(PASSWORD)


@pytest.fixture
def serve() -> Iterator[object]:
    """Start an ExporterServer under a web config file (or none); stopped at the test's end."""
    servers: list[ExporterServer] = []

    def start(web: Path | None) -> ExporterServer:
        srv = ExporterServer(_FakeRegistry(), lambda: (True, "ok"), "127.0.0.1", 0, WebConfigFile(web) if web else None)
        srv.start()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.stop()


class _FakeRegistry:
    def collect(self) -> list[object]:
        return [GaugeMetricFamily("gpuhealth_gpus", "GPUs visible and answering.", value=2)]
