"""The actuator's part of the store, on SQLite and PostgreSQL: the audit, per-node controls, the breaker."""

from __future__ import annotations

from datetime import timedelta

import pytest

from store import Store, StoreError
from tests.fleet_decisions import set_decisions
from tests.store.conftest import T0


def action(host: str, result: str = "applied", to: str = "drain", at_min: int = 0, **kw: object) -> dict[str, object]:
    return {"at": T0 + timedelta(minutes=at_min), "target": "slurm", "mode": "on", "hostname": host,
            "action": to, "from_state": "ok", "to_state": to, "why": f"GPU 0 {to}", "result": result,
            "escalates": to in ("demote", "drain", "rma"), **kw}  # fmt: skip


def test_the_audit_lists_newest_first_and_counts_the_breakers_nodes(store: Store) -> None:
    act = store.actuation
    act.record([action("a", at_min=0), action("b", "pending", at_min=1), action("c", "blocked", at_min=2),
                action("a", "applied", "rma", at_min=3, workloads=["job 7 (alice, train)"])])  # fmt: skip
    rows, total = act.actions()
    assert total == 4 and [r["hostname"] for r in rows] == ["a", "c", "b", "a"]
    assert rows[0]["workloads"] == ["job 7 (alice, train)"] and rows[0]["at"] == T0 + timedelta(minutes=3)
    assert act.actions(result="blocked")[1] == 1 and act.actions(hostname="a")[1] == 2
    assert act.escalated_nodes("slurm", T0) == {"a", "b"}  # blocked does not count
    assert act.escalated_nodes("slurm", T0 + timedelta(minutes=2)) == {"a"}
    assert act.escalated_nodes("kubernetes", T0) == set()
    assert act.last_actions("slurm", ["a", "b", "z"])["a"]["to_state"] == "rma"
    with pytest.raises(StoreError, match="action result"):
        act.record([action("a", "done")])
    with pytest.raises(StoreError, match="to state"):
        act.record([action("a", to="explode")])


def test_holds_releases_settle_clocks_and_saved_values(store: Store) -> None:
    act = store.actuation
    act.hold("n1", held=True, by="alice", at=T0)
    act.release("n2", by="bob", at=T0)
    act.set_lowering({"n1": (T0, "watch"), "n3": (T0, "ok")})
    act.set_saved("n3", {"weight": 7, "reliable": True})
    c = act.node_controls()
    assert (c["n1"]["held"], c["n1"]["held_by"], c["n1"]["lowering_to"]) == (True, "alice", "watch")
    assert (c["n2"]["held"], c["n2"]["released_by"], c["n2"]["released_at"]) == (False, "bob", T0)
    assert c["n3"]["saved"] == {"weight": 7, "reliable": True}
    act.set_lowering({"n1": None})
    act.hold("n1", held=False, by="carol", at=T0)
    act.set_saved("n3", None)
    c = act.node_controls()
    assert (c["n1"]["held"], c["n1"]["lowering_since"], c["n3"]["saved"]) == (False, None, None)


def test_the_breaker_stays_open_until_reset(store: Store) -> None:
    act = store.actuation
    assert act.breaker("slurm")["breaker_open"] is False
    act.open_breaker("slurm", at=T0, reason="too many")
    assert (act.breaker("slurm")["breaker_open"], act.breaker("kubernetes")["breaker_open"]) == (True, False)
    st = act.reset_breaker("slurm", by="alice", at=T0 + timedelta(hours=1))
    assert (st["breaker_open"], st["reason"], st["reset_by"]) == (False, "too many", "alice")


def test_active_decisions_of_gpus_in_service(store: Store) -> None:
    set_decisions(store, T0, ["n1", "n2"], {("n1", 1): "rma", ("n2", 0): "watch"})
    got = sorted((d["hostname"], d["gpu_index"], d["decision"]) for d in store.actuation.active_decisions())
    assert got == [("n1", 1, "rma"), ("n2", 0, "watch")]
    store.upsert_gpus([{"uuid": "GPU-n1-1", "hostname": "n1", "gpu_index": 1, "seen_at": T0, "state": "retired"}])
    assert [d["hostname"] for d in store.actuation.active_decisions()] == ["n2"]
    assert store.actuation.hostnames() == ["n1", "n2"]
