"""core.service_client against real HTTP servers: a scripted stdlib one, and the service's own app.

No httpx doubles: every answer crosses a loopback socket.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from api.app import create_app
from api.config import ApiConfig
from core.service_client import (
    GpuView,
    NodeView,
    ServiceError,
    ServiceUnavailable,
    UnknownNode,
    node_gpus,
)
from predictor.policy import decision_changes
from store import Store
from tests.api.live import live_server
from tests.core.http_stub import NESTED, Answer, StubService, closed_port
from tests.store.test_scores import score

TOKEN = "node-token-0123456789"
T0 = datetime(2026, 3, 2, 12, tzinfo=UTC)


# -- a scripted service ------------------------------------------------------------------------


@pytest.fixture
def stub() -> Iterator[StubService]:
    with StubService() as s:
        yield s


def node_body(hostname: str = "node-a", gpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A NodeDetail as the API writes it."""
    return {
        "hostname": hostname,
        "first_seen": "2026-03-01T00:00:00Z",
        "last_seen": "2026-03-02T12:00:00Z",
        "counts": {},
        "gpus": gpus if gpus is not None else [],
    }


def gpu_body(index: int, decision: str | None, risk: float | None, **kw: Any) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{index}",
        "hostname": "node-a",
        "gpu_index": index,
        "model_name": "NVIDIA H100 80GB HBM3",
        "state": "active",
        "decision": decision,
        "risk": risk,
        "risk_ecc": risk,
        "reasons": [f"{decision} because"] if decision else [],
        "scored_at": "2026-03-02T11:55:00Z" if decision else None,
        **kw,
    }


# -- answers -------------------------------------------------------------------------------------


def test_a_node_and_its_gpus(stub: StubService) -> None:
    stub.answer = Answer(body=node_body(gpus=[gpu_body(0, "ok", 0.05), gpu_body(1, "demote", 0.71),
                                             gpu_body(2, None, None)]))  # fmt: skip
    view = node_gpus(stub.url, "node-a")
    assert isinstance(view, NodeView)
    assert view.hostname == "node-a"
    assert view.last_seen == datetime(2026, 3, 2, 12, tzinfo=UTC)
    assert view.gpus[1] == GpuView(
        uuid="GPU-1", gpu_index=1, decision="demote", risk=0.71, reasons=("demote because",),
        model_name="NVIDIA H100 80GB HBM3", state="active", scored_at=datetime(2026, 3, 2, 11, 55, tzinfo=UTC),
    )  # fmt: skip
    assert (view.gpus[2].decision, view.gpus[2].risk, view.gpus[2].scored_at) == (None, None, None)
    assert view.decision == "demote"
    assert stub.seen[0].path == "/v1/nodes/node-a"
    assert "authorization" not in stub.seen[0].headers


def test_token_is_sent_and_hostname_is_quoted(stub: StubService) -> None:
    node_gpus(stub.url + "/", "rack 1/node?a", token=TOKEN)
    assert stub.seen[0].path == "/v1/nodes/rack%201%2Fnode%3Fa"
    assert stub.seen[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_unscored_node_is_ok(stub: StubService) -> None:
    stub.answer = Answer(body=node_body(gpus=[gpu_body(0, None, None), gpu_body(1, None, None)]))
    assert node_gpus(stub.url, "node-a").decision == "ok"
    stub.answer = Answer(body=node_body(gpus=[]))
    assert node_gpus(stub.url, "node-a").decision == "ok"


def test_unknown_node_is_its_own_error(stub: StubService) -> None:
    stub.answer = Answer(404, {"detail": "node node-x not found"})
    with pytest.raises(UnknownNode) as e:
        node_gpus(stub.url, "node-x")
    assert (e.value.status, e.value.hostname, e.value.detail) == (404, "node-x", "node node-x not found")
    assert e.value.url == f"{stub.url}/v1/nodes/node-x"
    assert "does not know node 'node-x'" in str(e.value)


def test_a_404_that_is_not_about_the_node_is_a_wrong_url(stub: StubService) -> None:
    stub.answer = Answer(404, {"detail": "Not Found"})  # FastAPI's answer for a path it has no route for
    with pytest.raises(ServiceError) as e:
        node_gpus(stub.url + "/prefix", "node-a")
    assert not isinstance(e.value, UnknownNode | ServiceUnavailable)
    assert "is this the gpuhealth service's base URL?" in str(e.value)


def test_service_busy_is_unavailable_with_retry_after(stub: StubService) -> None:
    stub.answer = Answer(503, {"detail": "database unavailable: connection refused"}, {"Retry-After": "5"})
    with pytest.raises(ServiceUnavailable) as e:
        node_gpus(stub.url, "node-a")
    assert (e.value.status, e.value.retry_after) == (503, 5.0)
    assert e.value.detail == "database unavailable: connection refused"
    assert "HTTP 503 (database unavailable: connection refused)" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("token", "hint"), [(None, "a token is needed"), ("wrong", "the token was refused")])
