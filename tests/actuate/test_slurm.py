"""Reading `scontrol show node -o` and what the Slurm client makes of a node (no cluster needed)."""

from __future__ import annotations

from actuate.slurm import DEMOTED_FEATURE, SlurmNode, SlurmTarget, parse_node_line

LINE = (
    "NodeName=gh-node-2 Arch=x86_64 CoresPerSocket=1 CPUAlloc=1 CPUEfctv=4 CPUTot=4 CPULoad=0.00 "
    "AvailableFeatures={avail} ActiveFeatures={avail} Gres=gpu:h100:2 NodeAddr=127.0.0.1 "
    "OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC RealMemory=1 State={state} ThreadsPerCore=1 Weight={weight} "
    "Partitions=gpu BootTime=2026-12-01T00:00:00 {reason}Comment=(null)"
)


def node(avail: str = "reliable", state: str = "IDLE", weight: int = 1, reason: str = "") -> SlurmNode:
    return parse_node_line(LINE.format(avail=avail, state=state, weight=weight, reason=reason))


def test_fields_states_features_and_reasons() -> None:
    n = node()
    assert (n.name, n.state, n.weight, n.available, n.reason, n.drained) == (
        "gh-node-2", "IDLE", 1, ("reliable",), "", False)  # fmt: skip
    reason = "Reason=gpuhealth: rma GPU 1 rma: a=b [root@2026-12-01T01:00:00] "
    ours = node("gpuhealth_demoted", "MIXED+DRAIN", 1000, reason)
    assert (ours.reason, ours.drained, ours.our_drain) == ("gpuhealth: rma GPU 1 rma: a=b", True, "rma")
    theirs = node(state="IDLE+DRAIN", reason="Reason=NHC: check_hw_ib failed [slurm@2026-12-01T01:00:00] ")
    assert (theirs.drained, theirs.our_drain) == (True, None)
    assert node("(null)").available == ()


def test_what_a_node_says_in_our_terms() -> None:
    target = SlurmTarget(unmanaged=["gh-node-9"])
    assert target._observed(node()).ours == "ok"
    assert target._observed(node("reliable,gpuhealth_watch")).ours == "watch"
    demoted = target._observed(node(DEMOTED_FEATURE, weight=1000))
    assert (demoted.ours, demoted.pending) == ("demote", False)
    # our drain survived a slurmctld restart but slurm.conf's features came back: apply again
    restarted = target._observed(node("reliable", "IDLE+DRAIN", 1, "Reason=gpuhealth: drain GPU 0 [root@x] "))
    assert (restarted.ours, restarted.pending, restarted.foreign) == ("drain", True, None)
    admin = target._observed(node(state="IDLE+DRAIN", reason="Reason=bios update [root@x] "))
    assert (admin.ours, admin.foreign) == ("ok", "drained: bios update")
