"""The remediation loop's reboot on Kubernetes, end to end on the API server of tests/kube_api.py: our
drain, the node agent (collector.remediate, in-process) writing kured's sentinel for its task, a kured
stand-in (tests/kured.py) rebooting the node, the loop seeing the new bootID, the agent's probes, and our
cordon lifted once the GPU is verified."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from actuate.breaker import BreakerPolicy
from actuate.kubernetes import KubeTarget, client_for
from collector.backends.sim import SimBackend
from collector.remediate import RemedyAgent
from predictor.policy import decision_changes
from service.actuator import Actuator, ActuatorConfig
from service.remediation import RemediationConfig
from service.remedy_tasks import LocalRemedies, tasks_for
from store import Store
from tests.fleet_decisions import MODEL, T0, Clock
from tests.kube_api import KubeApiServer
from tests.kured import SENTINEL, Kured
from tests.service.test_remediation import OFFBUS, sample

MIN = timedelta(minutes=1)


@pytest.fixture
def sim() -> SimBackend:
    return SimBackend(nodes=1, gpus_per_node=2, seed=1)


@pytest.fixture
def kube(sim: SimBackend) -> Iterator[KubeApiServer]:
    host = sim.gpus()[0].hostname
    with KubeApiServer() as server:
        server.add_node(host, labels={"nvidia.com/gpu.present": "true"})
        server.add_pod("gpuhealth", "collector", host, gpus=0, controller="collector", controller_kind="DaemonSet")
        server.add_pod("train", "job", host, gpus=1)
        yield server


def test_a_gpu_off_the_bus_is_rebooted_by_kured_verified_and_uncordoned(
    store: Store, sim: SimBackend, kube: KubeApiServer, tmp_path: Path
) -> None:
    gpu = sim.gpus()[1]
    host = gpu.hostname
    store.gpus.upsert([{"uuid": g.uuid, "hostname": host, "gpu_index": g.index, "model_name": MODEL, "seen_at": T0}
                       for g in sim.gpus()])  # fmt: skip
    d, remedy, when, line = OFFBUS
    store.decisions.write_scores(
        [{"gpu_uuid": g.uuid, "hostname": host, "model_name": MODEL, "risk": 0.1,
          **({"decision": d, "reasons": [line], "remedy": remedy, "remedy_when": when} if g == gpu
             else {"decision": "ok", "reasons": [], "remedy": "none", "remedy_when": "idle"})}
         for g in sim.gpus()], T0, rule=decision_changes)  # fmt: skip
    target = KubeTarget(client_for(kube.url, timeout_s=2.0))
    clock = Clock(T0)
    config = ActuatorConfig(mode="on", breaker=BreakerPolicy(1.0, 100), remediation=RemediationConfig())
    act = Actuator(store, target, config, now=clock)
    run = tmp_path / "run"
    run.mkdir()
    agent = RemedyAgent(LocalRemedies(store, act.remediator, clock), sim, reboot_sentinel=run / SENTINEL)
    kured = Kured(kube, client_for(kube.url, timeout_s=2.0), {host: run})

    act.reconcile_once()  # our drain: cordoned, the GPU pod evicted
    assert kube.node(host)["spec"]["unschedulable"] is True
    clock.t += MIN
    act.reconcile_once()  # the drain holds: the boot before is kept, the agent is asked for kured's sentinel
    (r,) = store.remediations.open()
    assert r["stage"] == "remedy" and r["reboot"] is not None
    assert [t.do for t in tasks_for(store, host, agent_reboots=True)] == ["reboot"]
    assert kured.check(host) == "not required"
    agent.run_once()
    assert (run / SENTINEL).exists()
    assert kured.check(host) == "rebooting"
    clock.t += MIN
    act.reconcile_once()  # down, not back yet
    assert store.remediations.get(r["id"])["stage"] == "remedy"
    kured.boot(host)  # a new bootID; kured leaves our cordon
    clock.t += MIN
    act.reconcile_once()
    assert store.remediations.get(r["id"])["stage"] == "verify"
    assert kube.node(host)["spec"]["unschedulable"] is True
    agent.run_once()  # the agent's probes on that GPU
    verified = store.remediations.get(r["id"])["verified"]
    assert verified is not None and verified["result"] == "done" and verified["probes"], verified
    clock.t += MIN
    sample(store, clock.t, host, gpu.index, uuid=gpu.uuid)
    act.reconcile_once()
    assert store.remediations.get(r["id"])["result"] == "returned"
    clock.t += MIN
    act.reconcile_once()  # our cordon lifted at once
    assert not kube.node(host)["spec"].get("unschedulable")
    rows, _ = store.actuation.actions(hostname=host, limit=100)
    assert [a["action"] for a in reversed(rows) if a["result"] == "applied"] == [
        "drain", "reboot", "verify", "return", "release"]  # fmt: skip
