"""The actuator's part of the store, on SQLite and PostgreSQL: the audit, per-node controls, the breaker."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from actuate.breaker import BreakerPolicy
from actuate.memory import MemoryTarget
from actuate.plan import Observed, Step
from actuate.target import Applied
from service.actuator import Actuator, ActuatorConfig
from store import Store, StoreError
from store.actuation import Actuation
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
    assert act.reset_breaker("slurm", by="mallory", at=T0) is None  # closed: its window is left alone
    assert act.breaker("slurm")["reset_at"] is None
    act.open_breaker("slurm", at=T0, reason="too many")
    assert (act.breaker("slurm")["breaker_open"], act.breaker("kubernetes")["breaker_open"]) == (True, False)
    st = act.reset_breaker("slurm", by="alice", at=T0 + timedelta(hours=1))
    assert (st["breaker_open"], st["reason"], st["reset_by"]) == (False, "too many", "alice")


def test_active_decisions_of_gpus_in_service(store: Store) -> None:
    set_decisions(store, T0, ["n1", "n2"], {("n1", 1): "rma", ("n2", 0): "watch"})
    got = sorted((d["hostname"], d["gpu_index"], d["decision"]) for d in store.actuation.active_decisions())
    assert got == [("n1", 1, "rma"), ("n2", 0, "watch")]
    store.gpus.upsert([{"uuid": "GPU-n1-1", "hostname": "n1", "gpu_index": 1, "seen_at": T0, "state": "retired"}])
    assert [d["hostname"] for d in store.actuation.active_decisions()] == ["n2"]
    assert store.actuation.hostnames() == ["n1", "n2"]


class Replica(MemoryTarget):
    """One replica's view of the scheduler: every pass starts with the other replica's (a barrier), and
    a step takes a while, as `scontrol` does, so both passes are under way at once."""

    def __init__(self, hosts: list[str], barrier: threading.Barrier) -> None:
        super().__init__(lambda: hosts)
        self.barrier = barrier

    def observe(self) -> dict[str, Observed]:
        self.barrier.wait(timeout=30)
        return super().observe()

    def apply(self, step: Step, observed: Observed, saved: Mapping[str, Any] | None) -> Applied:
        time.sleep(0.3)
        return super().apply(step, observed, saved)


def test_two_replicas_passing_at_once_share_one_breaker_bound(store: Store, store_url: str) -> None:
    """The breaker's count and its spend are one transaction across replicas: two replicas (two Stores on one
    database), each acting on half of 10 nodes that all need draining, drain at most 2 under a bound of 2."""
    hosts = [f"node-{i:02d}" for i in range(10)]
    set_decisions(store, T0, hosts, {(h, 0): "drain" for h in hosts})
    barrier = threading.Barrier(2)
    policy = BreakerPolicy(max_fraction=1.0, max_nodes=2)
    replicas, targets = [], []
    for half in (0, 1):
        targets.append(Replica(hosts, barrier))
        mine = {h for i, h in enumerate(hosts) if i % 2 == half}
        config = ActuatorConfig(mode="on", breaker=policy, workers=4)
        owns = lambda m=mine: m.__contains__  # noqa: E731
        replicas.append(Actuator(Store.open(store_url), targets[-1], config, now=lambda: T0, owns=owns))
    try:
        with ThreadPoolExecutor(2) as pool:
            reports = list(pool.map(lambda a: a.reconcile_once(), replicas))
    finally:
        for a in replicas:
            a.store.close()
    drained = sorted(h for t in targets for h in t.states)
    applied = sorted(o.step.hostname for r in reports for o in r.outcomes if o.result == "applied")
    assert len(drained) == 2 and applied == drained
    assert store.actuation.escalated_nodes("sim", T0 - timedelta(hours=1)) == set(drained)
    assert store.actuation.breaker("sim")["breaker_open"]
    blocked = [o for r in reports for o in r.outcomes if o.result == "blocked"]
    assert len(blocked) == 8 and store.actuation.actions(result="blocked")[1] == 8


def test_the_count_and_the_spend_are_one_transaction(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """However long a replica takes between counting and spending, a second one counts its spend: two
    Stores on one database, each spending 2 under a bound of 2, reserve 2 in all and open the breaker once."""
    count = Actuation._escalated

    def slow(self: Actuation, *args: Any) -> set[str]:
        seen = count(self, *args)
        time.sleep(0.5)  # the other replica counts now, unless it waits for the lock
        return seen

    monkeypatch.setattr(Actuation, "_escalated", slow)
    stores = [Store.open(store_url) for _ in range(2)]

    def spend(k: int) -> dict[str, Any]:
        rows = [action(f"r{k}-n{i}", "pending") | {"target": "sim"} for i in range(2)]
        window = {"window_start": T0 - timedelta(hours=1), "limit": 2, "counted": ("applied", "pending")}
        return dict(stores[k].actuation.spend("sim", rows, **window, open_reason="too many", at=T0))

    try:
        with ThreadPoolExecutor(2) as pool:
            spent = list(pool.map(spend, range(2)))
    finally:
        for s in stores:
            s.close()
    assert sum(len(s["reserved"]) for s in spent) == 2
    assert sorted(len(s["refused"]) for s in spent) == [0, 2]
    assert [s["opened"] for s in spent].count(True) == 1


def test_the_window_counts_from_the_last_reset_or_its_length_ago(store: Store) -> None:
    """`spend` counts the nodes escalated since `window_start` or the last reset, whichever is later."""
    act = store.actuation
    act.record([action("a", at_min=0), action("b", at_min=1)])
    step = dict(action("c", result="pending", at_min=33))
    spent = act.spend("slurm", [step], window_start=T0 - timedelta(hours=1), limit=2, counted=("applied", "pending"),
                      open_reason=None, at=T0 + timedelta(minutes=30))  # fmt: skip
    assert spent["refused"] == ["c"] and not spent["reserved"]  # a and b fill the bound of 2
    act.open_breaker("slurm", at=T0 + timedelta(minutes=31), reason="too many")
    act.reset_breaker("slurm", by="alice", at=T0 + timedelta(minutes=32))
    spent = act.spend("slurm", [step], window_start=T0 - timedelta(hours=1), limit=2, counted=("applied", "pending"),
                      open_reason=None, at=T0 + timedelta(minutes=33))  # fmt: skip
    assert list(spent["reserved"]) == ["c"] and spent["refused"] == []  # the reset began a new window
    later = T0 + timedelta(minutes=32, hours=1)
    d = dict(action("d", result="pending", at_min=93))
    spent = act.spend("slurm", [d], window_start=later - timedelta(hours=1), limit=1, counted=("applied", "pending"),
                      open_reason=None, at=later)  # fmt: skip
    assert spent["refused"] == ["d"]  # c, reserved after the reset, is inside this window
