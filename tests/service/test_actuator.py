"""The actuator's loop on a real store and the in-memory scheduler: dry-run, idempotence, settle,
hold and release, the breaker (a real year passes, a storm trips it), and faults mid-pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import pytest

from actuate.breaker import BreakerPolicy
from actuate.memory import MemoryTarget
from actuate.plan import Observed, Step
from actuate.target import Applied, TargetUnavailable
from api.routes.actuator import summary
from service.actuator import Actuator, ActuatorConfig
from store import Store
from tests.fleet_decisions import T0, Clock, set_decisions

HOUR = timedelta(hours=1)


class Flaky(MemoryTarget):
    """The in-memory scheduler, counting applies per node, that can be down or fail one node's step."""

    def __init__(self, hosts: list[str]) -> None:
        super().__init__(lambda: hosts)
        self.down = False
        self.fail_on: set[str] = set()
        self.applied: Counter[tuple[str, str]] = Counter()

    def observe(self) -> dict[str, Observed]:
        if self.down:
            raise TargetUnavailable("scheduler down")
        return super().observe()

    def apply(self, step: Step, observed: Observed, saved: Mapping[str, Any] | None) -> Applied:
        if step.hostname in self.fail_on:
            raise TargetUnavailable(f"lost the scheduler while changing {step.hostname}")
        self.applied[(step.hostname, step.to_state)] += 1
        return super().apply(step, observed, saved)


def hosts(n: int) -> list[str]:
    return [f"node-{i:03d}" for i in range(n)]


LENIENT = BreakerPolicy(max_fraction=1.0, max_nodes=1000)
"""For the tests of something else than the breaker: a cluster of 4 may otherwise lose 1 node an hour."""


def make(store: Store, n: int, mode: str = "on", **kw: Any) -> tuple[Actuator, Flaky, Clock]:
    kw.setdefault("breaker", LENIENT if n < 50 else BreakerPolicy())
    clock = Clock()
    target = Flaky(hosts(n))
    return Actuator(store, target, ActuatorConfig(mode=mode, **kw), now=clock), target, clock  # type: ignore[arg-type]


def test_dry_run_records_what_it_would_do_once_and_touches_nothing(store: Store) -> None:
    act, target, clock = make(store, 4, "dry-run")
    set_decisions(store, T0, hosts(4), {("node-001", 1): "rma", ("node-002", 0): "watch"})
    first = act.reconcile_once()
    assert sorted((o.step.hostname, o.step.to_state, o.result) for o in first.outcomes) == [
        ("node-001", "rma", "planned"), ("node-002", "watch", "planned")]  # fmt: skip
    assert target.states == {} and not target.applied
    clock.t += timedelta(minutes=1)
    act.reconcile_once()  # the same plan again: not recorded twice
    rows, total = store.actuation.actions()
    assert total == 2
    rma = next(r for r in rows if r["hostname"] == "node-001")
    assert summary(rma) == "would drain node-001: GPU 1 rma (row remap failure)"
    assert (rma["mode"], rma["from_state"], rma["escalates"], rma["workloads"]) == ("dry-run", "ok", True, [])


def test_on_applies_once_and_a_second_pass_changes_nothing(store: Store) -> None:
    act, target, clock = make(store, 4)
    set_decisions(store, T0, hosts(4), {("node-000", 0): "demote", ("node-003", 1): "drain"})
    act.reconcile_once()
    assert target.states == {"node-000": "demote", "node-003": "drain"}
    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []
    assert target.applied == Counter({("node-000", "demote"): 1, ("node-003", "drain"): 1})
    assert act.state.actions == Counter({("demote", "applied"): 1, ("drain", "applied"): 1})
    assert act.state.nodes_by_state == {"ok": 2, "demote": 1, "drain": 1}


def test_ours_is_undone_only_after_the_settle_period(store: Store) -> None:
    act, target, clock = make(store, 2, settle=HOUR)
    set_decisions(store, T0, hosts(2), {("node-000", 0): "drain"})
    act.reconcile_once()
    clock.t = T0 + HOUR
    set_decisions(store, clock.t, hosts(2), {})  # the GPU was replaced: all ok
    act.reconcile_once()
    clock.t += 50 * timedelta(minutes=1)
    assert act.reconcile_once().outcomes == [] and target.states == {"node-000": "drain"}
    clock.t += 10 * timedelta(minutes=1)
    (o,) = act.reconcile_once().outcomes
    assert (o.step.action, o.result, target.states) == ("release", "applied", {})


