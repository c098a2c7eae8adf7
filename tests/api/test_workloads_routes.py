"""A node and the decisions say which pods or jobs are on each GPU: what acting on it affects."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.app import ApiConfig, create_app
from store import Store
from tests.fleet_decisions import T0, set_decisions


def test_nodes_and_decisions_list_the_workloads_on_their_gpus(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'w.db'}")
    try:
        set_decisions(store, T0, ["node-a"], {("node-a", 1): "drain"})
        pod = {"pod": "infer-7", "namespace": "serve", "container": "triton"}
        store.workloads.replace({"GPU-node-a-0": [], "GPU-node-a-1": [pod]}, T0)
        client = TestClient(create_app(store, ApiConfig()))
        node = client.get("/v1/nodes/node-a").json()
        assert node["workloads"]["GPU-node-a-1"]["workloads"] == [pod]
        assert node["workloads"]["GPU-node-a-0"]["workloads"] == []
        (d,) = client.get("/v1/decisions").json()["items"]
        assert (d["gpu_uuid"], d["decision"], d["workloads"]) == ("GPU-node-a-1", "drain", [pod])
    finally:
        store.close()
