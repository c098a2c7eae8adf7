"""The files the Slurm test cluster (tests/integration/slurm_cluster.py) runs from: slurm.conf, gres.conf, its
munge key, fake GPUs, and a runtime directory short enough for unix sockets."""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.integration.conftest import unavailable

CPUS_PER_NODE = 4
"""More than a 2-core runner has (config_overrides accepts it): a node can run a few jobs at once."""
GPUS_PER_NODE = 2
GPU_TYPE = "h100"
RELIABLE_FEATURE = "reliable"
"""The feature non-interruptible jobs request with --constraint."""
NODE_PREFIX = "gh-node-"
PARTITION = "gpu"
MAX_SOCKET_PATH = 100
"""Unix socket paths are limited to ~107 bytes (munged's socket, slurmstepd's in the spool dir)."""


def slurm_conf_text(
    *,
    hostname: str,
    runtime_dir: Path,
    workdir: Path,
    nodes: dict[str, int],
    ctld_port: int,
    slurmd_port: int,
    health_check_program: str | None,
    health_check_interval: int,
    prolog: str | None = None,
    epilog: str | None = None,
    reboot_program: str | None = None,
) -> str:
    """slurm.conf for a one-host cluster; `nodes` maps node name to its slurmd port."""
    lines = [
        "ClusterName=ghtest",
        # The name must be this host's (slurmctld checks it is the controller); the address is loopback.
        f"SlurmctldHost={hostname}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={runtime_dir / 'munge' / 'munge.socket'}",
        f"StateSaveLocation={workdir / 'state'}",
        # %n: one spool dir and pid file per slurmd (a multiple-slurmd build expands it).
        f"SlurmdSpoolDir={runtime_dir / 'spool' / '%n'}",
        f"SlurmctldPidFile={workdir / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={workdir / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={workdir / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={workdir / 'log' / 'slurmd-%n.log'}",
        "MailProg=/bin/true",  # the default, /bin/mail, is absent: slurmctld would log an error
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "ReturnToService=2",
        # Nodes claim more CPUs than the host has; slurmd would drain them ("Low CPUs") otherwise.
        "SlurmdParameters=config_overrides",
        # Jobs start within a second of submission (a backfill pass each second; by default the main
        # scheduler defers batch jobs by up to 3 s and backfill runs every 30 s).
        "SchedulerParameters=batch_sched_delay=0,bf_interval=1",
        "KillWait=2",  # a cancelled job gets SIGKILL 2 s after SIGTERM, not 30
        "MessageTimeout=5",
        "GresTypes=gpu",
    ]
    if health_check_program:
        lines += [
            f"HealthCheckProgram={health_check_program}",
            f"HealthCheckInterval={health_check_interval}",
            "HealthCheckNodeState=ANY",
        ]
    if prolog:
        # Run at allocation (not at the job's first step), as GPU bookkeeping wants: an allocation
        # without steps (salloc) holds its GPUs too.
        lines += [f"Prolog={prolog}", "PrologFlags=Alloc"]
    if epilog:
        lines.append(f"Epilog={epilog}")
    if reboot_program:
        # `scontrol reboot` runs it on the node; the node must register with a new boot time within
        # ResumeTimeout (default 60 s) or slurmctld sets it DOWN.
        lines += [f'RebootProgram="{reboot_program}"', "ResumeTimeout=30"]
    for name, port in nodes.items():
        lines.append(
            f"NodeName={name} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={port} CPUs={CPUS_PER_NODE} "
            f"RealMemory=1000 Gres=gpu:{GPU_TYPE}:{GPUS_PER_NODE} Features={RELIABLE_FEATURE} Weight=1 State=UNKNOWN"
        )
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO")
    return "\n".join(lines) + "\n"


def gres_conf_text(dev_dir: Path, nodes: Sequence[str]) -> str:
    """gres.conf: GPUs as empty files (slurmd only stats them), no NVML autodetection."""
    lines = ["AutoDetect=off"]
    lines += [
        f"NodeName={name} Name=gpu Type={GPU_TYPE} File={dev_dir / name}-gpu[0-{GPUS_PER_NODE - 1}]" for name in nodes
    ]
    return "\n".join(lines) + "\n"


def short_runtime_dir(workdir: Path) -> tuple[Path, bool]:
    """`workdir`, or a fresh short temp dir when the socket paths under `workdir` would be too long."""
    longest = workdir / "spool" / f"{NODE_PREFIX}999" / f"{NODE_PREFIX}999_1234567.4294967292"
    if len(str(longest)) <= MAX_SOCKET_PATH:
        return workdir, False
    return Path(tempfile.mkdtemp(prefix="gh-slurm-")), True


def make_gpu(path: Path, device: bool) -> None:
    """A fake GPU: an empty file, or a character device node with /dev/null's numbers (skip when refused)."""
    if not device:
        path.touch()
        return
    path.unlink(missing_ok=True)
    null = os.stat("/dev/null").st_rdev
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, null)
    except PermissionError as err:  # a container without CAP_MKNOD
        unavailable(f"cannot make a device node for a fake GPU: {err}", "CI runs as root, which may mknod")


def write_munge_key(munge_dir: Path) -> Path:
    """A fresh key, readable by its owner only (munged refuses a key others can read)."""
    munge_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = munge_dir / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    return key
