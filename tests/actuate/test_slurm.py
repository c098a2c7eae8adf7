"""Reading `scontrol show node -o` and what the Slurm client makes of a node (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

from actuate.plan import Step
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


def tool(tmp_path: Path, name: str, out: bytes) -> str:
    """A stand-in for scontrol or squeue: prints `out` as it is, keeps its arguments (one per line)."""
    (tmp_path / f"{name}.out").write_bytes(out)
    path = tmp_path / name
    path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {tmp_path}/{name}.args\ncat {tmp_path}/{name}.out\n')
    path.chmod(0o755)
    return str(path)


def test_bytes_that_are_not_utf8_are_read_not_fatal(tmp_path: Path) -> None:
    """A job named r\\xe9sum\\xe9 (any user can) or an admin's Latin-1 drain reason is read, not a crash."""
    admin = LINE.format(avail="reliable", state="IDLE+DRAIN", weight=1, reason="Reason=r\xe9sum\xe9 [root@x] ")
    target = SlurmTarget(
        scontrol=tool(tmp_path, "scontrol", admin.encode("latin-1") + b"\n"),
        squeue=tool(tmp_path, "squeue", b"42|alice|r\xe9sum\xe9\n"),
    )
    (observed,) = target.observe().values()
    assert observed.foreign == "drained: r\ufffdsum\ufffd"
    assert target.workloads("gh-node-2") == ["job 42 (alice, r\ufffdsum\ufffd)"]


def test_control_characters_never_reach_scontrol(tmp_path: Path) -> None:
    target = SlurmTarget(scontrol=tool(tmp_path, "scontrol", node().name.encode()))
    why = "GPU 1 rma: row\nremap\x1b[31m failure\x00\u202e"
    target._drain_state(node(), Step("gh-node-2", "ok", "rma", why))
    args = (tmp_path / "scontrol.args").read_text().splitlines()
    assert args[-1] == "Reason=gpuhealth: rma GPU 1 rma: row remap[31m failure"
