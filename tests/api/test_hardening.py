"""Defects found by attacking the service (issue 12): each test failed before its fix."""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import ApiConfig, create_app
from core.settings import Settings
from store import Store
from tests.api.conftest import TOKEN, Fleet, auth
from tests.api.live import live_server
from tests.api.test_app import _am_payload


def _alert(p: dict[str, Any]) -> dict[str, Any]:
    alerts = p["alerts"]
    assert isinstance(alerts, list)
    return dict(alerts[0])


# -- 2 and 3: the Alertmanager webhook never answers 500, nor refuses a batch for one alert ---------


@pytest.mark.parametrize(
    ("starts", "ends"),
    [
        ("0001-01-01T00:00:00+05:00", None),
        ("9999-12-31T23:59:59-05:00", None),
        ("2026-11-29T10:00:00Z", "9999-12-31T23:59:59-05:00"),
    ],
)
def test_webhook_times_out_of_range_skip_that_alert_not_500(fleet: Fleet, starts: str, ends: str | None) -> None:
    p = _am_payload(fleet.uuids[2])
    bad = {**_alert(p), "startsAt": starts, "fingerprint": "outofrange"}
    if ends is not None:
        bad["endsAt"] = ends
    good = {**_alert(p), "fingerprint": "inrange-" + starts[:4]}
    p["alerts"] = [bad, good]
    r = fleet.client.post("/v1/alertmanager", json=p, headers=auth())
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stored"] == 1 and body["skipped"] == 1
    why = body["errors"][0]
    assert why.startswith("alert 0: ") and ("out of range" in why or "time must be between" in why), why


def test_alertmanager_zero_end_time_with_an_offset_means_not_ended(fleet: Fleet) -> None:
    p = _am_payload(fleet.uuids[3])
    p["alerts"] = [{**_alert(p), "endsAt": "0001-01-01T00:00:00+05:00", "fingerprint": "zero-end"}]
    r = fleet.client.post("/v1/alertmanager", json=p, headers=auth())
    assert r.status_code == 200 and r.json()["stored"] == 1, r.text


def test_long_labels_and_nul_bytes_are_stored_alike_on_both_databases(fleet: Fleet) -> None:
    uuid = fleet.uuids[4]
    p = _am_payload(uuid)
    labels = {
        **_alert(p)["labels"],
        "alertname": "A" * 300,
        "severity": "crit\x00ical",
        "Hostname": "n" * 400,
        "note": "nul\x00inside",
    }
    p["alerts"] = [
        {**_alert(p), "labels": labels, "fingerprint": "f" * 100, "annotations": {"summary": "x\x00y"}},
        {**_alert(p), "fingerprint": "plain-neighbour"},
    ]
    p["receiver"] = "r\x00" * 200
    r = fleet.client.post("/v1/alertmanager", json=p, headers=auth())
    assert r.status_code == 200, r.text
    assert r.json()["stored"] == 2
    items = fleet.client.get("/v1/alerts", params={"gpu_uuid": uuid, "limit": 10}).json()["items"]
    long = next(a for a in items if a["alertname"].startswith("AAA"))
    assert long["alertname"] == "A" * 255  # cut to its column, on SQLite as on PostgreSQL
    assert long["hostname"] == "n" * 255 and long["severity"] == "critical"
    assert long["labels"]["alertname"] == "A" * 300  # whole in the labels
    assert long["labels"]["note"] == "nulinside" and long["annotations"]["summary"] == "xy"
    assert any(a["labels"].get("alertname") == "GPUFellOffBus" for a in items)


def test_a_malformed_alert_is_skipped_and_the_batch_stored(fleet: Fleet) -> None:
    p = _am_payload(fleet.uuids[6])
    p["alerts"] = [
        {**_alert(p), "status": "burning", "fingerprint": "bad-status"},
        {**_alert(p), "labels": ["not", "a", "map"], "fingerprint": "bad-labels"},
        {**_alert(p), "fingerprint": "good-one"},
    ]
    r = fleet.client.post("/v1/alertmanager", json=p, headers=auth())
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["stored"], body["skipped"]) == (1, 2)
    assert body["errors"][0].startswith("alert 0: status") and body["errors"][1].startswith("alert 1: labels")


def test_another_payload_version_is_refused_whole(fleet: Fleet) -> None:
    p = {**_am_payload(fleet.uuids[6]), "version": "3"}
    r = fleet.client.post("/v1/alertmanager", json=p, headers=auth())
    assert r.status_code == 422 and r.json()["detail"] == "unsupported Alertmanager payload version '3'; expected 4"


# -- 7: closed means closed; no connection details in any answer -------------------------------------


def _closed_client(fleet: Fleet, **cfg: Any) -> TestClient:
    return TestClient(create_app(fleet.svc.loops.store, ApiConfig(token=TOKEN, read_open=False, **cfg)))


@pytest.mark.parametrize("path", ["/metrics", "/docs", "/openapi.json", "/v1/gpus"])
def test_closed_reads_close_metrics_docs_and_schema(fleet: Fleet, path: str) -> None:
    c = _closed_client(fleet)
    assert c.get(path).status_code == 401
    assert c.get(path, headers=auth("wrong")).status_code == 403
    assert c.get(path, headers=auth()).status_code == 200
    assert c.get("/redoc").status_code == 404


def test_metrics_can_stay_open_for_prometheus_while_reads_are_closed(fleet: Fleet) -> None:
    c = _closed_client(fleet, metrics_open=True)
    assert c.get("/metrics").status_code == 200
    assert c.get("/v1/gpus").status_code == 401
    shut = TestClient(create_app(fleet.svc.loops.store, ApiConfig(token=TOKEN, metrics_open=False)))
    assert shut.get("/metrics").status_code == 401 and shut.get("/v1/gpus").status_code == 200


