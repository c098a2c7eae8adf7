"""core.service_client.HttpRemedies against a real HTTP server on a loopback socket: tasks in, reports out."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from core.remedies import ProbeResult, RemedyReport, RemedyTask
from core.service_client import HttpRemedies, ServiceError, ServiceUnavailable
from tests.core.http_stub import NESTED, Answer, StubService, closed_port

TOKEN = "write-token-0123456789"
DEADLINE = datetime(2026, 3, 2, 14, tzinfo=UTC)


@pytest.fixture
def stub() -> Iterator[StubService]:
    with StubService() as s:
        s.answer = Answer(body={"hostname": "node-a", "tasks": []})
        yield s


def task(rid: int = 7, do: str = "reset", host: str = "node-a", **kw: Any) -> dict[str, Any]:
    """A task as the service writes it (RemedyTask.to_dict)."""
    return {
        **RemedyTask(rid, host, f"GPU-{rid}", 3, "reset", "pending row remap", DEADLINE).to_dict(),
        "do": do,
        **kw,
    }


def answer(*tasks: dict[str, Any], host: str = "node-a") -> Answer:
    return Answer(body={"hostname": host, "tasks": list(tasks)})


# -- tasks ---------------------------------------------------------------------------------------


def test_tasks_of_a_node_with_the_token_and_the_hostname_quoted(stub: StubService) -> None:
    stub.answer = answer(task(7), task(8, "verify", deadline=None, gpu_index=None), host="rack 1/node")
    for t in stub.answer.body["tasks"]:
        t["hostname"] = "rack 1/node"
    got = HttpRemedies(stub.url + "/", token=TOKEN).tasks("rack 1/node")
    assert got == [
        RemedyTask(7, "rack 1/node", "GPU-7", 3, "reset", "pending row remap", DEADLINE),
        RemedyTask(8, "rack 1/node", "GPU-8", None, "verify", "pending row remap", None),
    ]
    (req,) = stub.seen
    assert (req.method, req.path) == ("GET", "/v1/nodes/rack%201%2Fnode/remedies")
    assert req.headers["authorization"] == f"Bearer {TOKEN}"
    assert req.headers["accept-encoding"] == "identity"


def test_an_unknown_task_or_another_nodes_is_left_out_counted_and_the_rest_kept(
    stub: StubService, caplog: pytest.LogCaptureFixture
) -> None:
    stub.answer = answer(task(1), task(2, "reflash"), task(3, host="node-b"), task(4, "verify"))
    client = HttpRemedies(stub.url)
    assert [t.remediation_id for t in client.tasks("node-a")] == [1, 4]
    assert client.unreadable == 2
    assert "remediation 2: task left out: unknown task 'reflash' on GPU GPU-2" in caplog.text
    assert "remediation 3: task left out: addressed to 'node-b', not 'node-a'" in caplog.text
    caplog.clear()
    client.tasks("node-a")  # counted at every ask, logged once
    assert client.unreadable == 4 and "left out" not in caplog.text


def test_a_deadline_without_an_offset_is_utc(stub: StubService) -> None:
    stub.answer = answer(task(1, deadline="2026-03-02T14:00:00"))
    assert HttpRemedies(stub.url).tasks("node-a")[0].deadline == DEADLINE


def raw_tasks(rid: str = "7", extra: str = "") -> bytes:
    """A remedies answer with the id written as given (JSON that json.dumps would not write)."""
    t = f'{{"remediation_id": {rid}, "hostname": "node-a", "gpu_uuid": "GPU-7", "do": "reset", "why": ""{extra}}}'
    return f'{{"hostname": "node-a", "tasks": [{t}]}}'.encode()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"hostname": "node-a"}, "no 'tasks' list"),
        ({"hostname": "node-b", "tasks": []}, "'hostname' 'node-b' is not the node asked for"),
        ({"hostname": "node-a", "tasks": ["reset"]}, "tasks[0] is not an object"),
        (raw_tasks("NaN"), "tasks[0].remediation_id nan is not a positive 64-bit integer"),
        (raw_tasks("9" * 400), "tasks[0].remediation_id 999"),
        (raw_tasks(str(2**63)), "is not a positive 64-bit integer"),
        (raw_tasks("0"), "tasks[0].remediation_id 0 is not a positive"),
        (raw_tasks('"7"'), "tasks[0].remediation_id '7'"),
        (raw_tasks("true"), "tasks[0].remediation_id True"),
        (raw_tasks("7", ', "gpu_index": 1e999'), "tasks[0].gpu_index inf is not an integer"),
        (raw_tasks("7", ', "gpu_index": ' + "9" * 400), "tasks[0].gpu_index 999"),
        (raw_tasks("7", ', "why": ["x"]'), "tasks[0].why ['x'] is not a string"),
        (raw_tasks("7", ', "deadline": "soon"'), "tasks[0].deadline 'soon' is not an ISO 8601 time"),
        (raw_tasks("9" * 5000), "not JSON"),
        (NESTED, "not JSON"),
        (b'{"hostname": "node-a", "tasks": ' + NESTED + b"}", "not JSON"),
        (b"<html>proxy login</html>", "not JSON"),
    ],
    ids=["no-tasks", "other-host", "task-string", "id-nan", "id-400-digits", "id-2**63", "id-0", "id-string",
         "id-bool", "index-inf", "index-400-digits", "why-list", "deadline-word", "id-5000-digits", "nested",
         "nested-tasks", "html"],
)  # fmt: skip
def test_hostile_answers_are_service_errors_not_crashes(stub: StubService, body: Any, needle: str) -> None:
    stub.answer = Answer(200, body)
    with pytest.raises(ServiceError) as e:
        HttpRemedies(stub.url).tasks("node-a")
    assert not isinstance(e.value, ServiceUnavailable) and e.value.status == 200
    assert needle in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 300


def test_a_remedies_answer_over_the_cap_is_not_read(stub: StubService) -> None:
    stub.answer = answer(*[task(i) for i in range(1, 200)])
    with pytest.raises(ServiceError, match=r"over the 4096 bytes allowed"):
        HttpRemedies(stub.url, max_bytes=4096).tasks("node-a")


def test_an_older_service_without_the_route_is_a_wrong_url_error(stub: StubService) -> None:
    stub.answer = Answer(404, {"detail": "Not Found"})
    with pytest.raises(ServiceError, match=r"GET /v1/nodes/…/remedies answered HTTP 404 \(Not Found\)") as e:
        HttpRemedies(stub.url).tasks("node-a")
    assert not isinstance(e.value, ServiceUnavailable)


# -- reports -------------------------------------------------------------------------------------

REPORT = RemedyReport(
    "verify", "failed", "memtest found 3 bit errors", "GPU-7", 41.5,
    (ProbeResult("gemm", True, "612 TFLOP/s"), ProbeResult("memtest", False, "3 bit errors")),
)  # fmt: skip


def test_a_report_is_posted_as_json_with_the_token(stub: StubService) -> None:
    stub.answer = Answer(200, {"remediation": {"id": 7, "stage": "verified"}})
    assert HttpRemedies(stub.url, token=TOKEN).report(7, REPORT) is True
    (req,) = stub.seen
    assert (req.method, req.path) == ("POST", "/v1/remediations/7/report")
    assert req.headers["authorization"] == f"Bearer {TOKEN}"
    assert req.headers["content-type"] == "application/json"
    assert json.loads(req.body) == REPORT.to_dict()


def test_a_report_for_a_task_no_longer_open_is_dropped(stub: StubService) -> None:
    stub.answer = Answer(409, {"detail": "remediation 7 is at stage returned, not reset"})
    assert HttpRemedies(stub.url, token=TOKEN).report(7, REPORT) is False


@pytest.mark.parametrize(
    ("status", "detail", "needle", "unavailable"),
    [
        (404, "remediation 7 not found", "does not know remediation 7 (remediation 7 not found)", False),
        (422, "probes: field required", "refused the report as invalid (probes: field required)", False),
        (401, "missing Authorization", "HTTP 401 (missing Authorization); a token is needed", False),
        (403, "writes are disabled", "HTTP 403 (writes are disabled); a token is needed", False),
        (503, "database unavailable", "cannot answer now: HTTP 503 (database unavailable)", True),
    ],
)
def test_a_refused_report_is_a_service_error_saying_why(
    stub: StubService, status: int, detail: str, needle: str, unavailable: bool
) -> None:
    stub.answer = Answer(status, {"detail": detail})
    with pytest.raises(ServiceError) as e:
        HttpRemedies(stub.url).report(7, REPORT)
    assert isinstance(e.value, ServiceUnavailable) == unavailable
    assert e.value.status == status and needle in str(e.value)


# -- no answer -----------------------------------------------------------------------------------


def test_no_service_is_unavailable_for_tasks_and_reports() -> None:
    client = HttpRemedies(f"http://127.0.0.1:{closed_port()}", timeout_s=2.0)
    with pytest.raises(ServiceUnavailable, match="cannot connect"):
        client.tasks("node-a")
    with pytest.raises(ServiceUnavailable, match="cannot connect"):
        client.report(7, REPORT)


@pytest.mark.parametrize("ask", ["tasks", "report"])
def test_a_dripping_answer_ends_at_one_deadline(stub: StubService, ask: str) -> None:
    stub.answer = Answer(body={"hostname": "node-a", "tasks": []}, drip_s=0.3)
    client = HttpRemedies(stub.url, timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=r"no answer within 1s"):
        client.tasks("node-a") if ask == "tasks" else client.report(7, REPORT)
    assert time.monotonic() - t0 < 2.0


def test_a_report_with_a_duration_json_cannot_say_goes_without_it(stub: StubService) -> None:
    stub.answer = Answer(200, {"remediation": {"id": 7}})
    nan = RemedyReport("reset", "done", "reset", "GPU-7", float("nan"))
    assert HttpRemedies(stub.url).report(7, nan) is True
    assert json.loads(stub.seen[0].body)["duration_s"] is None