def test_a_held_node_is_left_alone_and_a_release_undoes_ours_now(store: Store) -> None:
    act, target, clock = make(store, 2)
    set_decisions(store, T0, hosts(2), {("node-000", 0): "drain", ("node-001", 1): "rma"})
    store.actuation.hold("node-001", held=True, by="alice", at=T0)
    act.reconcile_once()
    assert target.states == {"node-000": "drain"}
    clock.t += HOUR / 6
    store.actuation.release("node-000", by="bob", at=clock.t)
    act.reconcile_once()
    assert target.states == {}  # released although its decision is still drain
    clock.t += HOUR / 6
    set_decisions(store, clock.t, hosts(2), {("node-000", 0): "rma", ("node-001", 1): "rma"})  # worse: acts again
    act.reconcile_once()
    assert target.states == {"node-000": "rma"}
    clock.t += HOUR / 6
    set_decisions(store, clock.t, hosts(2), {("node-001", 1): "rma"})  # repaired: the release was used up
    act.reconcile_once()
    assert target.states == {"node-000": "rma"}  # the settle period holds again
    clock.t += HOUR
    act.reconcile_once()
    assert target.states == {}


def test_a_storm_trips_the_breaker_until_a_person_resets_it(store: Store) -> None:
    act, target, clock = make(store, 60)  # limit: min(5, 10 % of 60) = 5 per hour
    set_decisions(store, T0, hosts(60), {(h, 0): "drain" for h in hosts(60)[:50]})
    report = act.reconcile_once()
    results = Counter(o.result for o in report.outcomes)
    assert results == Counter({"applied": 5, "blocked": 45}) and report.breaker_open
    assert len(target.states) == 5 and store.actuation.breaker("sim")["breaker_open"]
    clock.t += 2 * HOUR  # the window passed, but an open breaker stays open
    assert Counter(o.result for o in act.reconcile_once().outcomes) == Counter({"blocked": 45})
    assert len(target.states) == 5
    act.reset_breaker("alice")
    report = act.reconcile_once()
    assert Counter(o.result for o in report.outcomes) == Counter({"applied": 5, "blocked": 40})
    assert len(target.states) == 10


def test_a_real_year_of_faults_never_trips_the_breaker(store: Store) -> None:
    """The 400-server trace's worst bursts (REFERENCE.md): at most 3 nodes with a new GPU fault in an
    hour, 5 in a day, 11 in a week. Replayed week after week, each node drained, repaired after a day
    and released after the settle period: the defaults must let every drain through."""
    nodes = hosts(400)
    act, target, clock = make(store, 400)
    week = [timedelta(minutes=m) for m in (0, 20, 50)] + [timedelta(hours=h) for h in (5, 9)]  # 3 in 1 h, 5 in 1 d
    week += [timedelta(days=d) for d in (2, 3, 3.5, 4, 5, 6)]  # 11 in the week
    bad: dict[tuple[str, int], str] = {}
    repaired_at: dict[str, datetime] = {}
    k = 0
    events = []
    for w in range(8):  # eight weeks of the worst week, back to back
        for off in week:
            events.append((T0 + timedelta(weeks=w) + off, nodes[k % 400]))
            k += 1
    for at, node in events:
        clock.t = at
        for n, when in list(repaired_at.items()):
            if when <= at:
                bad.pop((n, 0), None)
                del repaired_at[n]
        bad[(node, 0)] = "drain"
        repaired_at[node] = at + timedelta(days=1)
        set_decisions(store, at, nodes, bad, gpus=1)
        report = act.reconcile_once()
        assert not report.breaker_open, f"tripped at {at}: {[o.error for o in report.outcomes if o.error]}"
    assert sum(n for (_, s), n in target.applied.items() if s == "drain") == len(events)


def test_scheduler_down_then_back_converges_without_applying_twice(store: Store) -> None:
    act, target, clock = make(store, 3)
    set_decisions(store, T0, hosts(3), {("node-000", 0): "drain", ("node-001", 0): "demote", ("node-002", 0): "rma"})
    target.down = True
    with pytest.raises(TargetUnavailable):
        act.reconcile_once()
    assert act.state.failures == 1 and store.actuation.actions()[1] == 0
    target.down = False
    target.fail_on = {"node-001"}  # lost mid-pass
    report = act.reconcile_once()
    assert {o.step.hostname: o.result for o in report.outcomes} == {
        "node-002": "applied", "node-000": "applied", "node-001": "failed"}  # fmt: skip
    target.fail_on = set()
    clock.t += timedelta(minutes=1)
    report = act.reconcile_once()
    assert [(o.step.hostname, o.result) for o in report.outcomes] == [("node-001", "applied")]
    assert act.reconcile_once().outcomes == []
    assert set(target.applied.values()) == {1}


