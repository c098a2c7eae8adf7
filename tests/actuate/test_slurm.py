"""Reading `scontrol show node -o` and what the Slurm client makes of a node (no cluster needed)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from actuate.plan import Step
from actuate.slurm import DEMOTED_FEATURE, SlurmNode, SlurmTarget, parse_node_line
from actuate.target import NotOurs, Reboot

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


T = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
BOOT = "2026-12-01T00:00:00"
OURS = "Reason=gpuhealth: reboot GPU 0 XID 79 [root@x] "


def test_reboot_flags_boot_time_and_next_state_as_slurm_22_05_prints_them() -> None:
    requested = node(state="MIXED+DRAIN+REBOOT_REQUESTED", reason=f"NextState=RESUME {OURS}")
    assert (requested.reboot_pending, requested.next_state, requested.boot_time) == ("requested", "RESUME", BOOT)
    assert requested.our_drain == "drain"
    issued = node(
        state="DOWN+DRAIN+REBOOT_ISSUED", reason="NextState=RESUME Reason=gpuhealth: reboot : reboot issued [root@x] "
    )
    assert (issued.reboot_pending, issued.reason) == ("issued", "gpuhealth: reboot : reboot issued")
    assert (node().reboot_pending, node().next_state, node(state="IDLE+PLANNED").reboot_pending) == (None, "", None)


def scontrol(tmp_path: Path, state: str, reason: str = "", boot: str = BOOT) -> SlurmTarget:
    """A target whose scontrol shows gh-node-2 so (whatever it is asked) and keeps its arguments."""
    line = LINE.format(avail="reliable", state=state, weight=1, reason=reason).replace(BOOT, boot)
    return SlurmTarget(scontrol=tool(tmp_path, "scontrol", line.encode() + b"\n"))


def asked_reboot(tmp_path: Path) -> bool:
    return "reboot" in (tmp_path / "scontrol.args").read_text().splitlines()


def test_a_reboot_is_asked_with_our_reason_as_arguments(tmp_path: Path) -> None:
    target = scontrol(tmp_path, "MIXED")
    assert target.reboot("gh-node-2", "GPU 0\nXID 79\x1b[31m: off the bus\u202e", now=T) == Reboot(T, BOOT, done=False)
    args = (tmp_path / "scontrol.args").read_text().splitlines()
    assert args[-5:] == ["reboot", "ASAP", "nextstate=RESUME", "reason=gpuhealth: reboot GPU 0 XID 79[31m: off the bus",
                         "gh-node-2"]  # fmt: skip
    target.reboot("gh-node-2", "XID 79", resume=False)  # kept DOWN for a check before return
    assert (tmp_path / "scontrol.args").read_text().splitlines()[-3] == "nextstate=DOWN"


@pytest.mark.parametrize("state", ["MIXED+DRAIN+REBOOT_REQUESTED", "DOWN+DRAIN+REBOOT_ISSUED"])
def test_a_pending_reboot_is_not_asked_again(tmp_path: Path, state: str) -> None:
    target = scontrol(tmp_path, state, f"NextState=RESUME {OURS}")
    assert target.reboot("gh-node-2", "asked again", now=T) == Reboot(T, BOOT)
    assert not asked_reboot(tmp_path)


def test_a_node_someone_else_drained_is_not_rebooted(tmp_path: Path) -> None:
    target = scontrol(tmp_path, "IDLE+DRAIN", "Reason=NHC: check_hw_ib failed [slurm@x] ")
    with pytest.raises(NotOurs, match=r"gh-node-2: drained by someone else \(NHC: check_hw_ib failed\)"):
        target.reboot("gh-node-2", "GPU 0 XID 79")
    assert not asked_reboot(tmp_path)
    ours = scontrol(tmp_path, "IDLE+DRAIN", "Reason=gpuhealth: drain GPU 0 XID 79 [root@x] ")
    ours.reboot("gh-node-2", "GPU 0 XID 79")  # our own drain: the reboot goes ahead
    assert asked_reboot(tmp_path)


@pytest.mark.parametrize(
    ("state", "boot", "stage"),
    [
        ("MIXED+DRAIN+REBOOT_REQUESTED", BOOT, "requested"),
        ("DOWN+DRAIN+REBOOT_ISSUED", BOOT, "issued"),
        ("IDLE", "2026-12-07T06:02:40", "done"),
        ("IDLE+PLANNED", "2026-12-07T06:02:40", "done"),
        ("DOWN", "2026-12-07T06:02:40", "done"),  # nextstate=DOWN
        ("DOWN", BOOT, "failed"),  # ResumeTimeout passed: DOWN, "reboot timed out"
        ("IDLE", BOOT, "failed"),  # `scontrol cancel_reboot`
    ],
)
def test_where_a_reboot_stands(tmp_path: Path, state: str, boot: str, stage: str) -> None:
    target = scontrol(tmp_path, state, boot=boot)
    asked = Reboot(T, BOOT)
    assert target.reboot_stage("gh-node-2", asked) == stage
    assert target.reboot_status("gh-node-2", asked) == Reboot(T, BOOT, done=stage == "done")