def test_health_is_open_even_when_reads_are_closed(fleet: Fleet) -> None:
    c = _closed_client(fleet)
    assert c.get("/healthz").status_code == 200 and c.get("/readyz").status_code == 200


def test_a_database_that_is_down_is_not_described_to_clients() -> None:
    store = Store("postgresql+psycopg://secretuser:pw@127.0.0.1:1/secretdb")
    c = TestClient(create_app(store, ApiConfig(token=TOKEN)))
    for r in (c.get("/readyz"), c.get("/v1/gpus"), c.post("/v1/decisions/1/ack", json={"by": "me"}, headers=auth())):
        assert r.status_code == 503, r.text
        assert r.json()["detail"] == "database unavailable: connection refused"
        for secret in ("127.0.0.1", ":1", "secretuser", "secretdb", "postgresql"):
            assert secret not in r.text
    store.close()


# -- 8: an empty token is no token -----------------------------------------------------------------


@pytest.mark.parametrize("token", ["", "   "])
def test_an_empty_token_disables_writes_instead_of_refusing_every_token(fleet: Fleet, token: str) -> None:
    assert Settings(token=token).token is None
    c = TestClient(create_app(fleet.svc.loops.store, ApiConfig(token=token)))
    r = c.post("/v1/decisions/1/ack", json={"by": "me"}, headers=auth(token or "x"))
    assert r.status_code == 403 and "writes are disabled" in r.json()["detail"]


def test_serve_says_writes_are_disabled_for_an_empty_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from gpuhealth.cli import app
    from gpuhealth.cli import serve as cli_serve

    monkeypatch.setenv("GPUHEALTH_TOKEN", "")
    ran: list[Any] = []
    monkeypatch.setattr(cli_serve, "_run", lambda *a, **k: ran.append(a))
    res = CliRunner().invoke(
        app, ["serve", "--backend", "sim", "--db", f"sqlite:///{tmp_path / 's.db'}", "--listen", "127.0.0.1:0"]
    )
    assert res.exit_code == 0, res.output
    assert "writes are disabled" in res.output and len(ran) == 1
    assert ran[0][0].app is not None


# -- 4: a locked SQLite database does not freeze the server ------------------------------------------


@pytest.fixture
def locked_sqlite(tmp_path: Path) -> Iterator[tuple[Store, sqlite3.Connection]]:
    path = tmp_path / "locked.db"
    store = Store.open(f"sqlite:///{path}")
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")  # another process holding the write lock
    yield store, locker
    locker.execute("ROLLBACK")
    locker.close()
    store.close()


def test_a_locked_database_leaves_health_prompt_and_readiness_truthful(
    locked_sqlite: tuple[Store, sqlite3.Connection],
) -> None:
    """40 writers wait on a locked file: /healthz took 18 s and /readyz said 200; writes took 20-30 s to 503."""
    store, _ = locked_sqlite
    with live_server(create_app(store, ApiConfig(token=TOKEN))) as url:

        def write(i: int) -> tuple[int, float]:
            t = time.monotonic()
            r = httpx.post(
                f"{url}/v1/failures", headers=auth(), timeout=60,
                json={"gpu_uuid": f"GPU-{i}", "hostname": "n1", "failed_at": "2026-01-01T00:00:00Z", "mode": "ecc"},
            )  # fmt: skip
            return r.status_code, time.monotonic() - t

        with ThreadPoolExecutor(40) as pool:
            writes = [pool.submit(write, i) for i in range(40)]
            time.sleep(1.0)  # every writer is in: queued, or waiting on the lock
            t = time.monotonic()
            health = httpx.get(f"{url}/healthz", timeout=60)
            health_s = time.monotonic() - t
            ready = httpx.get(f"{url}/readyz", timeout=60)
            gpus = httpx.get(f"{url}/v1/gpus/GPU-none", timeout=60)
            done = [w.result() for w in writes]
    assert health.status_code == 200 and health_s < 2.0  # answered from the event loop
    assert ready.status_code == 503 and ready.json()["detail"] == "database unavailable: database is locked"
    assert gpus.status_code == 404  # reads go on (WAL)
    assert {code for code, _ in done} == {503}
    # every write is told within the store's 5 s busy wait plus the 2 s queue wait, not 20-30 s
    assert max(s for _, s in done) < 12.0


def test_readiness_recovers_when_the_lock_goes(locked_sqlite: tuple[Store, sqlite3.Connection]) -> None:
    store, locker = locked_sqlite
    c = TestClient(create_app(store, ApiConfig(token=TOKEN)))
    assert c.get("/readyz").status_code == 503
    locker.execute("ROLLBACK")
    locker.execute("BEGIN")  # the fixture's ROLLBACK needs a transaction
    assert c.get("/readyz").status_code == 200


# -- slow clients ----------------------------------------------------------------------------------


def test_a_half_sent_body_gets_408_and_the_connection_closes(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'slow.db'}")
    app = create_app(store, ApiConfig(token=TOKEN, body_timeout_s=0.5))
    with live_server(app) as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/failures HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {TOKEN}\r\nContent-Length: 100\r\n\r\n".encode()
                + b'{"gpu_uuid": '
            )
            t = time.monotonic()
            answer = b""
            while chunk := sock.recv(4096):  # until the server closes the connection
                answer += chunk
            waited = time.monotonic() - t
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert b"request body not received within 0.5s" in answer
        assert waited < 5.0
        # a body that arrives in time is served as before
        r = httpx.post(
            f"{url}/v1/failures", headers=auth(),
            json={"gpu_uuid": "GPU-1", "hostname": "n1", "failed_at": "2026-01-01T00:00:00Z", "mode": "ecc"},
        )  # fmt: skip
        assert r.status_code == 201, r.text
    store.close()
