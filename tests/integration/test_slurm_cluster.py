"""The Slurm test cluster behaves as Slurm 22.05 does on a real fleet, for what the actuator relies on.

Features decide where `--constraint=reliable` jobs may run, Weight where jobs go first, a drain
lets running jobs finish (MIXED+DRAIN, then IDLE+DRAIN), drains survive a controller restart
(features and weight changes do not), and slurmd runs HealthCheckProgram every interval.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.conftest import require_tool
from tests.integration.slurm_cluster import SlurmCluster, leftover_processes, start_slurm_cluster
from tests.integration.slurm_conf import RELIABLE_FEATURE

pytestmark = pytest.mark.integration

SHORT_JOB = "sleep 2"
"""Long enough to see a job RUNNING and a node draining, short enough to wait for its end."""
HEALTH_CHECK_INTERVAL_S = 2


def wait_job(cluster: SlurmCluster, job_id: str, *states: str, timeout: float = 15.0) -> str:
    """Wait until the job is in one of `states`; return that state."""
    return cluster.wait_for(
        lambda: (state := cluster.job_state(job_id)) in states and state, timeout, f"job {job_id} in {states}"
    )


def test_nodes_are_up_with_gpus_and_features(slurm: SlurmCluster) -> None:
    """Every node registered IDLE with the configured GPUs, feature and weight; GPUs are allocated."""
    assert slurm.nodes == ["gh-node-1", "gh-node-2", "gh-node-3"]
    for name in slurm.nodes:
        node = slurm.node(name)
        assert node["State"] == "IDLE"
        assert node["Gres"] == "gpu:h100:2"
        assert node["AvailableFeatures"] == node["ActiveFeatures"] == RELIABLE_FEATURE
        assert node["Weight"] == "1"
        assert node["Reason"] == ""
    as_json = slurm.node_json("gh-node-1")
    assert (as_json["state"], as_json["state_flags"], as_json["reason"]) == ("idle", [], "")
    assert (as_json["features"], as_json["active_features"], as_json["weight"]) == ("reliable", "reliable", 1)

    # The GPUs are schedulable: two on a node are taken by one job, so a third request waits.
    both = slurm.submit(SHORT_JOB, nodelist="gh-node-3", extra=["--gres=gpu:h100:2"])
    wait_job(slurm, both, "RUNNING")
    one_more = slurm.submit("true", nodelist="gh-node-3", extra=["--gres=gpu:1"])
    slurm.wait_for(lambda: slurm.job(one_more)["Reason"] == "Resources", 30, "GPU job waiting for resources")


def test_constraint_follows_feature_updates(slurm: SlurmCluster) -> None:
    """A node without `reliable` takes plain jobs but no reliable ones, which go to the other nodes."""
    job = slurm.submit(SHORT_JOB, constraint=RELIABLE_FEATURE)
    wait_job(slurm, job, "RUNNING")
    assert slurm.job(job)["NodeList"] in slurm.nodes

    x = "gh-node-2"
    held = slurm.submit("true", constraint=RELIABLE_FEATURE, nodelist=x, extra=["--hold"])
    # Clear both: `Features=` (AvailableFeatures) alone is refused, since ActiveFeatures must stay a subset
    # of AvailableFeatures; clearing ActiveFeatures alone keeps reliable jobs off X too but leaves `reliable` listed.
    slurm.scontrol("update", f"NodeName={x}", "AvailableFeatures=", "ActiveFeatures=")
    node = slurm.node(x)
    assert (node["AvailableFeatures"], node["ActiveFeatures"]) == ("(null)", "")
    assert slurm.node("gh-node-1")["ActiveFeatures"] == RELIABLE_FEATURE

    # A job already queued for X stays pending; a new one is refused at submission.
    slurm.scontrol("release", held)
    slurm.wait_for(lambda: slurm.job(held)["Reason"] == "BadConstraints", 10, "held job pending on BadConstraints")
    refused = slurm.try_submit("true", constraint=RELIABLE_FEATURE, nodelist=x)
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr

    plain = slurm.submit(SHORT_JOB, nodelist=x)
    wait_job(slurm, plain, "RUNNING")
    elsewhere = slurm.submit("true", constraint=RELIABLE_FEATURE)
    wait_job(slurm, elsewhere, "RUNNING", "COMPLETED")
    assert slurm.job(elsewhere)["NodeList"] != x
    assert slurm.job_state(held) == "PENDING"

    # The scheduler set the pending job's priority to 0: even once the feature is back it waits for
    # slurmctld's periodic pass (about 30 s here), so the actuator cannot count on a prompt restart.
    assert slurm.job(held)["Priority"] == "0"

    # With `reliable` on no node at all, sbatch refuses every reliable job outright.
    slurm.scontrol("update", f"NodeName={','.join(slurm.nodes)}", "AvailableFeatures=", "ActiveFeatures=")
    refused = slurm.try_submit("true", constraint=RELIABLE_FEATURE)
    assert refused.returncode != 0
    assert "Requested node configuration is not available" in refused.stderr


def test_weight_update_steers_jobs(slurm: SlurmCluster) -> None:
    """scontrol sets Weight on several nodes at once; jobs go to the lowest weight first."""
    slurm.scontrol("update", "NodeName=gh-node-1,gh-node-3", "Weight=100")
    assert [slurm.node(n)["Weight"] for n in slurm.nodes] == ["100", "1", "100"]
    job = slurm.submit("true")
    wait_job(slurm, job, "RUNNING", "COMPLETED")
    assert slurm.job(job)["NodeList"] == "gh-node-2"


def test_drain_lets_the_running_job_finish(slurm: SlurmCluster) -> None:
    """DRAIN: MIXED+DRAIN (sinfo: draining) while the job runs, IDLE+DRAIN (drained) after; RESUME: IDLE."""
    x = "gh-node-1"
    job = slurm.submit(SHORT_JOB, nodelist=x)
    wait_job(slurm, job, "RUNNING")
    reason = "gpuhealth: xid 79 on gpu 3 (fell off the bus)"
    slurm.scontrol("update", f"NodeName={x}", "State=DRAIN", f"Reason={reason}")

    node = slurm.node(x)
    assert node["State"] == "MIXED+DRAIN"
    assert node["Reason"] == reason
    assert node["ReasonUser"] == "root"
    assert slurm.sinfo_state(x) == "draining"
    as_json = slurm.node_json(x)
    assert (as_json["state"], as_json["state_flags"], as_json["reason"]) == ("mixed", ["DRAIN"], reason)
    assert slurm.job_state(job) == "RUNNING"
    blocked = slurm.submit("true", nodelist=x)

    wait_job(slurm, job, "COMPLETED")
    slurm.wait_for(lambda: slurm.node(x)["State"] == "IDLE+DRAIN", 5, f"{x} drained")
    assert slurm.sinfo_state(x) == "drained"
    assert slurm.job_state(blocked) == "PENDING"

    slurm.scontrol("update", f"NodeName={x}", "State=RESUME")
    wait_job(slurm, blocked, "RUNNING", "COMPLETED")
    slurm.wait_for(lambda: slurm.node(x)["State"] == "IDLE", 5, f"{x} idle again")
    assert slurm.node(x)["Reason"] == ""


def test_controller_restart_keeps_drains_not_features_or_weight(slurm: SlurmCluster) -> None:
    """After a restart (Debian's unit: no -R) drains, reasons and running jobs survive; features and weight revert."""
    drained, featureless, heavy = slurm.nodes
    job = slurm.submit("sleep 30", nodelist=drained)
    wait_job(slurm, job, "RUNNING")
    slurm.scontrol("update", f"NodeName={drained}", "State=DRAIN", "Reason=gpuhealth: test drain")
    slurm.scontrol("update", f"NodeName={featureless}", "AvailableFeatures=", "ActiveFeatures=")
    slurm.scontrol("update", f"NodeName={heavy}", "Weight=50")

    slurm.restart_controller()
    assert slurm.node(drained)["State"] == "MIXED+DRAIN"
    assert slurm.node(drained)["Reason"] == "gpuhealth: test drain"
    assert slurm.job_state(job) == "RUNNING"
    # slurm.conf wins: whoever changed features or weight must apply them again after a restart.
    assert slurm.node(featureless)["AvailableFeatures"] == RELIABLE_FEATURE
    assert slurm.node(heavy)["Weight"] == "1"

    # With -R (full state recovery) features survive too; weight still comes from slurm.conf.
    slurm.scontrol("update", f"NodeName={featureless}", "AvailableFeatures=", "ActiveFeatures=")
    slurm.scontrol("update", f"NodeName={heavy}", "Weight=50")
    slurm.restart_controller(recover_full_state=True)
    assert slurm.node(drained)["Reason"] == "gpuhealth: test drain"
    assert slurm.node(featureless)["AvailableFeatures"] == "(null)"
    assert slurm.node(heavy)["Weight"] == "1"


def health_check_script(path: Path, conf: Path, scontrol: str) -> None:
    """A HealthCheckProgram that logs each run and drains its node while a file named `trigger` exists."""
    path.write_text(
        f"""#!/bin/sh
# slurmd gives a health check only PWD and SLURMD_NODENAME: PATH and SLURM_CONF are the script's to set.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export SLURM_CONF={conf}
echo "$(date +%s.%N) $SLURMD_NODENAME" >> {path.parent}/runs.log
if [ -e {path.parent}/trigger ]; then
  {scontrol} update NodeName="$SLURMD_NODENAME" State=DRAIN Reason="healthcheck: $(cat {path.parent}/trigger)"
fi
"""
    )
    path.chmod(0o755)


def test_health_check_program_drains_within_its_interval(tmp_path: Path) -> None:
    """slurmd runs HealthCheckProgram at start and every interval; stop() leaves no process behind."""
    hc_dir = tmp_path / "hc"
    hc_dir.mkdir()
    script = hc_dir / "healthcheck.sh"
    # The script needs the conf path before the cluster exists: it is always workdir/slurm.conf.
    workdir = tmp_path / "cluster"
    workdir.mkdir()
    health_check_script(script, workdir.resolve() / "slurm.conf", require_tool("scontrol"))
    cluster = start_slurm_cluster(
        workdir, nodes=1, health_check_program=str(script), health_check_interval=HEALTH_CHECK_INTERVAL_S
    )
    with cluster:
        (x,) = cluster.nodes
        runs = hc_dir / "runs.log"
        assert runs.exists(), "slurmd runs the health check once at startup"
        assert cluster.node(x)["State"] == "IDLE"

        (hc_dir / "trigger").write_text("xid 79")
        started = time.monotonic()
        cluster.wait_for(lambda: "DRAIN" in cluster.node(x)["State"], HEALTH_CHECK_INTERVAL_S + 5, f"{x} drained")
        assert time.monotonic() - started <= HEALTH_CHECK_INTERVAL_S + 3
        assert cluster.node(x)["Reason"] == "healthcheck: xid 79"
        assert {line.split()[1] for line in runs.read_text().splitlines()} == {x}

        (hc_dir / "trigger").unlink()
        cluster.scontrol("update", f"NodeName={x}", "State=RESUME")
        job = cluster.submit("sleep 60")  # left running: stop() must take it down too
        wait_job(cluster, job, "RUNNING")

    assert leftover_processes(cluster) == []
    assert not any(d.alive() for d in cluster.daemons())