def test_refused_token_is_an_error_not_an_outage(stub: StubService, token: str | None, hint: str) -> None:
    stub.answer = Answer(401, {"detail": "token missing"})
    with pytest.raises(ServiceError) as e:
        node_gpus(stub.url, "node-a", token=token)
    assert not isinstance(e.value, ServiceUnavailable)
    assert e.value.status == 401 and hint in str(e.value)


def test_redirect_is_not_followed(stub: StubService) -> None:
    stub.answer = Answer(302, {}, {"Location": "https://gpuhealth.example/v1/nodes/node-a"})
    with pytest.raises(ServiceError, match=r"redirects .* https://gpuhealth\.example/v1/nodes/node-a"):
        node_gpus(stub.url, "node-a")
    assert len(stub.seen) == 1


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"<html>proxy login</html>", "not JSON"),
        ({"items": []}, "no 'gpus' list"),
        (node_body(gpus=[{"gpu_index": 0}]), "gpus[0] has no 'uuid'"),
        (node_body(gpus=[gpu_body(0, "explode", 0.5)]), "gpus[0].decision 'explode'"),
        (node_body(gpus=[gpu_body(0, "ok", "high")]), "gpus[0].risk 'high' is not a number"),
        (node_body(gpus=[gpu_body(0, "ok", 0.1, gpu_index="0")]), "gpu_index '0' is not an integer"),
        (node_body(gpus=[gpu_body(0, "ok", 0.1, scored_at="yesterday")]), "not an ISO 8601 time"),
    ],
)
def test_answers_that_are_not_a_node(stub: StubService, body: Any, needle: str) -> None:
    stub.answer = Answer(200, body)
    with pytest.raises(ServiceError) as e:
        node_gpus(stub.url, "node-a")
    assert not isinstance(e.value, ServiceUnavailable)
    assert needle in str(e.value) and stub.url in str(e.value)


def raw_node(risk: str = "0.5", index: str = "0") -> bytes:
    """A node answer with the risk and index written as given (JSON that json.dumps would not write)."""
    gpu = f'{{"uuid": "GPU-0", "gpu_index": {index}, "decision": "drain", "risk": {risk}, "reasons": []}}'
    return f'{{"hostname": "node-a", "gpus": [{gpu}]}}'.encode()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (raw_node(risk="9" * 400), "gpus[0].risk 999"),  # OverflowError converting it to a float
        (raw_node(risk="1e308"), "gpus[0].risk 1e+308 is not a number in 0..1"),
        (raw_node(risk="-0.5"), "gpus[0].risk -0.5 is not a number in 0..1"),
        (raw_node(risk="1.5"), "gpus[0].risk 1.5 is not a number in 0..1"),
        (raw_node(risk="NaN"), "gpus[0].risk nan is not a number in 0..1"),
        (raw_node(risk="Infinity"), "gpus[0].risk inf is not a number in 0..1"),
        (raw_node(index="9" * 400), "gpus[0].gpu_index 999"),
        (raw_node(index=str(2**40)), "gpus[0].gpu_index 1099511627776 is out of range"),
        (raw_node(risk="9" * 5000), "not JSON"),  # ValueError: over Python's 4300 digits
        (NESTED, "not JSON"),  # RecursionError
        (b'{"hostname": "node-a", "gpus": ' + NESTED + b"}", "not JSON"),
        (b"\xff\xfe{}", "not JSON"),
    ],
    ids=["risk-400-digits", "risk-1e308", "risk-negative", "risk-over-1", "risk-nan", "risk-inf", "index-400-digits",
         "index-2**40", "risk-5000-digits", "nested", "nested-gpus", "not-utf8"],
)  # fmt: skip
def test_hostile_answers_are_errors_not_crashes(stub: StubService, body: bytes, needle: str) -> None:
    stub.answer = Answer(200, body)
    with pytest.raises(ServiceError) as e:
        node_gpus(stub.url, "node-a")
    assert not isinstance(e.value, ServiceUnavailable) and e.value.status == 200
    assert needle in str(e.value) and "\n" not in str(e.value) and len(str(e.value)) < 300


def test_a_nested_error_answer_is_still_the_outage_it_says(stub: StubService) -> None:
    stub.answer = Answer(503, NESTED)
    with pytest.raises(ServiceUnavailable) as e:
        node_gpus(stub.url, "node-a")
    assert e.value.status == 503 and e.value.detail is None


def test_the_edges_of_a_risk_and_an_index_are_answers(stub: StubService) -> None:
    stub.answer = Answer(200, raw_node(risk="1", index="-1"))
    (g,) = node_gpus(stub.url, "node-a").gpus
    assert (g.risk, g.gpu_index) == (1.0, -1)
    stub.answer = Answer(200, raw_node(risk="0", index=str(2**31 - 1)))
    (g,) = node_gpus(stub.url, "node-a").gpus
    assert (g.risk, g.gpu_index) == (0.0, 2**31 - 1)


# -- no answer -----------------------------------------------------------------------------------


def test_connection_refused_is_unavailable() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ServiceUnavailable) as e:
        node_gpus(url, "node-a", timeout=2.0)
    assert e.value.status is None and "cannot connect" in str(e.value) and url in str(e.value)


def test_slow_service_is_unavailable_after_the_timeout(stub: StubService) -> None:
    stub.answer = Answer(body=node_body(), delay_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=r"no answer within 0.2s"):
        node_gpus(stub.url, "node-a", timeout=0.2)
    assert time.monotonic() - t0 < 0.9


SMALL = {"hostname": "node-a", "gpus": []}


@pytest.mark.parametrize("drip_head", [False, True], ids=["body", "head"])
def test_a_dripping_answer_ends_at_one_deadline(stub: StubService, drip_head: bool) -> None:
    """One byte every 0.5 s never trips a per-read timeout of 2 s; the deadline is for the whole request."""
    stub.answer = Answer(body=SMALL, drip_s=0.5, drip_head=drip_head)
    t0 = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=r"no answer within 2s"):
        node_gpus(stub.url, "node-a", timeout=2.0)
    assert time.monotonic() - t0 < 3.0


MiB = 1 << 20


def test_an_answer_announcing_more_than_the_cap_is_not_read(stub: StubService) -> None:
    stub.answer = Answer(body=SMALL, pad=20 * MiB)
    t0 = time.monotonic()
    with pytest.raises(ServiceError, match=r"answer of 20971\d\d\d bytes is over the 1048576 bytes") as e:
        node_gpus(stub.url, "node-a")
    assert not isinstance(e.value, ServiceUnavailable) and e.value.status == 200
    assert time.monotonic() - t0 < 2.0 and stub.sent_pad < 20 * MiB


