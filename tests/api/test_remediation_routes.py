"""The remediation routes over HTTP: the node agent's tasks and reports (a report is a write: token),
what a task no longer open answers (409), bad reports (422), the list, and the loop's series on /metrics."""

from __future__ import annotations

from datetime import timedelta

from fastapi.testclient import TestClient

from actuate.breaker import BreakerPolicy
from actuate.memory import MemoryTarget
from api.app import ApiConfig, create_app
from service.actuator import Actuator, ActuatorConfig
from service.remediation import RemediationConfig
from store import Store
from tests.fleet_decisions import T0, Clock
from tests.service.test_remediation import HOSTS, REMAP, sample, score

TOKEN = "t0ken-for-the-remedies"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def app_with(store: Store) -> tuple[TestClient, Actuator, Clock]:
    clock = Clock(T0)
    config = ActuatorConfig(mode="on", breaker=BreakerPolicy(max_fraction=1.0, max_nodes=100),
                            remediation=RemediationConfig())  # fmt: skip
    act = Actuator(store, MemoryTarget(lambda: HOSTS), config, now=clock)
    return TestClient(create_app(store, ApiConfig(token=TOKEN, actuator=act))), act, clock


def test_the_agent_gets_its_task_reports_it_and_the_gpu_returns(store: Store) -> None:
    client, act, clock = app_with(store)
    score(store, T0, {("node-2", 1): REMAP})
    assert client.get("/v1/nodes/node-2/remedies").json() == {"hostname": "node-2", "tasks": []}
    act.reconcile_once()
    (task,) = client.get("/v1/nodes/node-2/remedies").json()["tasks"]
    assert (task["do"], task["gpu_index"], task["hostname"]) == ("reset", 1, "node-2")
    assert client.get("/v1/nodes/node-0/remedies").json()["tasks"] == []
    assert client.get("/v1/nodes/nowhere/remedies").json()["tasks"] == []  # unknown: nothing to do
    url = f"/v1/remediations/{task['remediation_id']}/report"
    done = {"do": "reset", "result": "done", "detail": "GPU reset", "gpu_uuid": task["gpu_uuid"], "duration_s": 4.2}
    assert client.post(url, json=done).status_code == 401
    assert client.post(url, json=done, headers={"Authorization": "Bearer wrong"}).status_code == 403
    taken = client.post(url, json=done, headers=AUTH)
    assert taken.status_code == 200 and taken.json()["remediation"]["stage"] == "verify"
    again = client.post(url, json=done, headers=AUTH)
    assert again.status_code == 409 and "drop it" in again.json()["detail"]
    (verify,) = client.get("/v1/nodes/node-2/remedies").json()["tasks"]
    assert verify["do"] == "verify"
    probes = [{"probe": "gemm", "passed": True, "detail": "0 wrong"}, {"probe": "memtest", "passed": True}]
    ok = client.post(url, json={"do": "verify", "result": "done", "probes": probes}, headers=AUTH)
    assert ok.status_code == 200
    clock.t += timedelta(minutes=1)
    sample(store, clock.t, "node-2", 1)
    act.reconcile_once()
    one = client.get(f"/v1/remediations/{task['remediation_id']}").json()
    assert (one["result"], one["verified"]["probes"][1]["probe"]) == ("returned", "memtest")
    page = client.get("/v1/remediations", params={"hostname": "node-2"}).json()
    assert page["total"] == 1 and client.get("/v1/remediations", params={"open": "true"}).json()["total"] == 0
    text = client.get("/metrics").text
    assert 'gpuhealth_remediations_total{remedy="reset",result="returned"} 1.0' in text
    assert 'gpuhealth_remediation_seconds_count{remedy="reset"} 1.0' in text
    assert 'gpuhealth_remediations_open{remedy="reset",stage="verify"} 0.0' in text
    assert 'gpuhealth_remediations_stuck{remedy="reset",stage="drain"} 0.0' in text
    actions = [a["summary"] for a in client.get("/v1/actions").json()["items"]]
    assert any(s.startswith("return node-2: GPU 1 returned") for s in actions), actions


def test_bad_reports_are_refused_and_change_nothing(store: Store) -> None:
    client, act, _ = app_with(store)
    score(store, T0, {("node-2", 1): REMAP})
    act.reconcile_once()
    (task,) = client.get("/v1/nodes/node-2/remedies").json()["tasks"]
    url = f"/v1/remediations/{task['remediation_id']}/report"
    for body in (
        {"do": "reset", "result": "maybe"},
        {"do": "format", "result": "done"},
        {"do": "reset", "result": "done", "extra": 1},
        {"do": "reset", "result": "done", "detail": "x" * 5000},
        {"do": "verify", "result": "done", "probes": [{"probe": "gemm", "passed": True}] * 33},
    ):
        assert client.post(url, json=body, headers=AUTH).status_code == 422, body
    nan = client.post(url, content=b'{"do": "reset", "result": "done", "duration_s": NaN}', headers=AUTH)
    assert nan.status_code == 422
    other = {"do": "reset", "result": "done", "gpu_uuid": "GPU-someone-else"}
    assert client.post(url, json=other, headers=AUTH).status_code == 409  # not this GPU's task
    assert client.post("/v1/remediations/999/report", json={"do": "reset", "result": "done"}, headers=AUTH
                       ).status_code == 404  # fmt: skip
    assert client.get("/v1/remediations/0").status_code == 422
    assert store.remediations.get(task["remediation_id"])["stage"] == "remedy"
