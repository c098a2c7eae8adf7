"""The REST API over a scored simulated fleet, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from api.app import ApiConfig, create_app
from core.decisions import REMEDIES, REMEDY_WHEN
from tests.api.conftest import TOKEN, Fleet, auth

DECISIONS = {"ok", "watch", "demote", "drain", "rma"}


def test_gpu_list_pages(fleet: Fleet) -> None:
    r = fleet.client.get("/v1/gpus", params={"limit": 5})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["total"] == len(fleet.uuids)
    assert len(body["items"]) == 5
    second = fleet.client.get("/v1/gpus", params={"limit": 5, "offset": 5}).json()["items"]
    assert not {g["uuid"] for g in body["items"]} & {g["uuid"] for g in second}


def test_gpu_list_leads_with_what_needs_action(fleet: Fleet) -> None:
    """Issue 59.4: the default order is the decision's severity, then risk; rules' drains and RMAs come first
    whatever the model's risk, and pages join up."""
    rank = {d: i for i, d in enumerate(("rma", "drain", "demote", "watch", "ok", None))}
    items = fleet.client.get("/v1/gpus", params={"limit": 100}).json()["items"]
    keys = [(rank[g["decision"]], -(g["risk"] if g["risk"] is not None else -1.0)) for g in items]
    assert keys == sorted(keys)
    assert items[0]["decision"] in ("rma", "drain")
    pages = [g for o in range(0, len(items), 5) for g in fleet.client.get("/v1/gpus", params={"limit": 5, "offset": o})
             .json()["items"]]  # fmt: skip
    assert [g["uuid"] for g in pages] == [g["uuid"] for g in items]


def test_decision_takes_several_values(fleet: Fleet) -> None:
    c = fleet.client
    items = c.get("/v1/gpus", params={"limit": 100}).json()["items"]
    acting = [g["uuid"] for g in items if g["decision"] in ("rma", "drain", "demote", "watch")]
    assert acting
    listed = c.get("/v1/gpus?decision=rma,drain,demote,watch&limit=100").json()
    assert ([g["uuid"] for g in listed["items"]], listed["total"]) == (acting, len(acting))
    repeated = c.get("/v1/gpus?decision=rma,drain&decision=demote&decision=watch&limit=100").json()
    assert [g["uuid"] for g in repeated["items"]] == acting
    ok = c.get("/v1/gpus?decision=ok,rma&limit=100").json()["items"]
    assert {g["decision"] for g in ok} <= {"ok", "rma"} and len(ok) == sum(
        g["decision"] in ("ok", "rma") for g in items
    )
    bad = c.get("/v1/gpus?decision=rma,explode")
    assert bad.status_code == 422
    assert "unknown decision 'explode'" in bad.json()["detail"]
    assert "ok, watch, demote, drain, rma" in bad.json()["detail"]
    assert c.get("/v1/gpus?decision=rma,,drain").status_code == 422


def test_faulty_gpus_get_decisions_with_reasons(fleet: Fleet) -> None:
    items = fleet.client.get("/v1/gpus", params={"limit": 100}).json()["items"]
    by_uuid = {g["uuid"]: g for g in items}
    assert {g["decision"] for g in items} <= DECISIONS
    offbus = by_uuid[fleet.uuids[5]]
    assert offbus["decision"] in ("drain", "rma"), offbus
    assert offbus["reasons"]
    flagged = [g for g in items if g["decision"] != "ok"]
    assert all(g["reasons"] for g in flagged)
    assert by_uuid[fleet.uuids[1]]["decision"] != "ok", by_uuid[fleet.uuids[1]]


def test_filters(fleet: Fleet) -> None:
    c = fleet.client
    host = c.get(f"/v1/gpus/{fleet.uuids[0]}").json()["hostname"]
    on_host = c.get("/v1/gpus", params={"hostname": host, "limit": 100}).json()
    assert on_host["total"] == 8 and {g["hostname"] for g in on_host["items"]} == {host}
    risky = c.get("/v1/gpus", params={"min_risk": 0.3, "limit": 100}).json()["items"]
    assert all(g["risk"] >= 0.3 for g in risky)
    ok = c.get("/v1/gpus", params={"decision": "ok", "limit": 100}).json()
    assert ok["total"] > 0 and {g["decision"] for g in ok["items"]} == {"ok"}


