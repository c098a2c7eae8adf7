"""Failure labels, Alertmanager notifications and probe results."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from core import history
from store import AlertmanagerAlert, NotFound, Store, StoreError
from tests.store.conftest import T0, frame

UUID = "GPU-8f3c1a2e-0000-4000-8000-000000000001"


@pytest.fixture
def known(store: Store) -> Store:
    """A store that has seen one GPU (UUID on node-a)."""
    store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": UUID, "gpu_temp_c": 40.0}]))
    return store


def test_failures_round_trip_as_training_labels(known: Store) -> None:
    f1 = known.labels.add_failure(
        gpu_uuid=UUID, failed_at=T0 + timedelta(days=1), mode="ecc", xid=48, recorded_by="ops"
    )
    assert (f1["hostname"], f1["kind"], f1["xid"], f1["failed_at"]) == ("node-a", "failure", 48, T0 + timedelta(days=1))
    known.labels.add_failure(
        gpu_uuid="GPU-elsewhere", hostname="node-z", failed_at=T0, mode="pcie", kind="rma", note="RMA 42"
    )
    assert [f["gpu_uuid"] for f in known.labels.failures()] == [UUID, "GPU-elsewhere"]  # newest first
    assert [f["gpu_uuid"] for f in known.labels.failures(since=T0 + timedelta(hours=1))] == [UUID]

    labels = known.labels.failures_frame()
    assert list(labels.columns) == ["gpu_uuid", "failed_at", "mode", "hostname", "xid"]
    again = history.validate_failures(labels)
    pd.testing.assert_frame_equal(labels, again)
    assert labels["gpu_uuid"].tolist() == ["GPU-elsewhere", UUID]
    assert labels["failed_at"].tolist() == [pd.Timestamp(T0), pd.Timestamp(T0 + timedelta(days=1))]
    assert labels["xid"].tolist() == [pd.NA, 48]


def test_failure_input_is_checked(known: Store) -> None:
    with pytest.raises(NotFound, match="give its hostname"):
        known.labels.add_failure(gpu_uuid="GPU-unknown", failed_at=T0, mode="ecc")
    with pytest.raises(StoreError, match="unknown failure mode 'melted'; use one of ecc, thermal, pcie, other"):
        known.labels.add_failure(gpu_uuid=UUID, failed_at=T0, mode="melted")
    with pytest.raises(StoreError, match="unknown failure kind 'oops'"):
        known.labels.add_failure(gpu_uuid=UUID, failed_at=T0, mode="ecc", kind="oops")
    with pytest.raises(StoreError, match="failed_at must be a datetime"):
        known.labels.add_failure(gpu_uuid=UUID, failed_at="yesterday", mode="ecc")  # type: ignore[arg-type]
    assert known.labels.failures() == []


def _payload(status: str = "firing", ends: str = "0001-01-01T00:00:00Z") -> dict[str, Any]:
    """An Alertmanager webhook (version 4) as it arrives, with a dcgm-exporter-labelled alert."""
    return {
        "version": "4",
        "groupKey": '{}:{alertname="GpuEccRowRemapPending"}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "gpuhealth",
        "groupLabels": {"alertname": "GpuEccRowRemapPending"},
        "commonLabels": {"alertname": "GpuEccRowRemapPending"},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "alerts": [
            {
                "status": status,
                "labels": {
                    "alertname": "GpuEccRowRemapPending",
                    "severity": "critical",
                    "action": "drain",
                    "UUID": UUID,
                    "Hostname": "node-a",
                    "gpu": "0",
                    "instance": "10.0.0.1:9400",
                },
                "annotations": {"summary": "row remap pending", "runbook_url": "https://example/runbook"},
                "startsAt": "2026-01-05T10:00:00.123456789Z",
                "endsAt": ends,
                "generatorURL": "http://prometheus:9090/graph",
                "fingerprint": "c0ffee0123456789",
            },
            {
                "status": status,
                "labels": {"alertname": "NodeDown", "instance": "10.0.0.2:9100"},
                "annotations": {},
                "startsAt": "2026-01-05T10:01:00Z",
                "endsAt": ends,
                "generatorURL": "",
                "fingerprint": "aaaa000011112222",
            },
        ],
    }


def test_alertmanager_firing_then_resolved(known: Store) -> None:
    received = T0 + timedelta(hours=10)
    assert known.labels.add_alertmanager(_payload(), received) == 2
    items, total = known.labels.alerts()
    assert total == 2
    gpu_alert = next(a for a in items if a["alertname"] == "GpuEccRowRemapPending")
    assert (gpu_alert["gpu_uuid"], gpu_alert["hostname"], gpu_alert["severity"], gpu_alert["action"]) == (
        UUID, "node-a", "critical", "drain")  # fmt: skip
    assert gpu_alert["starts_at"] == datetime(2026, 1, 5, 10, 0, 0, 123456, tzinfo=UTC)
    assert gpu_alert["ends_at"] is None
    assert gpu_alert["annotations"]["runbook_url"] == "https://example/runbook"
    node_alert = next(a for a in items if a["alertname"] == "NodeDown")
    assert (node_alert["gpu_uuid"], node_alert["hostname"]) == (None, "10.0.0.2")

    # the resolved notification updates the same alert instances instead of adding rows
    known.labels.add_alertmanager(_payload("resolved", "2026-01-05T11:00:00Z"), received + timedelta(hours=1))
    items, total = known.labels.alerts()
    assert total == 2
    assert {a["status"] for a in items} == {"resolved"}
    assert {a["ends_at"] for a in items} == {datetime(2026, 1, 5, 11, tzinfo=UTC)}
    assert [a["alertname"] for a in known.labels.alerts(gpu_uuid=UUID)[0]] == ["GpuEccRowRemapPending"]
    assert known.labels.alerts(status="firing") == ([], 0)


def test_typed_alerts_are_stored_as_their_json_payload_is(store: Store, tmp_path: Any) -> None:
    """`add_alerts` takes parsed alerts (datetimes, no end) and stores the rows the webhook's JSON gives."""
    payload = _payload()
    starts = [datetime(2026, 1, 5, 10, 0, 0, 123456, tzinfo=UTC), datetime(2026, 1, 5, 10, 1, tzinfo=UTC)]
    typed: list[AlertmanagerAlert] = [
        {"status": a["status"], "labels": a["labels"], "annotations": a["annotations"], "startsAt": t,
         "endsAt": None, "generatorURL": a["generatorURL"], "fingerprint": a["fingerprint"]}
        for a, t in zip(payload["alerts"], starts, strict=True)
    ]  # fmt: skip
    received = T0 + timedelta(hours=10)
    assert store.labels.add_alerts(typed, received, group_key=payload["groupKey"], receiver=payload["receiver"]) == 2
    other = Store.open(f"sqlite:///{tmp_path / 'other.db'}")
    try:
        assert other.labels.add_alertmanager(payload, received) == 2
        assert store.labels.alerts() == other.labels.alerts()
    finally:
        other.close()


