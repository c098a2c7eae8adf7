"""The assembled service acts on Kubernetes: `gpuhealth serve --actuate on --actuate-target kubernetes`
against the API server of tests/kube_api.py cordons a node, evicts its GPU pod and records an Event."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from store import Store
from tests.fleet_decisions import T0, set_decisions
from tests.integration.conftest import free_port, poll, start_service
from tests.kube_api import KubeApiServer

pytestmark = pytest.mark.integration


def test_serve_acts_on_kubernetes_end_to_end(tmp_path: Path) -> None:
    db = tmp_path / "svc.db"
    seed = Store.open(f"sqlite:///{db}")
    try:
        set_decisions(seed, T0, ["gpu-1", "gpu-2"], {("gpu-2", 0): "drain"})
    finally:
        seed.close()
    with KubeApiServer() as kube:
        for name in ("gpu-1", "gpu-2"):
            kube.add_node(name, labels={"nvidia.com/gpu.present": "true"})
        kube.add_pod("train", "job-0", "gpu-2", gpus=1)
        port = free_port()
        cmd = [sys.executable, "-m", "gpuhealth.cli", "serve", "--no-collector", "--db", f"sqlite:///{db}",
               "--listen", f"127.0.0.1:{port}", "--actuate", "on", "--actuate-target", "kubernetes"]  # fmt: skip
        env = {"GPUHEALTH_ACTUATE_INTERVAL": "1s", "GPUHEALTH_KUBE_SERVER": kube.url}
        svc = start_service("gpuhealth serve", cmd, f"http://127.0.0.1:{port}", "/readyz", tmp_path / "serve.log", env)
        try:
            poll("gpu-2 drained", lambda: kube.pods("gpu-2"), lambda pods: pods == [], deadline_s=20)
            node = kube.node("gpu-2")
            assert node["spec"]["unschedulable"] is True
            assert node["metadata"]["labels"]["gpuhealth.io/state"] == "drain"
            assert "gpuhealth.io/state" not in kube.node("gpu-1")["metadata"]["labels"]
            # The pass records the Event and the action after the eviction: wait for them too
            # (a busy machine can read the API server in between).
            reasons = poll("the drain's Event", lambda: [e["reason"] for e in kube.events], bool, deadline_s=20)
            assert reasons == ["GpuHealthDrain"]
            (action,) = poll("the action", lambda: json.loads(svc.get("/v1/actions"))["items"], bool, deadline_s=20)
            assert (action["result"], action["workloads"]) == ("applied", ["train/job-0 (gpu)"])
            svc.assert_alive()
        finally:
            svc.stop()