def test_an_answer_without_a_length_is_cut_at_the_cap(stub: StubService) -> None:
    stub.answer = Answer(body=SMALL, pad=20 * MiB, length=False)
    with pytest.raises(ServiceError, match=r"answer is over the 1048576 bytes") as e:
        node_gpus(stub.url, "node-a")
    assert not isinstance(e.value, ServiceUnavailable)
    assert stub.sent_pad < 20 * MiB


def test_the_cap_is_a_parameter(stub: StubService) -> None:
    stub.answer = Answer(body=SMALL, pad=100, length=False)
    with pytest.raises(ServiceError, match=r"over the 64 bytes"):
        node_gpus(stub.url, "node-a", max_bytes=64)
    assert node_gpus(stub.url, "node-a", max_bytes=200).hostname == "node-a"


@pytest.mark.parametrize("url", ["ftp://gpuhealth:8080", "gpuhealth:8080"])
def test_not_an_http_url(url: str) -> None:
    with pytest.raises(ServiceError) as e:
        node_gpus(url, "node-a")
    assert not isinstance(e.value, ServiceUnavailable)


# -- the real service ----------------------------------------------------------------------------


def fill_store(store: Store) -> None:
    """node-a: GPU 0 ok, GPU 1 demoted, GPU 2 drained, GPU 3 never scored; node-b: one GPU watched."""
    store.gpus.upsert([
        {"uuid": f"GPU-a{i}", "hostname": "node-a", "gpu_index": i, "model_name": "NVIDIA H100 80GB HBM3",
         "seen_at": T0} for i in range(4)
    ] + [{"uuid": "GPU-b0", "hostname": "node-b", "gpu_index": 0, "seen_at": T0}])  # fmt: skip
    store.decisions.write_scores(
        [score("GPU-a0", "ok", 0.05, host="node-a"), score("GPU-a1", "demote", 0.74, host="node-a"),
         score("GPU-a2", "drain", 0.31, host="node-a"), score("GPU-b0", "watch", 0.4, host="node-b")],
        T0, rule=decision_changes,
    )  # fmt: skip


@contextmanager
def real_service(tmp_path: Path, **config: Any) -> Iterator[str]:
    """`gpuhealth serve`'s API over a SQLite store with two nodes, on a loopback port; yields its URL."""
    store = Store.open(f"sqlite:///{tmp_path / 'svc.db'}")
    try:
        fill_store(store)
        with live_server(create_app(store, ApiConfig(**config))) as url:
            yield url
    finally:
        store.close()


def test_against_the_service_itself(tmp_path: Path) -> None:
    with real_service(tmp_path, token=TOKEN) as url:
        view = node_gpus(url, "node-a")
        with pytest.raises(UnknownNode):
            node_gpus(url, "node-zz")
        with pytest.raises(ServiceError) as wrong:
            node_gpus(url + "/api", "node-a")
    by_index = {g.gpu_index: g for g in view.gpus}
    assert sorted(by_index) == [0, 1, 2, 3]
    assert {i: (g.decision, g.risk) for i, g in by_index.items()} == {
        0: ("ok", 0.05), 1: ("demote", 0.74), 2: ("drain", 0.31), 3: (None, None)}  # fmt: skip
    assert by_index[1].reasons == ("demote because",) and by_index[1].uuid == "GPU-a1"
    assert view.decision == "drain"
    top = view.worst_gpu()
    assert top is not None and (top.gpu_index, top.decision) == (2, "drain")
    assert not isinstance(wrong.value, UnknownNode) and wrong.value.status == 404


def test_service_with_closed_reads_needs_the_token(tmp_path: Path) -> None:
    with real_service(tmp_path, token=TOKEN, read_open=False) as url:
        with pytest.raises(ServiceError) as e:
            node_gpus(url, "node-b")
        assert e.value.status == 401 and "a token is needed" in str(e.value)
        assert node_gpus(url, "node-b", token=TOKEN).decision == "watch"
