"""The actuator against a real Slurm cluster (slurmctld, three slurmd, munge on loopback).

A demoted node keeps running plain jobs but refuses reliable ones; a drain lets the running job
finish; our drain is resumed after recovery and an admin's is left alone; the breaker stops drains
past its bound; a slurmctld restart mid-run is healed; and slurmd itself runs
`gpuhealth slurm-healthcheck` as its HealthCheckProgram, which drains the node.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from actuate.breaker import BreakerPolicy
from actuate.slurm import DEMOTED_FEATURE, SlurmTarget
from actuate.target import TargetUnavailable
from service.actuator import Actuator, ActuatorConfig
from store import Store
from tests.fleet_decisions import T0, Clock, set_decisions
from tests.integration.conftest import free_port, poll, start_service
from tests.integration.slurm_cluster import SlurmCluster, start_slurm_cluster
from tests.integration.slurm_conf import RELIABLE_FEATURE

pytestmark = pytest.mark.integration

LENIENT = BreakerPolicy(max_fraction=1.0, max_nodes=100)


def actuator(store: Store, slurm: SlurmCluster, clock: Clock, breaker: BreakerPolicy = LENIENT) -> Actuator:
    target = SlurmTarget(scontrol=slurm.tools["scontrol"], squeue=slurm.tools["squeue"], env=slurm.env)
    config = ActuatorConfig(mode="on", breaker=breaker, settle=timedelta(hours=1))
    return Actuator(store, target, config, now=clock)


def features(slurm: SlurmCluster, node: str) -> set[str]:
    return {f for f in slurm.node(node)["AvailableFeatures"].split(",") if f and f != "(null)"}


def test_a_demoted_node_runs_plain_jobs_but_not_reliable_ones(slurm: SlurmCluster, store: Store) -> None:
    clock = Clock()
    act = actuator(store, slurm, clock)
    set_decisions(store, T0, slurm.nodes, {("gh-node-1", 1): "demote"})
    (o,) = act.reconcile_once().outcomes
    assert (o.step.hostname, o.result) == ("gh-node-1", "applied")
    node = slurm.node("gh-node-1")
    assert features(slurm, "gh-node-1") == {DEMOTED_FEATURE} and node["Weight"] == "1000"
    assert "DRAIN" not in node["State"]
    plain = slurm.submit("sleep 1", nodelist="gh-node-1")
    slurm.wait_for(lambda: slurm.job_state(plain) in ("RUNNING", "COMPLETED"), 15, "a plain job runs")
    pinned = slurm.try_submit("true", constraint=RELIABLE_FEATURE, nodelist="gh-node-1")
    assert pinned.returncode != 0 and "Requested node configuration is not available" in pinned.stderr
    for _ in range(3):  # reliable work goes elsewhere, whichever node is free
        job = slurm.submit("sleep 1", constraint=RELIABLE_FEATURE)
        slurm.wait_for(lambda j=job: slurm.job_state(j) in ("RUNNING", "COMPLETED"), 15, "a reliable job runs")
        assert slurm.job(job)["NodeList"] in ("gh-node-2", "gh-node-3")
    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []  # idempotent: nothing to change


def test_a_drain_lets_the_running_job_finish(slurm: SlurmCluster, store: Store) -> None:
    job = slurm.submit("sleep 4", nodelist="gh-node-2")
    slurm.wait_for(lambda: slurm.job_state(job) == "RUNNING", 15, "job running")
    act = actuator(store, slurm, Clock())
    set_decisions(store, T0, slurm.nodes, {("gh-node-2", 1): "rma"})
    (o,) = act.reconcile_once().outcomes
    assert o.result == "applied" and o.workloads and o.workloads[0].startswith(f"job {job} ")
    node = slurm.node("gh-node-2")
    assert node["State"] in ("MIXED+DRAIN", "ALLOCATED+DRAIN")  # draining: the job goes on
    assert node["Reason"].startswith("gpuhealth: rma GPU 1 rma: row remap failure")
    assert slurm.job_state(job) == "RUNNING"
    slurm.wait_for(lambda: slurm.node("gh-node-2")["State"] == "IDLE+DRAIN", 20, "drained after the job")
    assert slurm.job_state(job) == "COMPLETED"
    (row,) = store.actuation.actions()[0]
    assert row["workloads"] == list(o.workloads)


def test_ours_is_resumed_after_recovery_and_an_admins_drain_is_left_alone(slurm: SlurmCluster, store: Store) -> None:
    slurm.scontrol("update", "NodeName=gh-node-3", "State=DRAIN", "Reason=admin: BIOS update")
    clock = Clock()
    act = actuator(store, slurm, clock)
    set_decisions(store, T0, slurm.nodes, {("gh-node-1", 0): "drain", ("gh-node-3", 0): "drain"})
    act.reconcile_once()
    assert slurm.node("gh-node-1")["Reason"].startswith("gpuhealth: drain GPU 0")
    assert slurm.node("gh-node-3")["Reason"] == "admin: BIOS update"  # not overwritten
    clock.t += timedelta(hours=1)
    set_decisions(store, clock.t, slurm.nodes, {})  # both repaired
    act.reconcile_once()  # the settle clock starts
    clock.t += timedelta(hours=1)
    steps = {o.step.hostname: o.result for o in act.reconcile_once().outcomes}
    assert steps == {"gh-node-1": "applied", "gh-node-3": "applied"}  # gh-node-3: our features only
    slurm.wait_for(lambda: slurm.node("gh-node-1")["State"] == "IDLE", 15, "gh-node-1 resumed")
    one, three = slurm.node("gh-node-1"), slurm.node("gh-node-3")
    assert features(slurm, "gh-node-1") == {RELIABLE_FEATURE} and one["Weight"] == "1"
    assert "DRAIN" in three["State"] and three["Reason"] == "admin: BIOS update"
    assert features(slurm, "gh-node-3") == {RELIABLE_FEATURE} and three["Weight"] == "1"
    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []


def test_the_breaker_stops_the_drain_past_its_bound(slurm: SlurmCluster, store: Store) -> None:
    act = actuator(store, slurm, Clock(), BreakerPolicy())  # 3 nodes: 10 % rounds to the floor of 1 per hour
    set_decisions(store, T0, slurm.nodes, {(n, 0): "drain" for n in slurm.nodes})
    report = act.reconcile_once()
    assert [o.result for o in report.outcomes] == ["applied", "blocked", "blocked"] and report.breaker_open
    assert sum("DRAIN" in slurm.node(n)["State"] for n in slurm.nodes) == 1
    assert store.actuation.breaker("slurm")["breaker_open"]


def test_a_job_named_with_a_latin1_byte_stops_nothing(slurm: SlurmCluster, store: Store) -> None:
    """Any user can name a job r\\xe9sum\\xe9 (and an admin write a Latin-1 drain reason): the pass reads it,
    drains every node it must in that pass, and audits each; it used to raise after draining, auditing none."""
    latin1 = "r\udce9sum\udce9"  # sbatch gets the byte 0xe9 itself (os.fsencode)
    job = slurm.submit("sleep 30", nodelist="gh-node-1", extra=[f"--job-name={latin1}"])
    slurm.wait_for(lambda: slurm.job_state(job) == "RUNNING", 15, "the job running")
    slurm.scontrol("update", "NodeName=gh-node-3", "State=DRAIN", f"Reason=admin: {latin1}")
    act = actuator(store, slurm, Clock())
    set_decisions(store, T0, slurm.nodes, {(n, 0): "drain" for n in slurm.nodes})
    report = act.reconcile_once()
    assert {o.step.hostname: o.result for o in report.outcomes} == dict.fromkeys(slurm.nodes, "applied")
    rows = {r["hostname"]: r for r in store.actuation.actions()[0]}
    assert {h: r["result"] for h, r in rows.items()} == dict.fromkeys(slurm.nodes, "applied")
    assert rows["gh-node-1"]["workloads"] == [f"job {job} (root, r\ufffdsum\ufffd)"]
    assert "someone else (admin: r\ufffdsum\ufffd)" in (rows["gh-node-3"]["error"] or "")
    assert all("DRAIN" in slurm.node(n)["State"] for n in slurm.nodes)
    assert act.state.last_error is None and len(store.actuation.escalated_nodes("slurm", T0)) == 3


def test_slurmctld_restarted_mid_run_converges(slurm: SlurmCluster, store: Store) -> None:
    clock = Clock()
    act = actuator(store, slurm, clock)
    set_decisions(store, T0, slurm.nodes, {("gh-node-1", 0): "demote", ("gh-node-2", 0): "drain"})
    act.reconcile_once()
    slurm.stop_controller()
    try:
        clock.t += timedelta(minutes=1)
        with pytest.raises(TargetUnavailable):
            act.reconcile_once()
    finally:
        slurm.start_controller()
    # slurm.conf's features and weight came back; our drain and its reason survived in the state save
    assert features(slurm, "gh-node-1") == {RELIABLE_FEATURE} and slurm.node("gh-node-1")["Weight"] == "1"
    assert slurm.node("gh-node-2")["Reason"].startswith("gpuhealth: drain")
    clock.t += timedelta(minutes=1)
    report = act.reconcile_once()
    assert sorted((o.step.hostname, o.result) for o in report.outcomes) == [
        ("gh-node-1", "applied"), ("gh-node-2", "applied")]  # fmt: skip
    assert not any(o.step.escalates and o.step.hostname != "gh-node-1" for o in report.outcomes)
    assert features(slurm, "gh-node-1") == {DEMOTED_FEATURE} and features(slurm, "gh-node-2") == {DEMOTED_FEATURE}
    clock.t += timedelta(minutes=1)
    assert act.reconcile_once().outcomes == []
    drains = [r for r in store.actuation.actions(hostname="gh-node-2")[0] if r["result"] == "applied"]
    assert [r["from_state"] for r in reversed(drains)] == ["ok", "drain"]  # drained once, features put back once


def test_slurmd_runs_the_health_check_and_it_drains_the_node(tmp_path: Path) -> None:
    """slurmd itself runs `gpuhealth slurm-healthcheck`, which asks a running `gpuhealth serve` and drains."""
    db = tmp_path / "svc.db"
    decisions = Store.open(f"sqlite:///{db}")
    set_decisions(decisions, T0, ["gh-node-1", "gh-node-2"], {})  # all well while the cluster starts
    port = free_port()
    cmd = [sys.executable, "-m", "gpuhealth.cli", "serve", "--no-collector", "--db", f"sqlite:///{db}",
           "--listen", f"127.0.0.1:{port}"]  # fmt: skip
    svc = start_service("gpuhealth serve", cmd, f"http://127.0.0.1:{port}", "/readyz", tmp_path / "serve.log")
    workdir = tmp_path / "slurm"
    workdir.mkdir()
    script = tmp_path / "healthcheck.sh"
    gpuhealth = Path(sys.executable).with_name("gpuhealth")
    # slurmd runs it as root with neither PATH nor SLURM_CONF (only SLURMD_NODENAME): both set here.
    script.write_text(
        "#!/bin/sh\nexport PATH=/usr/sbin:/usr/bin:/sbin:/bin\n"
        f'exec {gpuhealth} slurm-healthcheck --service-url http://127.0.0.1:{port} --node "$SLURMD_NODENAME" '
        f"--slurm-conf {workdir / 'slurm.conf'} >> {tmp_path / 'healthcheck.log'} 2>&1\n"
    )
    script.chmod(0o755)
    try:
        with start_slurm_cluster(workdir, nodes=2, health_check_program=str(script), health_check_interval=2) as c:
            assert c.conf == workdir / "slurm.conf"
            assert "DRAIN" not in c.node("gh-node-1")["State"]
            set_decisions(decisions, T0 + timedelta(minutes=5), ["gh-node-1", "gh-node-2"], {("gh-node-1", 1): "rma"})
            c.wait_for(lambda: "DRAIN" in c.node("gh-node-1")["State"], 30, "gh-node-1 drained by the health check")
            assert c.node("gh-node-1")["Reason"].startswith("gpuhealth: rma GPU 1 rma: row remap failure")
            assert "DRAIN" not in c.node("gh-node-2")["State"]  # all well there: left alone
            log = (tmp_path / "healthcheck.log").read_text()
            assert "gh-node-1: rma, drained now" in log
    finally:
        svc.stop()
        decisions.close()


def test_serve_acts_on_slurm_end_to_end(slurm: SlurmCluster, tmp_path: Path) -> None:
    """The assembled service (`gpuhealth serve --actuate on --actuate-target slurm`) drains a node whose
    GPU must be drained, and says so in /v1/actions and /metrics."""
    db = tmp_path / "svc.db"
    seed = Store.open(f"sqlite:///{db}")
    try:
        set_decisions(seed, T0, slurm.nodes, {("gh-node-2", 1): "rma"})
    finally:
        seed.close()
    port = free_port()
    cmd = [sys.executable, "-m", "gpuhealth.cli", "serve", "--no-collector", "--db", f"sqlite:///{db}",
           "--listen", f"127.0.0.1:{port}", "--actuate", "on", "--actuate-target", "slurm"]  # fmt: skip
    env = {"GPUHEALTH_ACTUATE_INTERVAL": "1s", "GPUHEALTH_SLURM_BIN_DIR": str(Path(slurm.tools["scontrol"]).parent),
           "SLURM_CONF": str(slurm.conf)}  # fmt: skip
    svc = start_service("gpuhealth serve", cmd, f"http://127.0.0.1:{port}", "/readyz", tmp_path / "serve.log", env)
    try:
        slurm.wait_for(lambda: "DRAIN" in slurm.node("gh-node-2")["State"], 20, "gh-node-2 drained by serve")
        assert slurm.node("gh-node-2")["Reason"].startswith("gpuhealth: rma GPU 1")
        assert all("DRAIN" not in slurm.node(n)["State"] for n in ("gh-node-1", "gh-node-3"))
        # The pass records the action after slurmctld took the drain: wait for it too.
        (action,) = poll("the action", lambda: json.loads(svc.get("/v1/actions"))["items"], bool, deadline_s=20)
        assert action["summary"] == "drain gh-node-2: GPU 1 rma (row remap failure)"
        applied = 'gpuhealth_actions_total{action="rma",result="applied",target="slurm"} 1.0'
        poll("the action's metric", lambda: svc.get("/metrics"), lambda text: applied in text, deadline_s=20)
        svc.assert_alive()
    finally:
        svc.stop()
