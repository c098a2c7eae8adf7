"""The remediation loop on a real Slurm cluster: a GPU off the bus drains its node, Slurm reboots it (its
RebootProgram restarts that node's slurmd with a new boot), the node stays out until the GPU is verified,
then returns to service, every step in the audit."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from actuate.breaker import BreakerPolicy
from actuate.slurm import SlurmTarget
from core.remedies import ProbeResult, RemedyReport
from service.actuator import Actuator, ActuatorConfig
from service.remediation import RemediationConfig
from service.remedy_tasks import take_report, tasks_for
from store import Store
from tests.integration.slurm_cluster import SlurmCluster, start_slurm_cluster
from tests.service.test_remediation import OFFBUS, sample, score

pytestmark = pytest.mark.integration

REBOOT_PROGRAM = f"{sys.executable} {Path(__file__).with_name('slurm_reboot_program.py')}"
HOSTS = ["gh-node-1", "gh-node-2", "gh-node-3"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with start_slurm_cluster(tmp_path_factory.mktemp("slurm-remedy"), reboot_program=REBOOT_PROGRAM) as c:
        yield c


def now() -> datetime:
    return datetime.now(UTC)


def test_off_the_bus_drain_reboot_verify_return(cluster: SlurmCluster, store: Store) -> None:
    target = SlurmTarget(scontrol=cluster.tools["scontrol"], squeue=cluster.tools["squeue"], env=cluster.env)
    config = ActuatorConfig(mode="on", breaker=BreakerPolicy(max_fraction=1.0, max_nodes=10),
                            remediation=RemediationConfig())  # fmt: skip
    act = Actuator(store, target, config, now=now)
    job = cluster.submit("sleep 3", nodelist="gh-node-2")
    cluster.wait_for(lambda: cluster.job_state(job) == "RUNNING", 15, "the job running")
    boot_before = cluster.node("gh-node-2")["BootTime"]
    score(store, now(), {("gh-node-2", 1): OFFBUS}, HOSTS)
    act.reconcile_once()  # our drain; the job goes on
    assert cluster.node("gh-node-2")["State"] == "MIXED+DRAIN"
    act.reconcile_once()  # the drain holds: the reboot is asked of Slurm, once the job is done
    (r,) = store.remediations.open()
    assert r["stage"] == "remedy" and r["reboot"] is not None
    assert "REBOOT_REQUESTED" in cluster.node("gh-node-2")["State"]
    assert tasks_for(store, "gh-node-2", agent_reboots=False) == []  # Slurm's reboot, not the agent's

    def stage() -> str | None:
        act.reconcile_once()
        return store.remediations.get(r["id"])["stage"]

    cluster.wait_for(lambda: stage() == "verify", 60, "the node back from its reboot")
    assert cluster.job_state(job) == "COMPLETED"
    node = cluster.node("gh-node-2")
    assert node["BootTime"] != boot_before
    act.reconcile_once()  # back DOWN from the reboot: our drain is put back until the GPU is verified
    assert "DRAIN" in cluster.node("gh-node-2")["State"] or cluster.node("gh-node-2")["State"] == "DOWN"
    (task,) = tasks_for(store, "gh-node-2", agent_reboots=False)
    assert task.do == "verify"
    passed = RemedyReport("verify", "done", "3 probes", probes=(ProbeResult("gemm", True),))
    assert take_report(store, act.remediator, task.remediation_id, passed, now()) is not None
    time.sleep(0.01)
    sample(store, now(), "gh-node-2", 1)
    act.reconcile_once()  # verified: returned
    assert store.remediations.get(r["id"])["result"] == "returned"
    act.reconcile_once()  # our drain lifted at once (no settle hour after a verified return)
    # slurmd restarted by the reboot: NOT_RESPONDING until slurmctld's next ping reaches it
    cluster.wait_for(lambda: cluster.node("gh-node-2")["State"] in ("IDLE", "IDLE+PLANNED"), 30, "gh-node-2 idle")
    assert cluster.node("gh-node-2")["Reason"] == ""
    rows, _ = store.actuation.actions(hostname="gh-node-2", limit=100)
    steps = [(a["action"], a["result"]) for a in reversed(rows)]
    for step in (("drain", "applied"), ("reboot", "applied"), ("verify", "applied"), ("return", "applied"),
                 ("release", "applied")):  # fmt: skip
        assert step in steps, (step, steps)
    assert steps.index(("reboot", "applied")) < steps.index(("verify", "applied")) < steps.index(("return", "applied"))
