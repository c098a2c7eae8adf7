"""Fleet mode end to end: `gpuhealth collect` → the real Prometheus → `gpuhealth serve --source prometheus`.

The service has no collector of its own: it pulls the node's series from Prometheus,
stores them at the pull step, scores them, and answers for every GPU the node exports.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import PromClient, Service, SimNode, free_port, poll, start_service

pytestmark = pytest.mark.integration


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_serve_pulls_the_fleet_from_prometheus(
    prometheus: Service, prom: PromClient, sim_node: SimNode, tmp_path: Path
) -> None:
    prom.wait_for("count(DCGM_FI_DEV_GPU_TEMP)", lambda r: bool(r) and float(r[0]["value"][1]) == sim_node.gpus)
    port = free_port()
    cmd = [
        sys.executable, "-m", "gpuhealth.cli", "serve", "--source", "prometheus", "--prometheus", prometheus.url,
        "--pull-every", "2s", "--pull-step", "1s", "--backfill", "10m", "--score-interval", "3s",
        "--db", f"sqlite:///{tmp_path / 'fleet.db'}", "--listen", f"127.0.0.1:{port}", "--log-level", "INFO",
    ]  # fmt: skip
    svc = start_service("gpuhealth serve --source prometheus", cmd, f"http://127.0.0.1:{port}", "/readyz",
                        tmp_path / "serve.log")  # fmt: skip
    try:
        assert f"pulling from Prometheus at {prometheus.url}" in svc.log_tail()
        poll("a few pulls", lambda: svc.get("/metrics"), lambda t: metric(t, "gpuhealth_pull_runs_total") >= 3)

        def gpus() -> list[dict[str, object]]:
            return list(json.loads(svc.get("/v1/gpus?limit=100"))["items"])

        items = poll("every GPU scored", gpus, lambda g: len(g) == sim_node.gpus and all(x["scored_at"] for x in g))
        assert {x["hostname"] for x in items} == {sim_node.hostname}
        assert sorted(x["gpu_index"] for x in items) == list(range(sim_node.gpus))

        # What was stored is what Prometheus says at that step.
        uuid = str(items[0]["uuid"])
        latest = json.loads(svc.get(f"/v1/gpus/{uuid}"))["latest_sample"]
        t = latest["timestamp"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", t), t  # whole seconds: the 1 s pull step
        at = prom.api("/api/v1/query", {"query": f'DCGM_FI_DEV_GPU_TEMP{{UUID="{uuid}"}}', "time": t})["result"]
        assert at and float(at[0]["value"][1]) == latest["gpu_temp_c"]

        text = svc.get("/metrics")
        assert metric(text, "gpuhealth_pull_failures_total") == 0
        assert metric(text, "gpuhealth_pull_samples_total") >= 2 * sim_node.gpus
        # a minute of history is too little for a risk score, but every GPU has its decision, as the API says
        for x in items:
            has = rf'^gpuhealth_decision\{{[^}}]*UUID="{x["uuid"]}"[^}}]*decision="{x["decision"]}"[^}}]*}} 1.0$'
            assert re.search(has, text, re.M), text
        assert svc.get("/healthz")  # healthy: the pulls succeed
        svc.assert_alive()
    finally:
        svc.stop()
