"""The actuator on Kubernetes, through lightkube, against the API server of tests/kube_api.py:
labels, the demote taint, cordon and evictions (a PodDisruptionBudget's 429 retried, never forced),
409 conflicts, someone else's cordon, opt-out, events, and an API server that goes away."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa
from lightkube.resources.policy_v1 import PodDisruptionBudget

from actuate.breaker import BreakerPolicy
from actuate.kubernetes import (
    BOOT_ID,
    CORDONED_ANNOTATION,
    DEMOTED_TAINT,
    DRAIN_ANNOTATION,
    GPU_LABEL,
    READY,
    REASON_ANNOTATION,
    STATE_LABEL,
    KubeTarget,
    client_for,
)
from actuate.plan import Step
from actuate.target import TargetError, TargetUnavailable
from service.actuator import Actuator, ActuatorConfig
from store import Store
from store.schema import T_GPUS
from tests.fleet_decisions import T0, Clock, set_decisions, uuid_of
from tests.kube_api import KubeApiServer

HOSTS = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
LENIENT = BreakerPolicy(max_fraction=1.0, max_nodes=100)


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        for h in HOSTS:
            server.add_node(h, labels={"nvidia.com/gpu.present": "true"})
        yield server


def actuator(store: Store, kube: KubeApiServer, clock: Clock, breaker: BreakerPolicy = LENIENT) -> Actuator:
    target = KubeTarget(client_for(kube.url, timeout_s=2.0), unmanaged=["gpu-4"])
    return Actuator(store, target, ActuatorConfig(mode="on", breaker=breaker, settle=timedelta(hours=1)), now=clock)


def taint_keys(node: dict) -> list[str]:
    return [t["key"] for t in node["spec"].get("taints", [])]


def test_watch_demote_drain_rma_as_labels_taint_cordon_and_evictions(store: Store, kube: KubeApiServer) -> None:
    kube.add_pod("train", "job-a", "gpu-2", gpus=1)
    kube.add_pod("serve", "infer-b", "gpu-3", gpus=1)
    kube.add_pod("kube-system", "node-exporter", "gpu-3", gpus=0)
    clock = Clock()
    act = actuator(store, kube, clock)
    set_decisions(store, T0, HOSTS, {("gpu-1", 0): "watch", ("gpu-2", 1): "demote", ("gpu-3", 0): "rma"})
    report = act.reconcile_once()
    assert {o.step.hostname: o.result for o in report.outcomes} == {
        "gpu-1": "applied", "gpu-2": "applied", "gpu-3": "applied"}  # fmt: skip
    n1, n2, n3 = (kube.node(h) for h in HOSTS[:3])
    assert n1["metadata"]["labels"][STATE_LABEL] == "watch" and "taints" not in n1["spec"]
    assert n2["metadata"]["labels"][STATE_LABEL] == "demote" and taint_keys(n2) == [DEMOTED_TAINT["key"]]
    assert not n2["spec"].get("unschedulable") and [p["metadata"]["name"] for p in kube.pods("gpu-2")] == ["job-a"]
    assert n3["metadata"]["labels"][STATE_LABEL] == "rma" and n3["metadata"]["labels"]["gpuhealth.io/rma"] == "true"
    assert n3["spec"]["unschedulable"] is True and n3["metadata"]["annotations"][CORDONED_ANNOTATION] == "true"
    assert n3["metadata"]["annotations"][REASON_ANNOTATION] == "GPU 0 rma: row remap failure"
    assert n3["metadata"]["annotations"][DRAIN_ANNOTATION] == "complete"
    assert [p["metadata"]["name"] for p in kube.pods("gpu-3")] == ["node-exporter"]  # only GPU pods evicted
    audit = {r["hostname"]: r for r in store.actuation.actions()[0]}
    assert audit["gpu-3"]["workloads"] == ["kube-system/node-exporter", "serve/infer-b (gpu)"]
    events = {(e["involvedObject"]["name"], e["reason"]) for e in kube.events}
    assert events == {("gpu-1", "GpuHealthWatch"), ("gpu-2", "GpuHealthDemote"), ("gpu-3", "GpuHealthRma")}
    # a second pass reads the nodes and writes nothing
    kube.reset_counts()
    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []
    assert {k: v for k, v in kube.counts.items() if k[0] != "LIST"} == {}


def test_a_disruption_budget_holds_the_drain_pending_until_it_allows(store: Store, kube: KubeApiServer) -> None:
    kube.add_pod("serve", "infer-0", "gpu-1", labels={"app": "infer"}, controller="infer-rs")
    kube.add_pod("serve", "infer-1", "gpu-2", labels={"app": "infer"}, controller="infer-rs")
    kube.add_pdb("serve", "infer", {"app": "infer"}, min_available=2)
    clock = Clock()
    act = actuator(store, kube, clock)
    set_decisions(store, T0, HOSTS, {("gpu-1", 0): "drain"})
    (o,) = act.reconcile_once().outcomes
    assert o.result == "pending" and "serve/infer-0" in (o.error or "")
    assert kube.node("gpu-1")["metadata"]["annotations"][DRAIN_ANNOTATION] == "pending"
    assert len(kube.pods("gpu-1")) == 1  # never deleted instead
    clock.t += timedelta(minutes=1)
    (again,) = act.reconcile_once().outcomes
    assert (again.step.from_state, again.result) == ("drain", "pending")
    client_for(kube.url).delete(PodDisruptionBudget, "infer", namespace="serve")
    clock.t += timedelta(minutes=1)
    (done,) = act.reconcile_once().outcomes
    assert done.result == "applied" and kube.pods("gpu-1") == []
    assert kube.node("gpu-1")["metadata"]["annotations"][DRAIN_ANNOTATION] == "complete"
    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []


def test_a_conflict_is_read_again_and_applied(store: Store, kube: KubeApiServer) -> None:
    act = actuator(store, kube, Clock())
    set_decisions(store, T0, HOSTS, {("gpu-1", 0): "demote"})
    kube.fail_next_patches(2)
    (o,) = act.reconcile_once().outcomes
    assert o.result == "applied" and taint_keys(kube.node("gpu-1")) == [DEMOTED_TAINT["key"]]
    assert kube.counts[("GET", "nodes")] == 2  # read again after each 409


def test_someone_elses_cordon_and_taints_stay_and_opted_out_nodes_are_untouched(
    store: Store, kube: KubeApiServer
) -> None:
    kube.add_node("gpu-5", labels={"gpuhealth.io/managed": "false"})
    other = {"key": "maintenance", "value": "true", "effect": "NoSchedule"}
    kube.add_node("gpu-6", taints=[other], unschedulable=True)
    hosts = [*HOSTS, "gpu-5", "gpu-6"]
    clock = Clock()
    act = actuator(store, kube, clock)
    set_decisions(store, T0, hosts, {("gpu-4", 0): "rma", ("gpu-5", 0): "rma", ("gpu-6", 0): "drain"})
    report = act.reconcile_once()
    assert [o.step.hostname for o in report.outcomes] == ["gpu-6"]  # gpu-4 listed unmanaged, gpu-5 labelled
    n6 = kube.node("gpu-6")
    assert sorted(taint_keys(n6)) == sorted([DEMOTED_TAINT["key"], "maintenance"])
    assert CORDONED_ANNOTATION not in n6["metadata"]["annotations"]  # the cordon is not ours
    clock.t += timedelta(hours=1)
    set_decisions(store, clock.t, hosts, {})
    assert act.reconcile_once().outcomes == []  # the settle clock starts
    clock.t += timedelta(hours=1)
    (o,) = act.reconcile_once().outcomes
    assert o.step.action == "release"
    n6 = kube.node("gpu-6")
    assert n6["spec"]["unschedulable"] is True and taint_keys(n6) == ["maintenance"]
    assert STATE_LABEL not in n6["metadata"]["labels"]
    assert kube.node("gpu-4")["metadata"]["labels"] == {"nvidia.com/gpu.present": "true"}


def test_ours_is_lifted_whole_after_recovery(store: Store, kube: KubeApiServer) -> None:
    kube.add_pod("train", "job", "gpu-1")
    clock = Clock()
    act = actuator(store, kube, clock)
    set_decisions(store, T0, HOSTS, {("gpu-1", 0): "drain"})
    act.reconcile_once()
    clock.t += timedelta(hours=2)
    set_decisions(store, clock.t, HOSTS, {})
    act.reconcile_once()  # the settle clock starts
    clock.t += timedelta(hours=1)
    (o,) = act.reconcile_once().outcomes
    assert (o.step.action, o.result) == ("release", "applied")
    n = kube.node("gpu-1")
    assert not n["spec"].get("unschedulable") and not n["spec"].get("taints")
    assert not any(k.startswith("gpuhealth.io/") for k in n["metadata"].get("labels", {}))
    assert not any(k.startswith("gpuhealth.io/") for k in n["metadata"].get("annotations", {}))


def test_api_server_down_then_back_converges(store: Store, kube: KubeApiServer) -> None:
    clock = Clock()
    act = actuator(store, kube, clock)
    set_decisions(store, T0, HOSTS, {("gpu-1", 0): "drain", ("gpu-2", 0): "demote"})
    kube.set_down(True)
    with pytest.raises(TargetUnavailable, match="unreachable"):
        act.reconcile_once()
    kube.set_down(False)
    clock.t += timedelta(minutes=1)
    assert len(act.reconcile_once().outcomes) == 2
    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []
    applied = [r for r in store.actuation.actions()[0] if r["result"] == "applied"]
    assert sorted(r["hostname"] for r in applied) == ["gpu-1", "gpu-2"]  # each once


def test_the_breaker_stops_drains_past_its_bound(store: Store, kube: KubeApiServer) -> None:
    for i in range(5, 13):
        kube.add_node(f"gpu-{i}")
    hosts = [f"gpu-{i}" for i in range(1, 13)]
    act = actuator(store, kube, Clock(), BreakerPolicy(max_fraction=0.5, max_nodes=2))
    set_decisions(store, T0, hosts, {(h, 0): "drain" for h in hosts if h != "gpu-4"})
    report = act.reconcile_once()
    assert sum(o.result == "applied" for o in report.outcomes) == 2 and report.breaker_open
    cordoned = [h for h in hosts if kube.node(h)["spec"].get("unschedulable")]
    assert len(cordoned) == 2


def test_control_characters_never_reach_annotations_or_events(kube: KubeApiServer) -> None:
    """A decision's reasons are data we did not write: no line break, escape, NUL or direction
    override gets into the node's annotation or its Event (kubectl describe shows them as they are)."""
    target = KubeTarget(client_for(kube.url, timeout_s=2.0))
    step = Step("gpu-1", "ok", "drain", "GPU 0 drain: row\nremap\x1b[2J pending\x00\u202e", "GPU-gpu-1-0", 0)
    assert target.apply(step, target.observe()["gpu-1"], None).result == "applied"
    target.announce(step, "applied", "note\r\x07")
    assert kube.node("gpu-1")["metadata"]["annotations"][REASON_ANNOTATION] == "GPU 0 drain: row remap[2J pending"
    (event,) = kube.events
    assert event["message"] == "ok → drain (applied): GPU 0 drain: row remap[2J pending; note "


