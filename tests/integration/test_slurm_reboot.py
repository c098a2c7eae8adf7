"""A reboot through Slurm on a real cluster: `scontrol reboot ASAP nextstate=RESUME`, with a RebootProgram that
restarts the node's slurmd with `-b` (tests/integration/slurm_reboot_program.py), so the node comes back
from a "new boot" as a real one would."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from actuate.slurm import RebootStage, SlurmTarget
from actuate.target import NotOurs, Reboot
from tests.integration.slurm_cluster import SlurmCluster, start_slurm_cluster

pytestmark = pytest.mark.integration

REBOOT_PROGRAM = f"{sys.executable} {Path(__file__).with_name('slurm_reboot_program.py')}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """Three nodes whose RebootProgram restarts the node's own slurmd."""
    with start_slurm_cluster(tmp_path_factory.mktemp("slurm-reboot"), reboot_program=REBOOT_PROGRAM) as c:
        yield c


@pytest.fixture
def target(cluster: SlurmCluster) -> SlurmTarget:
    return SlurmTarget(scontrol=cluster.tools["scontrol"], squeue=cluster.tools["squeue"], env=cluster.env)


def stages_until_done(target: SlurmTarget, host: str, asked: Reboot, deadline_s: float = 40.0) -> list[RebootStage]:
    """Every stage the reboot goes through, in order, until it is done (or failed)."""
    seen: list[RebootStage] = []
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        stage = target.reboot_stage(host, asked)
        if not seen or seen[-1] != stage:
            seen.append(stage)
        if stage in ("done", "failed"):
            return seen
        time.sleep(0.1)
    return seen


def test_a_reboot_waits_for_the_job_then_returns_the_node(cluster: SlurmCluster, target: SlurmTarget) -> None:
    """Drained at once (no new jobs), rebooted once idle, back in service with a new boot and no reason."""
    job = cluster.submit("sleep 4", nodelist="gh-node-1")
    cluster.wait_for(lambda: cluster.job_state(job) == "RUNNING", 15, "the job running")
    boot_before = cluster.node("gh-node-1")["BootTime"]
    asked = target.reboot("gh-node-1", "GPU 0\nXID 79\x1b: fell off the bus")
    assert asked.boot_id_before == boot_before and not asked.done
    node = cluster.node("gh-node-1")
    assert node["State"] == "MIXED+DRAIN+REBOOT_REQUESTED" and node["NextState"] == "RESUME"
    assert node["Reason"] == "gpuhealth: reboot GPU 0 XID 79: fell off the bus"  # printable()
    assert target.reboot_stage("gh-node-1", asked) == "requested"
    waiting = cluster.submit("true", nodelist="gh-node-1")  # no new work on a node that waits for its reboot
    again = target.reboot("gh-node-1", "asked twice")  # idempotent: pending, not asked again
    assert again.boot_id_before == boot_before
    assert cluster.node("gh-node-1")["Reason"].startswith("gpuhealth: reboot GPU 0")
    assert cluster.job_state(job) == "RUNNING" and cluster.job_state(waiting) == "PENDING"

    stages = stages_until_done(target, "gh-node-1", asked)
    assert stages == ["requested", "issued", "done"]
    assert cluster.job_state(job) == "COMPLETED"
    node = cluster.node("gh-node-1")
    # IDLE+PLANNED: the backfill scheduler has already planned the waiting job there
    assert node["State"] in ("IDLE", "IDLE+PLANNED", "MIXED", "ALLOCATED"), node["State"]
    assert node["Reason"] == "" and "NextState" not in node
    assert node["BootTime"] != boot_before
    assert target.reboot_status("gh-node-1", asked).done
    log = cluster.slurmctld.report_path.read_text()
    assert log.count("reboot request queued for nodes gh-node-1") == 1
    assert "rebooted by RebootProgram" in (cluster.workdir / "log" / "slurmd-gh-node-1.out").read_text()
    # back in service: the job that waited runs there
    cluster.wait_for(lambda: cluster.job_state(waiting) == "COMPLETED", 15, "the waiting job done on gh-node-1")


def test_an_admins_drain_is_not_rebooted_and_ours_is(cluster: SlurmCluster, target: SlurmTarget) -> None:
    cluster.scontrol("update", "NodeName=gh-node-2", "State=DRAIN", "Reason=admin: BIOS update")
    try:
        with pytest.raises(NotOurs, match=r"gh-node-2: drained by someone else \(admin: BIOS update\)"):
            target.reboot("gh-node-2", "GPU 1 fell off the bus")
        node = cluster.node("gh-node-2")
        assert node["State"] == "IDLE+DRAIN" and node["Reason"] == "admin: BIOS update"
    finally:
        cluster.scontrol("update", "NodeName=gh-node-2", "State=RESUME")
    # the remediation loop drains first (our reason), then reboots: the drain is Slurm's to lift now
    assert target.drain("gh-node-3", "drain", "GPU 1 fell off the bus")
    asked = target.reboot("gh-node-3", "GPU 1 fell off the bus")
    assert cluster.node("gh-node-3")["State"] == "IDLE+DRAIN+REBOOT_REQUESTED"
    assert stages_until_done(target, "gh-node-3", asked)[-1] == "done"
    node = cluster.node("gh-node-3")
    assert node["State"] == "IDLE" and node["Reason"] == "" and node["BootTime"] != asked.boot_id_before


def test_a_reboot_can_leave_the_node_down_for_a_check_before_return(cluster: SlurmCluster, target: SlurmTarget) -> None:
    """nextstate=DOWN (22.05 has no DRAIN there): back from a new boot, out of service with our reason."""
    asked = target.reboot("gh-node-2", "GPU 1 XID 79", resume=False)
    try:
        assert stages_until_done(target, "gh-node-2", asked) == ["requested", "issued", "done"]
        node = cluster.node("gh-node-2")
        assert node["State"] == "DOWN" and node["BootTime"] != asked.boot_id_before
        assert node["Reason"] == "gpuhealth: reboot GPU 1 XID 79 : reboot issued : reboot complete"
    finally:
        cluster.scontrol("update", "NodeName=gh-node-2", "State=RESUME")
