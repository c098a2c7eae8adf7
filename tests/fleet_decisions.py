"""For actuator tests: a fleet of nodes whose GPUs the tests move between ok and rma, a clock they set."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from predictor.policy import decision_changes
from store import Store

T0 = datetime(2026, 12, 1, tzinfo=UTC)
MODEL = "NVIDIA H100 80GB HBM3"
REASON = {"ok": "", "watch": "risk 0.40", "demote": "risk 0.80: thermal", "drain": "row remap pending: reset",
          "rma": "row remap failure"}  # fmt: skip


def uuid_of(host: str, index: int) -> str:
    return f"GPU-{host}-{index}"


def set_decisions(
    store: Store, at: datetime, hosts: Sequence[str], bad: Mapping[tuple[str, int], str], *, gpus: int = 2
) -> None:
    """One scoring round at `at`: every GPU of `hosts` ok except those in `bad` ((host, index) -> decision)."""
    store.gpus.upsert(
        [{"uuid": uuid_of(h, i), "hostname": h, "gpu_index": i, "model_name": MODEL, "seen_at": at}
         for h in hosts for i in range(gpus)]
    )  # fmt: skip
    records = []
    for h in hosts:
        for i in range(gpus):
            d = bad.get((h, i), "ok")
            records.append({"gpu_uuid": uuid_of(h, i), "hostname": h, "model_name": MODEL, "risk": 0.1,
                            "decision": d, "reasons": [REASON[d]] if REASON[d] else []})  # fmt: skip
    store.decisions.write_scores(records, at, rule=decision_changes)


class Clock:
    """The actuator's clock, moved by the test (`clock.t += timedelta(hours=1)`)."""

    def __init__(self, t: datetime = T0) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t