def test_gpu_detail_has_latest_sample_and_risk_history(fleet: Fleet) -> None:
    uuid = fleet.uuids[9]
    d = fleet.client.get(f"/v1/gpus/{uuid}").json()
    assert d["uuid"] == uuid and d["model_name"] and d["gpu_index"] == 1
    assert d["latest_sample"]["gpu_temp_c"] > 0
    hist = fleet.client.get(f"/v1/gpus/{uuid}/risk").json()
    assert hist["uuid"] == uuid and len(hist["points"]) == 1
    assert hist["points"][0]["decision"] == d["decision"]


def test_node(fleet: Fleet) -> None:
    host = fleet.client.get(f"/v1/gpus/{fleet.uuids[3]}").json()["hostname"]
    node = fleet.client.get(f"/v1/nodes/{host}").json()
    assert node["hostname"] == host and len(node["gpus"]) == 8
    assert sum(node["counts"].values()) == 8


def test_unknown_things_are_404_with_a_reason(fleet: Fleet) -> None:
    for path in ("/v1/gpus/GPU-nope", "/v1/gpus/GPU-nope/risk", "/v1/nodes/no-such-host"):
        r = fleet.client.get(path)
        assert r.status_code == 404, path
        assert "nope" in r.json()["detail"] or "no-such-host" in r.json()["detail"]


def test_bad_parameters_are_422_in_one_line(fleet: Fleet) -> None:
    r = fleet.client.get("/v1/gpus", params={"limit": 0})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("invalid request: query.limit")
    assert fleet.client.get("/v1/gpus", params={"decision": "explode"}).status_code == 422
    assert fleet.client.get("/v1/gpus", params={"min_risk": "nan"}).status_code == 422