def _without_alerts(p: dict[str, Any]) -> None:
    del p["alerts"]


def _bad_start(p: dict[str, Any]) -> None:
    p["alerts"][0]["startsAt"] = "yesterday"


def _bad_status(p: dict[str, Any]) -> None:
    p["alerts"][1]["status"] = "burning"


def _bad_version(p: dict[str, Any]) -> None:
    p["version"] = "3"


def _bad_labels(p: dict[str, Any]) -> None:
    p["alerts"][0]["labels"] = ["UUID"]


@pytest.mark.parametrize(
    ("spoil", "message"),
    [
        (_without_alerts, "Alertmanager payload has no alerts list"),
        (_bad_start, "alert 0: startsAt: invalid time 'yesterday'"),
        (_bad_status, "unknown alert 1: status 'burning'; use one of firing, resolved"),
        (_bad_version, "unsupported Alertmanager payload version '3'; expected 4"),
        (_bad_labels, "alert 0: labels must be an object of strings"),
    ],
)
def test_malformed_alertmanager_payloads(store: Store, spoil: Any, message: str) -> None:
    p = copy.deepcopy(_payload())
    spoil(p)
    with pytest.raises(StoreError) as err:
        store.labels.add_alertmanager(p, T0)
    assert message in str(err.value)
    assert store.labels.alerts() == ([], 0)  # nothing half-stored


def test_probe_results(known: Store) -> None:
    rows = [
        {"gpu_uuid": UUID, "ran_at": T0, "test": "gemm", "status": "pass", "value": 650.0, "unit": "TFLOP/s",
         "expected": 700.0, "ratio": 650 / 700, "duration_s": 2.5, "details": {"size": 8192}},
        {"gpu_uuid": UUID, "ran_at": T0 + timedelta(hours=6), "test": "memtest", "status": "fail",
         "details": {"errors": 3}},
    ]  # fmt: skip
    assert known.probes.add(rows) == 2
    got = known.probes.of(UUID)
    assert [(r["test"], r["status"], r["details"]) for r in got] == [("memtest", "fail", {"errors": 3}),
                                                                     ("gemm", "pass", {"size": 8192})]  # fmt: skip
    assert got[1]["ratio"] == pytest.approx(650 / 700) and got[0]["value"] is None
    with pytest.raises(StoreError, match="unknown probe result 0: status 'meh'"):
        known.probes.add([rows[0] | {"status": "meh"}])
    with pytest.raises(NotFound):
        known.probes.of("GPU-unknown")
    assert known.counts()["probe_results"] == 2
