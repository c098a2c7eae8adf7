"""`Gpus.identities`, the GPUs a scoring round reads, is `find`'s listing without its score and
decision columns: the same GPUs and identities, the lost ones in `find`'s order (a round appends
the lost GPUs it did not score in that order, and the order gives their scores' ids)."""

from __future__ import annotations

from datetime import timedelta

from predictor.policy import decision_changes
from service.scorer import all_gpus
from store import Store
from store.decisions import ScoreRecord
from tests.store.conftest import T0


def _score(uuid: str, risk: float | None, decision: str) -> ScoreRecord:
    return {"gpu_uuid": uuid, "hostname": f"node-{uuid[-1]}", "model_name": "H100", "risk": risk,
            "decision": decision, "reasons": [] if decision == "ok" else ["risk high"]}  # fmt: skip


def test_identities_are_finds_gpus_with_the_lost_first_in_finds_order(store: Store) -> None:
    # Nine GPUs; five of them lost, at every rank of find's order: decisions, risks, unscored, UUID.
    store.gpus.upsert(
        [{"uuid": f"GPU-{i}", "hostname": f"node-{i}", "gpu_index": i % 2 or None, "model_name": "H100",
          "seen_at": T0 + timedelta(minutes=i)} for i in range(9)]
    )  # fmt: skip
    scores = [("GPU-1", 0.2, "ok"), ("GPU-2", 0.9, "demote"), ("GPU-3", 0.5, "ok"), ("GPU-4", None, "ok"),
              ("GPU-5", 0.95, "drain"), ("GPU-6", 0.7, "ok")]  # fmt: skip
    store.decisions.write_scores([_score(*s) for s in scores], T0 + timedelta(hours=1), rule=decision_changes)
    lost = ["GPU-0", "GPU-1", "GPU-2", "GPU-4", "GPU-6", "GPU-8"]
    store.gpus.upsert(
        [{"uuid": u, "hostname": f"node-{u[-1]}", "state": "lost", "seen_at": T0 + timedelta(hours=2)} for u in lost]
    )
    listed = all_gpus(store)
    got = store.gpus.identities()
    keys = ("uuid", "hostname", "gpu_index", "model_name", "state", "last_seen")
    assert sorted(got, key=lambda g: g["uuid"]) == sorted(({k: g[k] for k in keys} for g in listed),  # type: ignore[misc]
                                                          key=lambda g: g["uuid"])  # fmt: skip
    in_find_order = [g["uuid"] for g in listed if g["state"] == "lost"]
    assert in_find_order == ["GPU-2", "GPU-6", "GPU-1", "GPU-4", "GPU-0", "GPU-8"]  # demote, then by risk, unscored
    assert [g["uuid"] for g in got] == [*in_find_order, "GPU-3", "GPU-5", "GPU-7"]
    assert {g["state"] for g in got[:6]} == {"lost"}