def test_decisions_lists_and_ack(fleet: Fleet) -> None:
    c = fleet.client
    active = c.get("/v1/decisions", params={"limit": 100}).json()
    assert active["total"] >= 2
    assert all(d["state"] in ("open", "acknowledged") for d in active["items"])
    drains = c.get("/v1/decisions", params={"decision": "drain"}).json()["items"]
    rmas = c.get("/v1/decisions", params={"decision": "rma"}).json()["items"]
    assert drains or rmas
    target = (drains or rmas)[0]
    assert c.post(f"/v1/decisions/{target['id']}/ack", json={"by": "ops"}).status_code == 401
    assert c.post(f"/v1/decisions/{target['id']}/ack", json={"by": "ops"}, headers=auth("wrong")).status_code == 403
    r = c.post(f"/v1/decisions/{target['id']}/ack", json={"by": "ops"}, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "acknowledged" and r.json()["acknowledged_by"] == "ops"
    assert c.post("/v1/decisions/999999/ack", json={"by": "ops"}, headers=auth()).status_code == 404
    assert c.post(f"/v1/decisions/{target['id']}/ack", json={}, headers=auth()).status_code == 422


def test_failures_become_training_labels(fleet: Fleet) -> None:
    c = fleet.client
    rec = {"gpu_uuid": fleet.uuids[1], "failed_at": "2026-03-01T10:00:00Z", "mode": "ecc", "kind": "rma", "xid": 48}
    assert c.post("/v1/failures", json=rec).status_code == 401
    r = c.post("/v1/failures", json=rec, headers=auth())
    assert r.status_code == 201, r.text
    assert r.json()["id"] > 0
    labels = fleet.svc.loops.store.labels.failures_frame()
    assert fleet.uuids[1] in set(labels["gpu_uuid"].astype(str))
    metrics = c.get("/metrics").text
    assert 'gpuhealth_failures_recorded_total{kind="rma",mode="ecc"} 1.0' in metrics
    bad = c.post("/v1/failures", json={**rec, "mode": "melted"}, headers=auth())
    assert bad.status_code == 422 and "mode" in bad.json()["detail"]
    unknown = c.post("/v1/failures", json={**rec, "gpu_uuid": "GPU-never-seen"}, headers=auth())
    assert unknown.status_code == 404
    elsewhere = c.post("/v1/failures", json={**rec, "gpu_uuid": "GPU-never-seen", "hostname": "n9"}, headers=auth())
    assert elsewhere.status_code == 201


def _am_payload(uuid: str, status: str = "firing") -> dict[str, object]:
    return {
        "version": "4",
        "groupKey": '{}:{Hostname="n1"}',
        "status": status,
        "receiver": "gpuhealth-drain",
        "groupLabels": {"Hostname": "n1"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://am:9093",
        "truncatedAlerts": 0,
        "alerts": [
            {
                "status": status,
                "labels": {
                    "alertname": "GPUFellOffBus",
                    "severity": "critical",
                    "action": "drain",
                    "UUID": uuid,
                    "Hostname": "n1",
                },
                "annotations": {"summary": "GPU fell off the bus"},
                "startsAt": "2026-11-29T10:00:00Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prom/graph",
                "fingerprint": "abc123",
            }
        ],
    }


def test_alertmanager_webhook_links_alerts_to_gpus(fleet: Fleet) -> None:
    c = fleet.client
    uuid = fleet.uuids[5]
    assert c.post("/v1/alertmanager", json=_am_payload(uuid)).status_code == 401
    r = c.post("/v1/alertmanager", json=_am_payload(uuid), headers=auth())
    assert r.status_code == 200, r.text
    assert r.json() == {"stored": 1, "skipped": 0, "errors": []}
    listed = c.get("/v1/alerts", params={"gpu_uuid": uuid}).json()["items"]
    assert listed and listed[0]["alertname"] == "GPUFellOffBus" and listed[0]["gpu_uuid"] == uuid
    assert listed[0]["action"] == "drain" and listed[0]["status"] == "firing"
    broken = c.post("/v1/alertmanager", json={"status": "firing"}, headers=auth())
    assert broken.status_code == 422 and "alerts" in broken.json()["detail"]
    not_json = c.post("/v1/alertmanager", content=b"{nope", headers={**auth(), "Content-Type": "application/json"})
    assert not_json.status_code == 422


def test_metrics_export_risk_decisions_and_collector_series(fleet: Fleet) -> None:
    text = fleet.client.get("/metrics").text
    for uuid in fleet.uuids:
        assert f'UUID="{uuid}"' in text
    risk_lines = [ln for ln in text.splitlines() if ln.startswith("gpuhealth_risk{")]
    assert len(risk_lines) == 4 * len(fleet.uuids)  # two days of history: every GPU has a risk per mode
    current = [ln for ln in text.splitlines() if ln.startswith("gpuhealth_decision{") and ln.endswith(" 1.0")]
    assert len(current) == len(fleet.uuids)  # exactly one current decision per GPU
    assert "DCGM_FI_DEV_GPU_TEMP{" in text  # the in-process collector's series
    assert "gpuhealth_store_up 1.0" in text


def test_health_and_openapi(fleet: Fleet) -> None:
    assert fleet.client.get("/readyz").json()["status"] == "ok"
    spec = fleet.client.get("/openapi.json").json()
    assert "/v1/gpus/{uuid}" in spec["paths"] and "/v1/alertmanager" in spec["paths"]
    assert fleet.client.get("/docs").status_code == 200


def test_oversized_request_is_413(fleet: Fleet) -> None:
    big = json.dumps({"by": "x" * 2_000_000})
    r = fleet.client.post("/v1/decisions/1/ack", content=big, headers={**auth(), "Content-Type": "application/json"})
    assert r.status_code == 413 and "too large" in r.json()["detail"]
    assert "the limit is 1048576 bytes" in r.json()["detail"]


def test_oversized_streamed_or_malformed_length_is_413(fleet: Fleet) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(30):
            yield b" " * 50_000

    headers = {**auth(), "Content-Type": "application/json"}
    r = fleet.client.post("/v1/decisions/1/ack", content=chunks(), headers=headers)
    assert r.status_code == 413 and "the limit is" in r.json()["detail"]
    r = fleet.client.post("/v1/decisions/1/ack", content=b"{}", headers={**headers, "Content-Length": "2x"})
    assert r.status_code == 413 and r.headers["content-type"] == "application/json"


def test_writes_refused_without_configured_token_and_closed_reads(fleet: Fleet) -> None:
    closed = TestClient(create_app(fleet.svc.loops.store, ApiConfig(token=None, read_open=False)))
    assert closed.get("/v1/gpus").status_code == 403
    no_writes = closed.post("/v1/failures", json={}, headers=auth())
    assert no_writes.status_code == 403 and "GPUHEALTH_TOKEN" in no_writes.json()["detail"]
    guarded = TestClient(create_app(fleet.svc.loops.store, ApiConfig(token=TOKEN, read_open=False)))
    assert guarded.get("/v1/gpus").status_code == 401
    assert guarded.get("/v1/gpus", headers=auth()).status_code == 200
    assert guarded.get("/healthz").status_code == 200  # probes stay open


def test_scoring_again_keeps_one_decision_per_gpu(fleet: Fleet) -> None:
    before = fleet.client.get("/v1/decisions", params={"limit": 1000}).json()["total"]
    fleet.svc.loops.scorer.run_once()
    after = fleet.client.get("/v1/decisions", params={"limit": 1000}).json()
    assert after["total"] == before
    assert len({d["gpu_uuid"] for d in after["items"]}) == after["total"]


@pytest.mark.parametrize("since", ["2026-01-01T00:00:00", "2026-01-01T00:00:00+02:00"])
def test_naive_and_offset_times_are_accepted(fleet: Fleet, since: str) -> None:
    r = fleet.client.get(f"/v1/gpus/{fleet.uuids[0]}/risk", params={"since": since})
    assert r.status_code == 200
    assert datetime.fromisoformat(r.json()["points"][0]["scored_at"]) > datetime(2026, 1, 1, tzinfo=UTC)


def test_probe_results_of_a_gpu(fleet: Fleet) -> None:
    uuid = fleet.uuids[2]
    ran = datetime(2026, 3, 1, tzinfo=UTC)
    fleet.svc.loops.store.probes.add([
        {"gpu_uuid": uuid, "ran_at": ran, "test": "gemm", "status": "pass", "value": 410.0, "unit": "TFLOP/s",
         "expected": 400.0, "ratio": 1.025, "duration_s": 2.5, "details": {"errors": 0}},
    ])  # fmt: skip
    r = fleet.client.get(f"/v1/gpus/{uuid}/probes")
    assert r.status_code == 200, r.text
    assert r.json()[0]["test"] == "gemm" and r.json()[0]["value"] == 410.0
    assert fleet.client.get("/v1/gpus/GPU-nope/probes").status_code == 404


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-05:00", "1900-01-01T00:00:00Z"])
def test_times_no_gpu_ever_saw_are_422_not_a_crash(fleet: Fleet, when: str) -> None:
    # Found by schemathesis: PostgreSQL refused a year-0 time the API had let through (a 500).
    rec = {"gpu_uuid": fleet.uuids[0], "failed_at": when, "mode": "ecc"}
    r = fleet.client.post("/v1/failures", json=rec, headers=auth())
    assert r.status_code == 422 and "failed_at" in r.json()["detail"], r.text
    assert fleet.client.get(f"/v1/gpus/{fleet.uuids[0]}/risk", params={"since": when}).status_code == 422


def test_the_remedy_is_beside_each_gpus_and_decisions_decision(fleet: Fleet) -> None:
    """/v1/gpus, /v1/gpus/{uuid} and /v1/decisions carry the latest round's remedy and when it is due;
    a decision's is its GPU's."""
    c = fleet.client
    gpus = c.get("/v1/gpus", params={"limit": 100}).json()["items"]
    assert gpus and all(g["remedy"] in REMEDIES and g["remedy_when"] in REMEDY_WHEN for g in gpus)
    by_uuid = {g["uuid"]: (g["remedy"], g["remedy_when"]) for g in gpus}
    detail = c.get(f"/v1/gpus/{gpus[0]['uuid']}").json()
    assert (detail["remedy"], detail["remedy_when"]) == by_uuid[gpus[0]["uuid"]]
    decisions = c.get("/v1/decisions", params={"limit": 100}).json()["items"]
    assert decisions
    for d in decisions:
        assert (d["remedy"], d["remedy_when"]) == by_uuid[d["gpu_uuid"]]
    # The fleet's faults (a pending remap among them) ask for a remedy, and its reason line says which.
    remedied = [g for g in gpus if g["remedy"] != "none"]
    assert remedied
    assert all(
        any(r.startswith(f"remedy: {g['remedy']} ") for r in g["reasons"]) for g in remedied if g["decision"] != "ok"
    )
