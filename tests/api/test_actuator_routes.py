"""The actuator's routes: the audit with its one-line summaries, hold, release and the breaker's reset
(writes need the token), and its series on /metrics."""

from __future__ import annotations

from fastapi.testclient import TestClient

from actuate.breaker import BreakerPolicy
from actuate.memory import MemoryTarget
from api.app import ApiConfig, create_app
from service.actuator import Actuator, ActuatorConfig
from store import Store
from tests.fleet_decisions import T0, set_decisions

TOKEN = "t0ken-for-the-actuator"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOSTS = [f"node-{i:03d}" for i in range(4)]


def app_with(store: Store, mode: str = "dry-run") -> tuple[TestClient, Actuator]:
    config = ActuatorConfig(mode=mode, breaker=BreakerPolicy(max_fraction=1.0, max_nodes=1))  # type: ignore[arg-type]
    act = Actuator(store, MemoryTarget(lambda: HOSTS), config, now=lambda: T0)
    return TestClient(create_app(store, ApiConfig(token=TOKEN, actuator=act))), act


def test_actions_list_what_was_planned_with_a_summary_a_person_reads(store: Store) -> None:
    client, act = app_with(store)
    set_decisions(store, T0, HOSTS, {("node-001", 1): "rma", ("node-002", 0): "drain", ("node-003", 0): "watch"})
    act.reconcile_once()
    body = client.get("/v1/actions").json()
    assert body["total"] == 3
    by_host = {a["hostname"]: a for a in body["items"]}
    assert by_host["node-001"]["summary"] == "would drain node-001: GPU 1 rma (row remap failure)"
    assert by_host["node-002"]["result"] == "blocked"  # one new drain per hour on this breaker
    assert by_host["node-002"]["summary"].startswith("drain blocked node-002: GPU 0 drain (row remap pending: reset)")
    assert "the breaker would open" in by_host["node-002"]["summary"]
    assert by_host["node-003"]["summary"] == "would watch node-003: GPU 0 watch (risk 0.40)"
    only = client.get("/v1/actions", params={"result": "blocked"}).json()
    assert [a["hostname"] for a in only["items"]] == ["node-002"]
    assert client.get("/v1/actions", params={"hostname": "node-003"}).json()["total"] == 1
    assert client.get("/v1/actions", params={"result": "nonsense"}).status_code == 422
    state = client.get("/v1/actuator").json()
    assert (state["mode"], state["target"], state["breaker_open"], state["passes"]) == ("dry-run", "sim", False, 1)
    metrics = client.get("/metrics").text
    assert 'gpuhealth_actions_total{action="rma",result="planned",target="sim"} 1.0' in metrics
    assert 'gpuhealth_actuator_breaker_open{target="sim"} 0.0' in metrics


def test_hold_release_and_reset_need_the_token(store: Store) -> None:
    client, _ = app_with(store, "on")
    set_decisions(store, T0, HOSTS, {})
    body = {"by": "alice"}
    for path in ("/v1/nodes/node-001/hold", "/v1/nodes/node-001/release", "/v1/actuator/reset"):
        assert client.post(path, json=body).status_code == 401
        assert client.post(path, json=body, headers={"Authorization": "Bearer wrong"}).status_code == 403
    held = client.post("/v1/nodes/node-001/hold", json=body, headers=AUTH).json()
    assert (held["held"], held["held_by"]) == (True, "alice")
    assert client.delete("/v1/nodes/node-001/hold", params={"by": "bob"}, headers=AUTH).json()["held"] is False
    released = client.post("/v1/nodes/node-002/release", json=body, headers=AUTH).json()
    assert released["released_by"] == "alice" and released["released_at"] is not None
    assert client.post("/v1/nodes/node-002/hold", json={"by": ""}, headers=AUTH).status_code == 422
    assert client.post("/v1/nodes/node-002/hold", json={"by": "x", "extra": 1}, headers=AUTH).status_code == 422


def test_the_breaker_opens_shows_on_metrics_and_closes_only_by_reset(store: Store) -> None:
    client, act = app_with(store, "on")
    set_decisions(store, T0, HOSTS, {("node-001", 0): "drain", ("node-002", 0): "drain"})
    assert act.reconcile_once().breaker_open
    assert 'gpuhealth_actuator_breaker_open{target="sim"} 1.0' in client.get("/metrics").text
    state = client.get("/v1/actuator").json()
    assert state["breaker_open"] and "newly demoted or drained" in state["reason"]
    reset = client.post("/v1/actuator/reset", json={"by": "alice"}, headers=AUTH).json()
    assert (reset["breaker_open"], reset["reset_by"]) == (False, "alice")
    assert 'gpuhealth_actuator_breaker_open{target="sim"} 0.0' in client.get("/metrics").text


def test_without_an_actuator_it_says_off_and_refuses_a_reset(store: Store) -> None:
    client = TestClient(create_app(store, ApiConfig(token=TOKEN)))
    assert client.get("/v1/actuator").json()["mode"] == "off"
    r = client.post("/v1/actuator/reset", json={"by": "alice"}, headers=AUTH)
    assert r.status_code == 409 and "no actuator" in r.json()["detail"]
    assert "gpuhealth_actuator" not in client.get("/metrics").text


def test_a_closed_breaker_is_not_reset(store: Store) -> None:
    """A reset restarts the breaker's window: a closed one's is refused, so resets cannot lift its bound."""
    client, _ = app_with(store, "on")
    r = client.post("/v1/actuator/reset", json={"by": "mallory"}, headers=AUTH)
    assert r.status_code == 409 and "closed" in r.json()["detail"]
    assert client.get("/v1/actuator").json()["reset_at"] is None


def test_only_a_node_the_store_or_the_scheduler_knows_is_held_or_released(store: Store) -> None:
    """A typo used to answer 200 "held": true for a node GET /v1/nodes/{same} says is not there, and leave
    a row nothing prunes. A node the store knows (its GPUs were seen) or the scheduler showed is held."""
    client, act = app_with(store, "on")
    set_decisions(store, T0, HOSTS[:2], {})
    body = {"by": "alice"}
    for verb, path in (("post", "hold"), ("post", "release"), ("delete", "hold")):
        kw = {"json": body} if verb == "post" else {"params": body}
        r = client.request(verb.upper(), f"/v1/nodes/node-0O1/{path}", headers=AUTH, **kw)
        assert r.status_code == 404 and "node-0O1" in r.json()["detail"], (verb, path, r.text)
        assert client.request(verb.upper(), f"/v1/nodes/node-001/{path}", headers=AUTH, **kw).status_code == 200
    assert client.get("/v1/nodes/node-0O1").status_code == 404
    assert store.actuation.node_controls(["node-0O1"]) == {}
    assert client.post("/v1/nodes/node-003/hold", json=body, headers=AUTH).status_code == 404
    act.reconcile_once()  # the scheduler shows node-003, whose GPUs the store has not seen
    assert client.post("/v1/nodes/node-003/hold", json=body, headers=AUTH).json()["held"] is True
    store.actuation.hold("gone-1", held=True, by="alice", at=T0)  # held before it left (or before this check)
    assert client.delete("/v1/nodes/gone-1/hold", params=body, headers=AUTH).json()["held"] is False