def test_the_loop_backs_off_while_the_scheduler_is_down_and_converges_after(store: Store) -> None:
    import time

    act, target, _ = make(store, 3, interval_s=0.05, max_backoff_s=0.2)
    set_decisions(store, T0, hosts(3), {("node-000", 0): "drain"})
    target.down = True
    act.start()
    try:
        deadline = time.monotonic() + 10
        while act.state.failures < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert act.state.failures >= 3 and act.state.passes == 0 and act.state.last_error == "scheduler down"
        target.down = False
        # The pass applies the node, then records its success: wait for both (a busy machine
        # can run this thread between the two).
        while (not target.states or act.state.last_error is not None) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert target.states == {"node-000": "drain"} and act.state.last_error is None
    finally:
        act.stop()
    assert target.applied[("node-000", "drain")] == 1


class Odd(Flaky):
    """The in-memory scheduler with a bug on some nodes (an odd byte in their jobs or in the answer to a
    step), checking at each step that the steps before it are in the audit already."""

    def __init__(self, hosts: list[str], store: Store) -> None:
        super().__init__(hosts)
        self.store = store
        self.bug_on: set[str] = set()
        self.odd_jobs_on: set[str] = set()
        self.audited_before: dict[str, set[str]] = {}

    def workloads(self, hostname: str) -> list[str]:
        if hostname in self.odd_jobs_on:
            raise UnicodeDecodeError("utf-8", b"r\xe9sum\xe9", 1, 2, "invalid continuation byte")
        return [f"job 1 (alice, train on {hostname})"]

    def apply(self, step: Step, observed: Observed, saved: Mapping[str, Any] | None) -> Applied:
        rows, _ = self.store.actuation.actions()
        self.audited_before[step.hostname] = {r["hostname"] for r in rows if r["result"] == "applied"}
        if step.hostname in self.bug_on:
            raise UnicodeDecodeError("utf-8", b"r\xe9sum\xe9", 1, 2, "invalid continuation byte")
        return super().apply(step, observed, saved)


@pytest.mark.parametrize("workers", [1, 8])
def test_an_unexpected_error_on_one_node_is_that_nodes_failed_action(store: Store, workers: int) -> None:
    """One node's odd input is its own `failed` action: every other step is applied and audited as it is
    applied, and the pass goes on (it used to raise after draining the others, with nothing audited)."""
    clock = Clock()
    target = Odd(hosts(4), store)
    act = Actuator(store, target, ActuatorConfig(mode="on", breaker=LENIENT, workers=workers), now=clock)
    set_decisions(store, T0, hosts(4), {(h, 0): "drain" for h in hosts(4)})
    target.bug_on, target.odd_jobs_on = {"node-001"}, {"node-002"}
    report = act.reconcile_once()
    got = {o.step.hostname: o.result for o in report.outcomes}
    assert got == {"node-000": "applied", "node-001": "failed", "node-002": "applied", "node-003": "applied"}
    rows = {r["hostname"]: r for r in store.actuation.actions()[0]}
    assert {h: r["result"] for h, r in rows.items()} == got
    assert "UnicodeDecodeError" in (rows["node-001"]["error"] or "")
    assert rows["node-002"]["workloads"][0].startswith("(unknown: UnicodeDecodeError: 'utf-8' codec")
    assert act.state.last_error is None and act.state.passes == 1
    if workers == 1:  # one at a time, in order: each step finds the ones applied before it audited
        assert target.audited_before == {
            "node-000": set(), "node-001": {"node-000"}, "node-002": {"node-000"},
            "node-003": {"node-000", "node-002"}}  # fmt: skip
    clock.t += timedelta(minutes=1)
    target.bug_on = set()
    assert [(o.step.hostname, o.result) for o in act.reconcile_once().outcomes] == [("node-001", "applied")]


def test_resetting_a_closed_breaker_leaves_its_window_alone(store: Store) -> None:
    """A reset after every pass used to restart the window each time: 6 nodes drained in 5.5 minutes under a
    bound of one an hour, the breaker never opening. A closed breaker's reset is refused and changes nothing."""
    act, target, clock = make(store, 10, breaker=BreakerPolicy(max_fraction=1.0, max_nodes=1))
    opened = []
    for i in range(6):
        set_decisions(store, clock.t, hosts(10), {(h, 0): "drain" for h in hosts(10)[: i + 1]})
        opened.append(act.reconcile_once().breaker_open)
        clock.t += timedelta(seconds=33)
        if not opened[-1]:
            assert act.reset_breaker("mallory") is False
            assert store.actuation.breaker("sim")["reset_at"] is None
        clock.t += timedelta(seconds=33)
    assert opened == [False, True, True, True, True, True] and len(target.states) == 1
    assert act.reset_breaker("alice") is True and store.actuation.breaker("sim")["reset_by"] == "alice"
