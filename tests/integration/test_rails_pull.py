"""Fleet mode learns each GPU's InfiniBand rail from the collector's port_gpu_info, through a real Prometheus."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from core.prom_import import RAIL_METRIC, rails_at
from tests.collector import sysfs_ib
from tests.collector.test_infiniband import _registry
from tests.integration.conftest import poll, prom_query, start_prometheus

pytestmark = pytest.mark.integration


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[str]:
    """The collector's own InfiniBand series over the fake sysfs tree (mlx5_0 on GPU 0's switch, mlx5_1 on
    GPU 1's NUMA node)."""
    reg, _ = _registry(sysfs_ib.build(tmp_path / "sys"))
    body = generate_latest(reg)

    class Exporter(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_each_gpus_rail_comes_from_the_port_gpu_info_series(tmp_path: Path, exporter: str) -> None:
    prom = start_prometheus(tmp_path / "prom", {"gpuhealth": [exporter]})
    try:
        poll("scraped", lambda: prom_query(prom.url, RAIL_METRIC), lambda r: len(r) == 2, deadline_s=30)
        got = rails_at(prom.url, datetime.now(UTC))
    finally:
        prom.stop()
    rails = {u: rail for u, (_, rail) in got.items()}
    assert rails == {"GPU-00000000-test": "mlx5_0/1", "GPU-00000001-test": "mlx5_1/1"}
    assert {host for host, _ in got.values()} == {"node-a"}
