"""A node reboot on Kubernetes through kured, end to end on the API server of tests/kube_api.py: the node agent
writes kured's sentinel (collector/reboot.py), a kured stand-in (tests/kured.py) cordons, evicts, reboots and
uncordons as kured does, and KubeTarget sees the reboot done by the node's new bootID."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from actuate.breaker import BreakerPolicy
from actuate.kubernetes import BOOT_ID, CORDONED_ANNOTATION, STATE_LABEL, KubeTarget, client_for
from collector.reboot import RebootSentinel
from service.actuator import Actuator, ActuatorConfig
from store import Store
from tests.fleet_decisions import T0, Clock, set_decisions
from tests.kube_api import KubeApiServer
from tests.kured import SENTINEL, Kured

HOSTS = ["gpu-1", "gpu-2"]


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        for h in HOSTS:
            server.add_node(h, labels={"nvidia.com/gpu.present": "true"})
            server.add_pod(
                "gpuhealth", f"collector-{h}", h, gpus=0, controller="collector", controller_kind="DaemonSet"
            )
        server.add_pod("train", "job", "gpu-1", gpus=1)
        server.add_pod("web", "frontend", "gpu-1", gpus=0, labels={"app": "frontend"}, controller="frontend")
        yield server


@pytest.fixture
def run_dirs(tmp_path: Path) -> dict[str, Path]:
    """Each node's /var/run, as kured and the node agent (its hostPath mounted) see it."""
    dirs = {h: tmp_path / h / "run" for h in HOSTS}
    for d in dirs.values():
        d.mkdir(parents=True)
    return dirs


def node_agent(kube: KubeApiServer, run_dirs: dict[str, Path], host: str) -> RebootSentinel:
    """The node agent of `host`: it reads the boot id the kernel gives, which the kubelet reports as bootID."""
    return RebootSentinel(
        run_dirs[host] / SENTINEL, host, boot_id=lambda: str(kube.node(host)["status"]["nodeInfo"]["bootID"])
    )


def pods(kube: KubeApiServer, host: str) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in kube.pods(host)]


def actuator(store: Store, target: KubeTarget, clock: Clock) -> Actuator:
    config = ActuatorConfig(mode="on", breaker=BreakerPolicy(1.0, 100), settle=timedelta(hours=1))
    return Actuator(store, target, config, now=clock)


def test_kured_reboots_a_node_we_drained_and_leaves_our_cordon_to_us(
    store: Store, kube: KubeApiServer, run_dirs: dict[str, Path]
) -> None:
    target = KubeTarget(client_for(kube.url, timeout_s=2.0))
    clock = Clock()
    act = actuator(store, target, clock)
    set_decisions(store, T0, HOSTS, {("gpu-1", 0): "drain"})
    act.reconcile_once()  # our drain: cordon (ours), the GPU pod evicted
    assert pods(kube, "gpu-1") == ["gpuhealth/collector-gpu-1", "web/frontend"]
    boot = target.observe()["gpu-1"].detail[BOOT_ID]
    assert isinstance(boot, str)
    asked = target.reboot_record("gpu-1")  # what the remediation loop keeps
    assert asked.boot_id_before == boot

    agent = node_agent(kube, run_dirs, "gpu-1")
    assert agent.request("GPU 0 reboot: XID 79, fallen off the bus") is True
    kured = Kured(kube, client_for(kube.url, timeout_s=2.0), run_dirs)
    assert kured.check("gpu-2") == "not required"
    assert not target.rebooted_since(target.observe()["gpu-1"], boot)

    assert kured.check("gpu-1") == "rebooting"
    assert kured.lock is not None and kured.lock.unschedulable  # our cordon was there when kured took its lock
    assert pods(kube, "gpu-1") == ["gpuhealth/collector-gpu-1"]  # kured drains all but DaemonSet pods
    assert not target.rebooted_since(target.observe()["gpu-1"], boot)  # down, not rebooted yet
    assert not target.reboot_status("gpu-1", asked).done
    kured.boot("gpu-1")
    assert target.rebooted_since(target.observe()["gpu-1"], boot) and target.reboot_status("gpu-1", asked).done
    assert agent.state() == "absent" and kured.lock is None  # /var/run is a tmpfs; the lock let go
    node = kube.node("gpu-1")
    assert node["spec"]["unschedulable"] is True  # kured uncordons only what it cordoned
    assert node["metadata"]["annotations"][CORDONED_ANNOTATION] == "true"
    assert node["metadata"]["labels"][STATE_LABEL] == "drain"

    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []  # nothing of ours was undone: nothing to redo
    set_decisions(store, clock.t, HOSTS, {})  # verified: the decision is ok again
    act.reconcile_once()  # the settle clock starts
    clock.t += timedelta(hours=1)
    (o,) = act.reconcile_once().outcomes
    assert (o.step.action, o.result) == ("release", "applied")
    assert not kube.node("gpu-1")["spec"].get("unschedulable")  # returned by us, not by kured


def test_kured_uncordons_a_node_it_cordoned_itself(kube: KubeApiServer, run_dirs: dict[str, Path]) -> None:
    target = KubeTarget(client_for(kube.url, timeout_s=2.0))
    boot = target.observe()["gpu-1"].detail[BOOT_ID]
    assert isinstance(boot, str)
    assert node_agent(kube, run_dirs, "gpu-1").request("GPU 0 reboot") is True
    kured = Kured(kube, client_for(kube.url, timeout_s=2.0), run_dirs)
    assert kured.check("gpu-1") == "rebooting"
    assert kube.node("gpu-1")["spec"]["unschedulable"] is True
    assert pods(kube, "gpu-1") == ["gpuhealth/collector-gpu-1"]
    new = kured.boot("gpu-1")
    assert new != boot and target.rebooted_since(target.observe()["gpu-1"], boot)
    assert not kube.node("gpu-1")["spec"]["unschedulable"]


def test_a_failed_kured_drain_lifts_our_cordon_and_our_next_pass_restores_it(
    store: Store, kube: KubeApiServer, run_dirs: dict[str, Path]
) -> None:
    """kured's best-effort uncordon after a failed drain does not look at what its lock recorded: it lifts
    our cordon too. Our next pass finds the drained node schedulable and cordons it again."""
    kube.add_pdb("web", "frontend", {"app": "frontend"}, min_available=1)  # kured's drain cannot evict it
    target = KubeTarget(client_for(kube.url, timeout_s=2.0))
    clock = Clock()
    act = actuator(store, target, clock)
    set_decisions(store, T0, HOSTS, {("gpu-1", 0): "drain"})
    act.reconcile_once()
    node_agent(kube, run_dirs, "gpu-1").request("GPU 0 reboot")
    kured = Kured(kube, client_for(kube.url, timeout_s=2.0), run_dirs)
    assert kured.check("gpu-1") == "drain failed"
    assert not kube.node("gpu-1")["spec"]["unschedulable"]  # kured lifted our cordon

    clock.t += timedelta(minutes=1)
    (o,) = act.reconcile_once().outcomes
    assert (o.step.from_state, o.step.to_state, o.result) == ("drain", "drain", "applied")
    node = kube.node("gpu-1")
    assert node["spec"]["unschedulable"] is True and node["metadata"]["annotations"][CORDONED_ANNOTATION] == "true"
    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []
