"""`gpuhealth serve` on a real PostgreSQL that is stopped mid-run and started again: nothing is lost.

While the database is down the API answers 503 with Retry-After, /readyz fails, the
collector keeps sampling (and probing its idle GPUs) into its memory buffer, and
`gpuhealth_store_up` is 0. Once the database is back the buffer drains; at shutdown every
sample the collector took is in the database exactly once, and so is every probe result.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.integration.conftest import free_port, http_get, poll, start_service
from tests.postgres import PostgresServer, postgres_server  # noqa: F401  (session fixture)

pytestmark = pytest.mark.integration


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def test_database_outage_loses_no_samples(postgres_server: PostgresServer, tmp_path: Path) -> None:  # noqa: F811
    url = postgres_server.create_database("outage")
    port = free_port()
    token = tmp_path / "token"
    token.write_text("outage-token\n")
    cmd = [
        sys.executable, "-m", "gpuhealth.cli", "serve",
        "--backend", "sim", "--sim-nodes", "2", "--sim-gpus", "2", "--sim-spare-nodes", "1",
        "--interval", "0.2s", "--sim-speed", "60",
        "--db", url, "--listen", f"127.0.0.1:{port}", "--score-interval", "1h",
        "--token-file", str(token), "--log-level", "INFO",
    ]  # fmt: skip
    svc = start_service(
        "gpuhealth serve", cmd, f"http://127.0.0.1:{port}", "/readyz", tmp_path / "serve.log",
        env={"GPUHEALTH_PROBE_EVERY": "1s"},  # the spare node's two GPUs are probed through the outage
    )  # fmt: skip
    try:

        def metrics() -> str:
            return svc.get("/metrics")

        poll("samples written", metrics, lambda t: metric(t, "gpuhealth_buffer_written_samples_total") >= 20)
        postgres_server.stop()
        held = poll(
            "samples and probe results held in memory", metrics,
            lambda t: metric(t, "gpuhealth_buffer_samples") >= 40 and metric(t, "gpuhealth_buffer_probe_results") >= 2,
        )  # fmt: skip
        assert metric(held, "gpuhealth_store_up") == 0.0
        status, body = http_get(f"{svc.url}/v1/gpus")
        assert status == 503, body
        assert b"database unavailable" in body
        status, _ = http_get(f"{svc.url}/readyz")
        assert status == 503
        assert metric(svc.get("/metrics"), "gpuhealth_score_runs_total") >= 0  # metrics still answer
        postgres_server.start()
        poll(
            "buffer drained", metrics,
            lambda t: metric(t, "gpuhealth_buffer_samples") < 8 and metric(t, "gpuhealth_buffer_probe_results") < 8,
        )  # fmt: skip
        svc.assert_alive()
        assert http_get(f"{svc.url}/v1/gpus")[0] == 200
    finally:
        svc.stop()
    log = svc.log_tail(20000)
    m = re.search(
        r"ingest stopped: received (\d+), written (\d+), duplicates (\d+), dropped (\d+), still held (\d+)", log
    )
    assert m, log
    received, written, duplicates, dropped, held_at_exit = map(int, m.groups())
    assert dropped == 0 and held_at_exit == 0 and duplicates == 0, m.group(0)
    p = re.search(r"probe results received (\d+), written (\d+), dropped (\d+), still held (\d+)", log)
    assert p, log
    p_received, p_written, p_dropped, p_held = map(int, p.groups())
    assert p_dropped == 0 and p_held == 0, p.group(0)
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        n = conn.execute(sa.text("SELECT count(*) FROM samples")).scalar_one()
        distinct = conn.execute(sa.text("SELECT count(DISTINCT (gpu_uuid, timestamp)) FROM samples")).scalar_one()
        probes = conn.execute(sa.text("SELECT count(*) FROM probe_results")).scalar_one()
    engine.dispose()
    assert n == received == written == distinct, (n, received, written, distinct)
    assert received > 60  # it really sampled through the outage
    assert probes == p_received == p_written >= 2, (probes, p_received, p_written)