@pytest.mark.parametrize("stored", [-1, None], ids=["minus-one", "null"])
def test_a_gpu_of_unknown_index_is_demoted_and_said_unknown(
    store: Store, kube: KubeApiServer, stored: int | None
) -> None:
    """Issue 55.3: the label gpuhealth.io/gpu=-1 was refused with 422 at every pass: the node never demoted."""
    set_decisions(store, T0, HOSTS[:2], {("gpu-1", 0): "demote"})
    with store._db.tx(write=True) as conn:  # what an exporter without gpu/device labels left in an older store
        conn.execute(sa.update(T_GPUS).where(T_GPUS.c.uuid == uuid_of("gpu-1", 0)).values(gpu_index=stored))
    report = actuator(store, kube, Clock()).reconcile_once()
    assert [(o.step.hostname, o.result) for o in report.outcomes] == [("gpu-1", "applied")]
    labels = kube.node("gpu-1")["metadata"]["labels"]
    assert labels[STATE_LABEL] == "demote" and labels[GPU_LABEL] == "unknown"


def test_each_nodes_boot_id_is_read_and_a_reboot_told_only_once_it_happened(kube: KubeApiServer) -> None:
    """The service sees a reboot done when the node's status.nodeInfo.bootID has changed and the node is Ready."""
    target = KubeTarget(client_for(kube.url, timeout_s=2.0))
    seen = target.observe()
    before = seen["gpu-1"].detail[BOOT_ID]
    assert before == kube.node("gpu-1")["status"]["nodeInfo"]["bootID"]
    assert len({o.detail[BOOT_ID] for o in seen.values()}) == len(HOSTS) and seen["gpu-1"].detail[READY] is True
    assert not target.rebooted_since(seen["gpu-1"], before)
    kube.set_node_ready("gpu-1", "Unknown")  # going down: the kubelet is silent, the boot the same
    down = target.observe()["gpu-1"]
    assert down.detail[READY] is False and not target.rebooted_since(down, before)
    after = kube.reboot_node("gpu-1", ready="False")  # a new boot, the node not Ready yet
    back = target.observe()["gpu-1"]
    assert back.detail[BOOT_ID] == after != before and not target.rebooted_since(back, before)
    kube.set_node_ready("gpu-1", "True")
    assert target.rebooted_since(target.observe()["gpu-1"], before)
    assert not target.rebooted_since(target.observe()["gpu-2"], seen["gpu-2"].detail[BOOT_ID])
    assert not target.rebooted_since(target.observe()["gpu-1"], "")  # never read: cannot tell


def test_a_reboot_record_keeps_the_boot_id_before_and_says_done_after(kube: KubeApiServer) -> None:
    """The Reboot record the remediation loop keeps, as the Slurm target's (actuate.target.Reboot)."""
    target = KubeTarget(client_for(kube.url, timeout_s=2.0))
    asked = target.reboot_record("gpu-1", now=T0)
    assert (asked.requested_at, asked.boot_id_before, asked.done) == (
        T0, kube.node("gpu-1")["status"]["nodeInfo"]["bootID"], False)  # fmt: skip
    assert target.reboot_status("gpu-1", asked) == asked
    kube.reboot_node("gpu-1", ready="False")
    assert target.reboot_status("gpu-1", asked).done is False  # back, not Ready
    kube.set_node_ready("gpu-1", "True")
    done = target.reboot_status("gpu-1", asked)
    assert done.done is True and done.boot_id_before == asked.boot_id_before
    with pytest.raises(TargetError, match="gpu-9"):
        target.reboot_record("gpu-9")
