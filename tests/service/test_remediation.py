"""The remediation loop on a real store and the in-memory scheduler: drain → remedy → verify → return,
a reset refused while busy, a failed verification escalating to RMA, the repeat-offender rule, the
breaker counting remedies, a restart mid-way, dry-run, and reboots through the scheduler."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import pytest

from actuate.breaker import BreakerPolicy
from actuate.memory import MemoryTarget
from core.remedies import ProbeResult, RemedyReport
from predictor.policy import decision_changes
from service.actuator import Actuator, ActuatorConfig
from service.remediation import RemediationConfig, causes_since
from service.remedy_tasks import LocalRemedies, take_report, tasks_for
from store import Store
from tests.fleet_decisions import MODEL, T0, Clock, uuid_of

MIN = timedelta(minutes=1)
HOSTS = [f"node-{i}" for i in range(4)]
LENIENT = BreakerPolicy(max_fraction=1.0, max_nodes=1000)
XID119 = ("drain", "reset", "now", "remedy: reset now (XID 119, GSP RPC timeout)")
REMAP = ("watch", "reset", "idle", "remedy: reset idle (pending row remap applies at the next reset)")
OFFBUS = ("drain", "reboot", "now", "remedy: reboot now (XID 79, off the bus)")


def score(store: Store, at: datetime, bad: Mapping[tuple[str, int], tuple[str, str, str, str]],
          hosts: Sequence[str] = HOSTS) -> None:  # fmt: skip
    """One scoring round: every GPU of `hosts` ok (no remedy) except `bad`: (host, index) -> (decision, remedy,
    when, remedy line)."""
    store.gpus.upsert([{"uuid": uuid_of(h, i), "hostname": h, "gpu_index": i, "model_name": MODEL, "seen_at": at}
                       for h in hosts for i in range(2)])  # fmt: skip
    recs = []
    for h in hosts:
        for i in range(2):
            d, remedy, when, line = bad.get((h, i), ("ok", "none", "idle", ""))
            recs.append({"gpu_uuid": uuid_of(h, i), "hostname": h, "model_name": MODEL, "risk": 0.1, "decision": d,
                         "reasons": [line] if line else [], "remedy": remedy, "remedy_when": when})  # fmt: skip
    store.decisions.write_scores(recs, at, rule=decision_changes)


def sample(store: Store, at: datetime, host: str, index: int, *, uuid: str | None = None, **values: float) -> None:
    """One telemetry sample of a GPU (a healthy one unless `values` say otherwise)."""
    row = {"timestamp": pd.Timestamp(at).tz_convert(None), "hostname": host, "gpu_uuid": uuid or uuid_of(host, index),
           "gpu_index": index, "model_name": MODEL, "xid": 0.0, "recovery_action": 0.0, "row_remap_pending": 0.0,
           "pcie_link_width": 16.0, "pcie_link_width_max": 16.0, **values}  # fmt: skip
    store.samples.ingest(pd.DataFrame([row]))


class Node(MemoryTarget):
    def __init__(self) -> None:
        super().__init__(lambda: HOSTS)
        self.rebooted: list[str] = []
        self.on_reboot = self.rebooted.append


def make(store: Store, mode: str = "on", **kw: Any) -> tuple[Actuator, Node, Clock]:
    clock = Clock(T0)
    target = Node()
    config = ActuatorConfig(mode=mode, breaker=kw.pop("breaker", LENIENT), settle=timedelta(hours=1),  # type: ignore[arg-type]
                            remediation=RemediationConfig(**kw))  # fmt: skip
    return Actuator(store, target, config, now=clock), target, clock


def verified(ok: bool = True) -> RemedyReport:
    probe = ProbeResult("gemm", ok, "" if ok else "3 wrong elements")
    return RemedyReport("verify", "done" if ok else "failed", "", probes=(probe,))


def actions(store: Store) -> list[tuple[str, str, str]]:
    rows, _ = store.actuation.actions(limit=1000)
    return [(r["hostname"], r["action"], r["result"]) for r in reversed(rows)]


def test_xid119_drained_reset_verified_and_returned(store: Store) -> None:
    act, target, clock = make(store)
    score(store, T0, {("node-1", 0): XID119})
    sample(store, T0, "node-1", 0, xid=119.0, recovery_action=1.0)
    act.reconcile_once()  # drains node-1; the remediation opens at drain
    assert target.states == {"node-1": "drain"}
    (r,) = store.remediations.open()
    assert (r["stage"], r["remedy"], r["due"]) == ("drain", "reset", "now")
    assert tasks_for(store, "node-1", agent_reboots=False) == []  # not before the drain holds
    clock.t += MIN
    act.reconcile_once()  # the drain holds: the reset is handed to the agent
    (task,) = tasks_for(store, "node-1", agent_reboots=False)
    assert (task.do, task.gpu_uuid) == ("reset", uuid_of("node-1", 0))
    agent = LocalRemedies(store, act.remediator, clock)
    assert agent.report(task.remediation_id, RemedyReport("reset", "refused", "1 process(es) on the GPU (pid 7)"))
    assert store.remediations.get(r["id"])["stage"] == "remedy"  # a refusal waits on
    clock.t += MIN
    assert agent.report(task.remediation_id, RemedyReport("reset", "done", "GPU reset"))
    assert not agent.report(task.remediation_id, RemedyReport("reset", "done", "again"))  # moved on: dropped
    (task,) = tasks_for(store, "node-1", agent_reboots=False)
    assert task.do == "verify"
    assert agent.report(task.remediation_id, verified())
    act.reconcile_once()  # the probes passed, but no sample since the remedy yet: waits
    assert store.remediations.get(r["id"])["stage"] == "verify"
    clock.t += MIN
    sample(store, clock.t, "node-1", 0, xid=119.0)  # the gauge still shows the XID from before: not new
    act.reconcile_once()
    done = store.remediations.get(r["id"])
    assert (done["stage"], done["result"]) == (None, "returned")
    clock.t += MIN
    act.reconcile_once()  # back in service at once, without the settle hour; the old decision no longer acts
    assert target.states == {}
    assert [a for a in actions(store) if a[1] != "release"] == [
        ("node-1", "drain", "applied"), ("node-1", "reset", "applied"), ("node-1", "verify", "applied"),
        ("node-1", "return", "applied")]  # fmt: skip
    assert act.remediator is not None and act.remediator.stats.closed[("reset", "returned")] == 1
    assert act.remediator.stats.counts["reset"] == 1
    clock.t += timedelta(hours=2)
    act.reconcile_once()  # the score still asks (the XID stays within its window): not opened again
    assert len(store.remediations.page()[0]) == 1 and target.states == {}


def test_pending_remap_is_reset_at_idle_without_a_drain(store: Store) -> None:
    act, target, clock = make(store)
    score(store, T0, {("node-2", 1): REMAP})
    act.reconcile_once()
    (task,) = tasks_for(store, "node-2", agent_reboots=False)  # at once: nothing to drain
    assert task.do == "reset" and target.states.get("node-2") in (None, "watch")
    agent = LocalRemedies(store, act.remediator, clock)
    agent.report(task.remediation_id, RemedyReport("reset", "done", "reset"))
    agent.report(task.remediation_id, verified())
    clock.t += MIN
    sample(store, clock.t, "node-2", 1)
    act.reconcile_once()
    assert store.remediations.get(task.remediation_id)["result"] == "returned"
    assert "drain" not in {a[1] for a in actions(store)}


def test_a_cause_still_there_after_the_remedy_escalates_to_rma(store: Store) -> None:
    act, target, clock = make(store)
    score(store, T0, {("node-1", 0): REMAP})
    act.reconcile_once()
    (task,) = tasks_for(store, "node-1", agent_reboots=False)
    agent = LocalRemedies(store, act.remediator, clock)
    agent.report(task.remediation_id, RemedyReport("reset", "done", "reset"))
    agent.report(task.remediation_id, verified())
    clock.t += MIN
    sample(store, clock.t, "node-1", 0, row_remap_pending=1.0)
    act.reconcile_once()
    r = store.remediations.get(task.remediation_id)
    assert r["result"] == "rma" and "row remap is still pending" in (r["detail"] or "")
    clock.t += MIN
    act.reconcile_once()
    assert target.states == {"node-1": "rma"}  # until an operator's release
    assert ("node-1", "escalate", "applied") in actions(store)


def test_a_failed_probe_escalates_to_rma(store: Store) -> None:
    act, _target, clock = make(store)
    score(store, T0, {("node-1", 0): REMAP})
    act.reconcile_once()
    (task,) = tasks_for(store, "node-1", agent_reboots=False)
    take_report(store, act.remediator, task.remediation_id, RemedyReport("reset", "done", ""), clock.t)
    take_report(store, act.remediator, task.remediation_id, verified(ok=False), clock.t)
    clock.t += MIN
    sample(store, clock.t, "node-1", 0)
    act.reconcile_once()
    r = store.remediations.get(task.remediation_id)
    assert r["result"] == "rma" and "verification failed" in (r["detail"] or "")
    assert r["verified"] is not None and r["verified"]["probes"][0]["detail"] == "3 wrong elements"


def test_a_gpu_that_keeps_needing_remedies_goes_to_rma(store: Store) -> None:
    act, _target, clock = make(store)
    agent = LocalRemedies(store, act.remediator, clock)
    for k in range(2):
        score(store, clock.t, {("node-3", 0): REMAP})
        sample(store, clock.t, "node-3", 0, row_remap_pending=1.0)  # the cause, again, since the last return
        act.reconcile_once()
        tasks = tasks_for(store, "node-3", agent_reboots=False)
        if k == 1:
            break
        agent.report(tasks[0].remediation_id, RemedyReport("reset", "done", ""))
        agent.report(tasks[0].remediation_id, verified())
        clock.t += MIN
        sample(store, clock.t, "node-3", 0)
        act.reconcile_once()
        clock.t += timedelta(days=3)
    results = [r["result"] for r in reversed(store.remediations.page()[0])]
    assert results == ["returned", "rma"]  # the second remedy within 30 days (predictor.rules.REPEAT_REMEDIES)
    assert "repeat offender" in (store.remediations.page()[0][0]["detail"] or "")
    assert tasks == []


def test_the_breaker_counts_remedies(store: Store) -> None:
    act, _target, _clock = make(store, breaker=BreakerPolicy(max_fraction=0.25, max_nodes=1))
    score(store, T0, {("node-1", 0): REMAP, ("node-2", 0): REMAP})
    act.reconcile_once()
    started = [h for h in ("node-1", "node-2") if tasks_for(store, h, agent_reboots=False)]
    assert len(started) == 1  # one node of four within the window; the other waits, blocked
    waiting = next(r for r in store.remediations.open() if r["stage"] == "drain")
    assert "breaker" in (waiting["detail"] or "")


def test_a_restart_goes_on_from_the_store(store: Store) -> None:
    act, target, clock = make(store)
    score(store, T0, {("node-1", 0): XID119})
    act.reconcile_once()
    clock.t += MIN
    act.reconcile_once()
    (task,) = tasks_for(store, "node-1", agent_reboots=False)
    again = Actuator(store, target, act.config, now=clock)  # a new process: nothing in memory
    take_report(store, again.remediator, task.remediation_id, RemedyReport("reset", "done", ""), clock.t)
    take_report(store, again.remediator, task.remediation_id, verified(), clock.t)
    clock.t += MIN
    sample(store, clock.t, "node-1", 0)
    again.reconcile_once()
    assert store.remediations.get(task.remediation_id)["result"] == "returned"
    assert len(store.remediations.page()[0]) == 1


def test_dry_run_plans_each_remedy_once_and_keeps_nothing(store: Store) -> None:
    act, _target, clock = make(store, mode="dry-run")
    score(store, T0, {("node-1", 0): XID119})
    act.reconcile_once()
    clock.t += MIN
    act.reconcile_once()
    assert store.remediations.page()[0] == []
    planned = [a for a in actions(store) if a[1] == "reset"]
    assert planned == [("node-1", "reset", "planned")]


def test_a_reboot_goes_through_the_scheduler_and_is_verified(store: Store) -> None:
    act, target, clock = make(store)
    score(store, T0, {("node-0", 1): OFFBUS})
    act.reconcile_once()
    clock.t += MIN
    act.reconcile_once()  # drained: the reboot is asked of the scheduler
    assert target.rebooted == ["node-0"]
    assert tasks_for(store, "node-0", agent_reboots=False) == []  # Slurm's, not the agent's
    clock.t += MIN
    act.reconcile_once()  # back from a new boot: verify
    (task,) = tasks_for(store, "node-0", agent_reboots=False)
    assert task.do == "verify"
    take_report(store, act.remediator, task.remediation_id, verified(), clock.t)
    clock.t += MIN
    sample(store, clock.t, "node-0", 1)
    act.reconcile_once()
    assert store.remediations.get(task.remediation_id)["result"] == "returned"


def test_a_failed_reset_turns_into_a_reboot(store: Store) -> None:
    act, target, clock = make(store)
    score(store, T0, {("node-1", 0): REMAP})
    act.reconcile_once()
    (task,) = tasks_for(store, "node-1", agent_reboots=False)
    take_report(store, act.remediator, task.remediation_id, RemedyReport("reset", "failed", "exit 255"), clock.t)
    r = store.remediations.get(task.remediation_id)
    assert (r["remedy"], r["stage"], r["due"]) == ("reboot", "drain", "now")
    clock.t += MIN
    act.reconcile_once()
    assert target.states == {"node-1": "drain"}


def test_a_remedy_no_longer_asked_for_is_cancelled(store: Store) -> None:
    act, _target, clock = make(store, max_concurrent=0)  # nothing starts: it stays at drain
    score(store, T0, {("node-1", 0): XID119})
    act.reconcile_once()
    clock.t += MIN
    score(store, clock.t, {})
    act.reconcile_once()
    (r,) = store.remediations.page()[0]
    assert r["result"] == "cancelled"


def test_stuck_past_the_deadline_is_counted(store: Store) -> None:
    act, _target, clock = make(store, max_concurrent=0, drain=timedelta(minutes=30))
    score(store, T0, {("node-1", 0): XID119})
    act.reconcile_once()
    clock.t += timedelta(hours=1)
    act.reconcile_once()
    assert act.remediator is not None
    assert act.remediator.stats.stuck == {("reset", "drain"): 1}
    assert "waiting" in (store.remediations.open()[0]["detail"] or "")


def test_causes_since_reads_a_changed_xid_as_new(store: Store) -> None:
    sample(store, T0, "node-1", 0, xid=119.0)
    assert causes_since(store, uuid_of("node-1", 0), T0 + MIN) == (0, [])
    sample(store, T0 + 2 * MIN, "node-1", 0, xid=0.0)
    sample(store, T0 + 3 * MIN, "node-1", 0, xid=119.0)
    n, found = causes_since(store, uuid_of("node-1", 0), T0 + MIN)
    assert n == 2 and found == ["XID 119 since the remedy"]


@pytest.mark.parametrize("bad", [{"recovery_action": 4.0}, {"pcie_link_width": 8.0}])
def test_causes_since_reads_the_newest_state(store: Store, bad: dict[str, float]) -> None:
    sample(store, T0 + MIN, "node-1", 0, **bad)
    assert causes_since(store, uuid_of("node-1", 0), T0)[1]


def test_a_gpu_still_lost_after_its_reboot_goes_to_rma(store: Store) -> None:
    act, target, clock = make(store)
    score(store, T0, {("node-0", 1): OFFBUS})
    act.reconcile_once()
    clock.t += MIN
    act.reconcile_once()  # the reboot
    clock.t += MIN
    act.reconcile_once()  # back from it: verify
    (r,) = store.remediations.open()
    assert r["stage"] == "verify" and target.rebooted == ["node-0"]
    store.gpus.upsert([{"uuid": uuid_of("node-0", 1), "hostname": "node-0", "gpu_index": 1, "model_name": MODEL,
                        "state": "lost", "seen_at": clock.t}])  # fmt: skip
    act.reconcile_once()  # not yet: the collector may still find it
    assert store.remediations.get(r["id"])["stage"] == "verify"
    clock.t += timedelta(minutes=10)
    act.reconcile_once()
    done = store.remediations.get(r["id"])
    assert done["result"] == "rma" and "still lost after the reboot" in (done["detail"] or "")
