"""What the scoring loop adds from outside the history (`predictor.findings`): lost GPUs are drained,
probe findings watched, and neither lowers a decision."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from predictor.findings import with_lost_gpus, with_probe_findings

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _rec(uuid: str, decision: str = "ok") -> dict[str, Any]:
    return {"gpu_uuid": uuid, "hostname": "n1", "model_name": "NVIDIA H100 80GB HBM3", "risk": 0.01,
            "risk_ecc": 0.0, "risk_thermal": 0.0, "risk_pcie": 0.0, "decision": decision, "reasons": []}  # fmt: skip


def _gemm(uuid: str, value: float, status: str = "pass") -> dict[str, Any]:
    return {"gpu_uuid": uuid, "ran_at": T0, "test": "gemm", "status": status, "value": value, "unit": "TFLOP/s",
            "details": {"model_name": "NVIDIA H100 80GB HBM3", "errors": 0}}  # fmt: skip


def test_a_slow_gpu_is_watched_with_its_peers_in_the_reason() -> None:
    uuids = [f"GPU-{i}" for i in range(5)]
    results = [_gemm(u, 450.0 + i) for i, u in enumerate(uuids[:4])] + [_gemm(uuids[4], 360.0)]
    records = with_probe_findings([_rec(u) for u in uuids], results)
    by = {r["gpu_uuid"]: r for r in records}
    assert by["GPU-4"]["decision"] == "watch"
    assert "below the median of 4 same-model peers" in by["GPU-4"]["reasons"][0]
    assert all(by[u]["decision"] == "ok" for u in uuids[:4])


def test_a_failed_memtest_is_watched_and_never_lowers_a_decision() -> None:
    bad = {"gpu_uuid": "GPU-1", "ran_at": T0, "test": "memtest", "status": "fail", "value": 3.0, "unit": "bit errors",
           "details": {"errors": 3}}  # fmt: skip
    records = with_probe_findings([_rec("GPU-1"), _rec("GPU-2", "rma")], [bad, {**bad, "gpu_uuid": "GPU-2"}])
    assert records[0]["decision"] == "watch" and "memory test found bit errors (3)" in records[0]["reasons"][0]
    assert records[1]["decision"] == "rma"


def test_lost_gpus_are_drained_even_without_a_score() -> None:
    gpus = [{"uuid": "GPU-1", "hostname": "n1", "model_name": "m", "state": "lost", "last_seen": T0},
            {"uuid": "GPU-2", "hostname": "n1", "model_name": "m", "state": "active", "last_seen": T0}]  # fmt: skip
    records = with_lost_gpus([_rec("GPU-2")], gpus)
    by = {r["gpu_uuid"]: r for r in records}
    assert by["GPU-1"]["decision"] == "drain" and "fell off the bus" in by["GPU-1"]["reasons"][0]
    assert by["GPU-2"]["decision"] == "ok"
    assert with_lost_gpus([_rec("GPU-1", "rma")], gpus[:1])[0]["decision"] == "rma"


def test_a_lost_gpus_remedy_is_a_reboot_now_unless_a_stronger_one_stands() -> None:
    """Off the bus, a reset cannot reach it (XID 79): reboot now, its line replacing a weaker one;
    an RMA's replacement stays."""
    lost = [{"uuid": "GPU-1", "hostname": "n1", "model_name": "m", "state": "lost", "last_seen": T0}]
    fresh = with_lost_gpus([], lost)[0]
    assert (fresh["remedy"], fresh["remedy_when"]) == ("reboot", "now")
    assert fresh["reasons"][-1].startswith("remedy: reboot now (GPU lost, off the bus: a reset cannot reach it")
    weaker = {
        **_rec("GPU-1", "drain"),
        "remedy": "reset",
        "remedy_when": "idle",
        "reasons": ["x", "remedy: reset idle (y)"],
    }
    got = with_lost_gpus([weaker], lost)[0]
    assert (got["remedy"], got["remedy_when"]) == ("reboot", "now")
    assert [r for r in got["reasons"] if r.startswith("remedy: ")] == [got["reasons"][-1]]
    rma = {**_rec("GPU-1", "rma"), "remedy": "replace", "remedy_when": "now", "reasons": ["remedy: replace now (z)"]}
    got = with_lost_gpus([rma], lost)[0]
    assert (got["remedy"], got["remedy_when"], got["reasons"][-1]) == ("replace", "now", "remedy: replace now (z)")
