"""Fleet mode learns what runs on each GPU from the exporters' labels, through a real Prometheus."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from core.prom_import import workloads_at
from tests.integration.conftest import poll, prom_query, start_prometheus

pytestmark = pytest.mark.integration

BASE = 'gpu="{g}",UUID="GPU-{u}",Hostname="node-1",modelName="H100"'
MIG = 'GPU_I_ID="{i}",GPU_I_PROFILE="1g.10gb"'
EXPOSITION = "\n".join([
    "# TYPE DCGM_FI_DEV_FB_USED gauge",
    "DCGM_FI_DEV_FB_USED{" + BASE.format(g=0, u="a") + ',pod="train-0",namespace="ml",container="main"} 1000',
    "DCGM_FI_DEV_FB_USED{" + BASE.format(g=1, u="b") + "} 0",
    "DCGM_FI_DEV_FB_USED{" + BASE.format(g=2, u="c") + "," + MIG.format(i=1)
    + ',pod="infer-1",namespace="serve",container="triton"} 500',
    "DCGM_FI_DEV_FB_USED{" + BASE.format(g=2, u="c") + "," + MIG.format(i=2) + ',hpc_job="4242"} 600',
    "",
]).encode()  # fmt: skip


class _Exporter(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(EXPOSITION)))
        self.end_headers()
        self.wfile.write(EXPOSITION)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def exporter() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_workloads_come_from_the_series_labels(tmp_path: Path, exporter: str) -> None:
    prom = start_prometheus(tmp_path / "prom", {"gpuhealth": [exporter]})
    try:
        poll("scraped", lambda: prom_query(prom.url, "DCGM_FI_DEV_FB_USED"), lambda r: len(r) == 4, deadline_s=30)
        got = workloads_at(prom.url, datetime.now(UTC))
    finally:
        prom.stop()
    assert got["GPU-a"] == ("node-1", [{"pod": "train-0", "namespace": "ml", "container": "main"}])
    assert got["GPU-b"] == ("node-1", [])  # series, but nothing runs there: cleared
    host, sets = got["GPU-c"]
    assert host == "node-1" and sorted(sets, key=str) == sorted([
        {"pod": "infer-1", "namespace": "serve", "container": "triton", "GPU_I_ID": "1", "GPU_I_PROFILE": "1g.10gb"},
        {"hpc_job": "4242", "GPU_I_ID": "2", "GPU_I_PROFILE": "1g.10gb"},
    ], key=str)  # fmt: skip
