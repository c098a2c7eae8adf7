"""A real Slurm cluster for tests: Debian's slurmctld, slurmd and munged on loopback, in a temp dir.

    with start_slurm_cluster(tmp_dir, nodes=3) as cluster:   # skips locally (fails in CI) without Slurm
        job = cluster.submit("sleep 5", constraint="reliable")
        cluster.scontrol("update", "NodeName=gh-node-1", "State=DRAIN", "Reason=test")
        cluster.node("gh-node-1")["State"]                     # "MIXED+DRAIN" while the job runs
        cluster.restart_controller()                           # same state dir: drains survive

Several nodes on one host: Debian builds Slurm with --enable-multiple-slurmd, so each node is
its own `slurmd -N gh-node-K` with its own Port, all with NodeAddr=127.0.0.1; `%n` in the
spool and pid paths keeps them apart. Each node has 4 CPUs (config_overrides: more than the
host has), Gres=gpu:h100:2 backed by empty files (device nodes with `gpu_devices`), Features=reliable
and Weight=1. Everything runs as root (SlurmUser=root), with its own munged and key, no cgroups, no
accounting; `prolog` and `epilog` set slurm.conf's Prolog (PrologFlags=Alloc) and Epilog.
Ready in about 1-2 s; `stop()` kills every process the cluster started, jobs included.

What is where: this file holds the running cluster (SlurmCluster: commands, controller restarts, logs, shutdown)
and its start; the files it runs from (slurm.conf, gres.conf, munge key, fake GPUs) are written by
tests/integration/slurm_conf.py, and each daemon is a tests/integration/slurm_daemon.py Daemon.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import pytest

from actuate.slurm import scontrol_fields
from tests.integration.conftest import Service, free_port, require_tool, unavailable
from tests.integration.slurm_conf import (
    GPUS_PER_NODE,
    NODE_PREFIX,
    RELIABLE_FEATURE,
    gres_conf_text,
    make_gpu,
    short_runtime_dir,
    slurm_conf_text,
    write_munge_key,
)
from tests.integration.slurm_daemon import Daemon

T = TypeVar("T")

SBIN_DIRS = ("/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin")
"""Debian installs slurmctld, slurmd and munged in /usr/sbin, often not on a non-root PATH."""
STARTUP_DEADLINE_S = 30.0
"""The cluster is up (all nodes IDLE) in 1-2 s here; 30 s absorbs a loaded CI runner."""
POLL_S = 0.1
CMD_TIMEOUT_S = 20.0
MARKER_ENV = "GH_TEST_SLURM_CLUSTER"
"""In every daemon's environment (the cluster's directory): stop() finds leftover slurmstepds by it."""


def parse_scontrol_line(line: str, *, node: bool = False) -> dict[str, str]:
    """Fields of one `scontrol -o show node|job` line, read as the actuator reads them."""
    return scontrol_fields(line, node=node)


def _require_root() -> None:
    """Skip unless root (slurmd and SlurmUser=root need it); fail in CI, which runs as root."""
    if os.geteuid() != 0:
        unavailable("the Slurm test cluster needs root", "slurmd runs jobs as their users")


@dataclass
class SlurmCluster:
    """A running test cluster: one slurmctld, one slurmd per node, one munged; see the module docstring."""

    workdir: Path
    runtime_dir: Path
    """Holds the unix sockets (munged's, slurmstepd's): `workdir`, or a short temp dir when that is too long."""
    conf: Path
    env: dict[str, str]
    """os.environ plus SLURM_CONF: pass it to anything that runs Slurm's commands against this cluster."""
    nodes: list[str]
    ctld_port: int
    tools: dict[str, str]
    """Absolute paths: scontrol, sinfo, squeue, sbatch, scancel, slurmctld, slurmd, munged."""
    munged: Daemon
    slurmctld: Daemon
    slurmds: dict[str, Daemon]
    owns_runtime_dir: bool = False
    stopped: bool = field(default=False, init=False)

    # ---- paths ---------------------------------------------------------------------------------

    @property
    def bin_dir(self) -> Path:
        """Directory of the client commands (scontrol, sinfo, squeue, sbatch)."""
        return Path(self.tools["scontrol"]).parent

    @property
    def scontrol_path(self) -> str:
        return self.tools["scontrol"]

    @property
    def sinfo_path(self) -> str:
        return self.tools["sinfo"]

    @property
    def squeue_path(self) -> str:
        return self.tools["squeue"]

    @property
    def sbatch_path(self) -> str:
        return self.tools["sbatch"]

    @property
    def state_dir(self) -> Path:
        """StateSaveLocation: what survives a controller restart."""
        return self.workdir / "state"

    @property
    def jobs_dir(self) -> Path:
        """Working directory of submitted jobs; slurm-JOBID.out lands here."""
        return self.workdir / "jobs"

    # ---- commands ------------------------------------------------------------------------------

    def run(
        self, tool: str, *args: str, check: bool = True, timeout: float = CMD_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        """Run one of `tools` against this cluster; with `check`, fail (with the daemons' logs) unless it exits 0."""
        cmd = [self.tools.get(tool, tool), *args]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, errors="replace", timeout=timeout, env=self.env, cwd=self.jobs_dir
        )  # a job name or a drain reason may hold any byte
        if check and proc.returncode != 0:
            self.fail(f"{' '.join(cmd)} exited with {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
        return proc

    def scontrol(self, *args: str) -> str:
        """stdout of `scontrol ARGS`; fails unless it exits 0."""
        return self.run("scontrol", *args).stdout

    def node(self, name: str) -> dict[str, str]:
        """`scontrol -o show node NAME` as a dict (22.05's scontrol has no --json); see the comment below."""
        # State is the full string: IDLE, MIXED+DRAIN or ALLOCATED+DRAIN while draining, IDLE+DRAIN when
        # drained. Reason is "" when none, else its text without the " [user@time]" that scontrol appends
        # (those go to ReasonUser and ReasonTime). Cleared features read AvailableFeatures=(null), ActiveFeatures=.
        fields = parse_scontrol_line(self.scontrol("-o", "show", "node", name).strip(), node=True)
        fields.setdefault("Reason", "")
        return fields

    def node_json(self, name: str) -> dict[str, Any]:
        """One node from `sinfo --json` (22.05: state "mixed", state_flags ["DRAIN"], reason, features, weight)."""
        nodes = json.loads(self.run("sinfo", "--json").stdout)["nodes"]
        return next(n for n in nodes if n["name"] == name)

    def sinfo_state(self, name: str) -> str:
        """sinfo's long state of one node: idle, mixed, allocated, draining, drained, down, ..."""
        return self.run("sinfo", "-h", "-N", "-n", name, "-o", "%T").stdout.strip()

    def node_states(self) -> dict[str, str]:
        """sinfo's long state of every node."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T").stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def submit(
        self, wrap: str, *, constraint: str | None = None, nodelist: str | None = None, extra: Sequence[str] = ()
    ) -> str:
        """Job id of `sbatch --parsable --wrap WRAP` (runs as root, output in `jobs_dir`); fails if sbatch refuses."""
        proc = self.run("sbatch", *self._sbatch_args(wrap, constraint, nodelist, extra))
        return proc.stdout.strip().split(";", 1)[0]  # "ID" or "ID;CLUSTER"

    def try_submit(
        self, wrap: str, *, constraint: str | None = None, nodelist: str | None = None, extra: Sequence[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        """sbatch's result as it is, for submissions Slurm may refuse."""
        return self.run("sbatch", *self._sbatch_args(wrap, constraint, nodelist, extra), check=False)

    def _sbatch_args(self, wrap: str, constraint: str | None, nodelist: str | None, extra: Sequence[str]) -> list[str]:
        args = [
            "--parsable",
            f"--output={self.jobs_dir}/slurm-%j.out",
            f"--chdir={self.jobs_dir}",
            "--job-name=gh-test",
        ]
        if constraint is not None:
            args.append(f"--constraint={constraint}")
        if nodelist is not None:
            args.append(f"--nodelist={nodelist}")
        return [*args, *extra, f"--wrap={wrap}"]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol -o show job ID` as a dict (JobState, Reason, NodeList, Features, ...)."""
        return parse_scontrol_line(self.scontrol("-o", "show", "job", job_id).strip())

    def job_state(self, job_id: str) -> str:
        """PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, ..."""
        return self.job(job_id)["JobState"]

    def cancel_all(self) -> None:
        """Cancel every job of the cluster (they run as root)."""
        self.run("scancel", "--user=root", check=False)

    def ping(self) -> bool:
        """Whether `scontrol ping` says the controller is UP."""
        proc = self.run("scontrol", "ping", check=False, timeout=10)
        return proc.returncode == 0 and " is UP" in proc.stdout

    def wait_for(self, predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
        """Call `predicate` until it returns something truthy and return that; fail with the logs at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() > deadline:
                self.fail(f"{what}: not reached within {timeout:g}s; last result: {result!r}")
            time.sleep(POLL_S)

    def reset(self) -> None:
        """Between tests on a shared cluster: cancel jobs, resume nodes, restore features and weight."""
        self.cancel_all()
        self.wait_for(lambda: not self.run("squeue", "-h", "-o", "%i").stdout.strip(), what="all jobs gone")
        names = ",".join(self.nodes)
        for name in self.nodes:
            state = self.node(name)["State"]
            if "DRAIN" in state or "DOWN" in state:
                self.scontrol("update", f"NodeName={name}", "State=RESUME")
        self.scontrol(
            "update", f"NodeName={names}", f"AvailableFeatures={RELIABLE_FEATURE}",
            f"ActiveFeatures={RELIABLE_FEATURE}", "Weight=1",
        )  # fmt: skip
        self.wait_for(self._all_idle, what="all nodes IDLE")

    # ---- controller ----------------------------------------------------------------------------

    def stop_controller(self) -> None:
        """SIGTERM slurmctld (it saves its state first) and wait until it has exited."""
        self.slurmctld.stop()

    def start_controller(self, *, recover_full_state: bool = False) -> None:
        """Start slurmctld on the same state dir (-R with `recover_full_state`); wait for UP and the nodes."""
        # Without -R (Debian's unit runs it so) only DOWN/DRAIN states and their Reasons survive a restart;
        # with -R features do too. Weight changes never survive: slurm.conf's value comes back.
        base = [c for c in self.slurmctld.cmd if c != "-R"]
        self.slurmctld.cmd = [*base, "-R"] if recover_full_state else base
        self.slurmctld.start()
        self.wait_for(lambda: self._alive_or_fail(self.slurmctld) and self.ping(), STARTUP_DEADLINE_S, "slurmctld UP")
        if any(d.alive() for d in self.slurmds.values()):
            # Until each slurmd answers the new controller's registration request, nodes read UNKNOWN.
            self.wait_for(self._all_registered, STARTUP_DEADLINE_S, "all nodes registered")

    def restart_controller(self, *, recover_full_state: bool = False) -> None:
        """Kill slurmctld and start it again with the same state dir (see `start_controller`)."""
        self.stop_controller()
        self.start_controller(recover_full_state=recover_full_state)

    # ---- logs and shutdown ---------------------------------------------------------------------

    def daemons(self) -> list[Daemon]:
        """munged, slurmctld and every slurmd."""
        return [self.munged, self.slurmctld, *self.slurmds.values()]

    def services(self) -> list[Service]:
        """The daemons as conftest Services: conftest's report hook attaches their logs to a failed test."""
        urls = {self.slurmctld.name: f"slurm://127.0.0.1:{self.ctld_port}"}
        found = (d.service(urls.get(d.name, "")) for d in self.daemons())
        return [s for s in found if s is not None]

    def log_tails(self, max_chars: int = 3000) -> str:
        """The end of every daemon's log, for failure messages."""
        return "\n".join(f"--- {d.name} log ({d.report_path}) ---\n{d.log_tail(max_chars)}" for d in self.daemons())

    def fail(self, message: str) -> None:
        """pytest.fail with the daemons' logs appended."""
        pytest.fail(f"{message}\n{self.log_tails()}", pytrace=False)

    def stop(self) -> None:
        """Stop every daemon, kill leftover step daemons and jobs, remove the short temp dir; idempotent."""
        if self.stopped:
            return
        self.stopped = True
        try:
            for daemon in [self.slurmctld, *self.slurmds.values()]:
                if daemon.proc is not None and daemon.proc.poll() is None:
                    daemon.proc.terminate()  # all at once: each takes a moment to exit
            for daemon in [self.slurmctld, *self.slurmds.values()]:
                daemon.stop()
        finally:
            try:
                # slurmstepd daemonizes away from slurmd, and jobs run under it: a stopped slurmd leaves them.
                for pid in leftover_processes(self):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            finally:
                self.munged.stop()
                if self.owns_runtime_dir:
                    shutil.rmtree(self.runtime_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- helpers -------------------------------------------------------------------------------

    def _alive_or_fail(self, daemon: Daemon) -> bool:
        if not daemon.alive():
            code = daemon.proc.returncode if daemon.proc else None
            self.fail(f"{daemon.name} exited with {code}")
        return True

    def _all_registered(self) -> bool:
        states = self.node_states()
        return len(states) == len(self.nodes) and not any("unknown" in s or "*" in s for s in states.values())

    def _all_idle(self) -> bool:
        for daemon in self.slurmds.values():
            self._alive_or_fail(daemon)
        states = self.node_states()
        return len(states) == len(self.nodes) and all(s == "idle" for s in states.values())


def leftover_processes(cluster: SlurmCluster) -> list[int]:
    """Pids of live processes the cluster started: its daemons (by their marker) and its jobs."""
    want_marker = f"{MARKER_ENV}={cluster.slurmctld.env[MARKER_ENV]}".encode()
    want_conf = f"SLURM_CONF={cluster.conf}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile (a zombie reads empty), or not ours to read
            continue
        # slurmstepd inherits slurmd's environment; a job's comes from sbatch, i.e. cluster.env.
        if want_marker in env or (want_conf in env and any(v.startswith(b"SLURM_JOB_ID=") for v in env)):
            pids.append(int(entry.name))
    return pids


def _tools() -> dict[str, str]:
    """Absolute paths of the Slurm and munge binaries; skip locally (fail in CI) when one is missing."""
    names = ["scontrol", "sinfo", "squeue", "sbatch", "scancel", "slurmctld", "slurmd", "munged"]
    return {name: require_tool(name, SBIN_DIRS) for name in names}


def start_slurm_cluster(
    workdir: Path,
    *,
    nodes: int = 3,
    health_check_program: str | None = None,
    health_check_interval: int = 0,
    prolog: str | None = None,
    epilog: str | None = None,
    gpu_devices: bool = False,
    reboot_program: str | None = None,
) -> SlurmCluster:
    """Write the configs, start munged, slurmctld and `nodes` slurmds; return once every node is IDLE."""
    # slurmd runs `health_check_program` as root at its start (before registering) and then every
    # `health_check_interval` s, with PWD and SLURMD_NODENAME as its whole environment: the program
    # must set PATH and SLURM_CONF (always workdir/slurm.conf) itself.
    # `prolog` and `epilog` (absolute paths) are slurm.conf's Prolog (at allocation: PrologFlags=Alloc) and
    # Epilog, run by slurmd as root on the job's node with the job's SLURM_* variables but no PATH.
    # The GPUs are empty files, which slurmd logs as no valid device and then sets neither SLURM_JOB_GPUS nor
    # CUDA_VISIBLE_DEVICES for a job, its prolog or its epilog; with `gpu_devices` they are character device
    # nodes (/dev/null's numbers: never opened) and Slurm sets both, as on a real GPU node.
    # `reboot_program` is slurm.conf's RebootProgram (a command line: tests/integration/slurm_reboot_program.py
    # restarts the node's slurmd with -b, a "reboot"), with ResumeTimeout=30.
    tools = _tools()
    _require_root()
    workdir = Path(workdir).resolve()
    runtime_dir, owns_runtime_dir = short_runtime_dir(workdir)
    for sub in ("state", "run", "jobs", "dev", "log"):
        (workdir / sub).mkdir(parents=True, exist_ok=True)
    names = [f"{NODE_PREFIX}{i}" for i in range(1, nodes + 1)]
    for name in names:
        (runtime_dir / "spool" / name).mkdir(parents=True, exist_ok=True)
        for gpu in range(GPUS_PER_NODE):
            make_gpu(workdir / "dev" / f"{name}-gpu{gpu}", gpu_devices)
    hostname = socket.gethostname().split(".", 1)[0]
    ctld_port = free_port()
    conf = workdir / "slurm.conf"
    conf.write_text(
        slurm_conf_text(
            hostname=hostname, runtime_dir=runtime_dir, workdir=workdir,
            nodes={name: free_port() for name in names}, ctld_port=ctld_port, slurmd_port=free_port(),
            health_check_program=health_check_program, health_check_interval=health_check_interval,
            prolog=prolog, epilog=epilog, reboot_program=reboot_program,
        )
    )  # fmt: skip
    (workdir / "gres.conf").write_text(gres_conf_text(workdir / "dev", names))
    munge_dir = runtime_dir / "munge"
    key = write_munge_key(munge_dir)

    env = dict(os.environ) | {"SLURM_CONF": str(conf)}
    daemon_env = env | {MARKER_ENV: str(workdir)}
    log_dir = workdir / "log"
    munged = Daemon(
        "munged",
        [tools["munged"], "--foreground", "--force", f"--socket={munge_dir / 'munge.socket'}",
         f"--key-file={key}", f"--pid-file={munge_dir / 'munged.pid'}", f"--seed-file={munge_dir / 'munged.seed'}"],
        log_dir / "munged.log", daemon_env, workdir,
    )  # fmt: skip
    slurmctld = Daemon(
        "slurmctld", [tools["slurmctld"], "-D", "-f", str(conf)], log_dir / "slurmctld.out", daemon_env, workdir,
        log_path=log_dir / "slurmctld.log",
    )  # fmt: skip
    slurmds = {
        name: Daemon(f"slurmd {name}", [tools["slurmd"], "-D", "-N", name, "-f", str(conf)],
                     log_dir / f"slurmd-{name}.out", daemon_env, workdir,
                     log_path=log_dir / f"slurmd-{name}.log")
        for name in names
    }  # fmt: skip
    cluster = SlurmCluster(
        workdir=workdir, runtime_dir=runtime_dir, conf=conf, env=env, nodes=names, ctld_port=ctld_port,
        tools=tools, munged=munged, slurmctld=slurmctld, slurmds=slurmds, owns_runtime_dir=owns_runtime_dir,
    )  # fmt: skip
    try:
        _start(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start(cluster: SlurmCluster) -> None:
    """Start the daemons in order, each waited for with a deadline."""
    cluster.munged.start()
    socket_path = cluster.runtime_dir / "munge" / "munge.socket"
    cluster.wait_for(
        lambda: cluster._alive_or_fail(cluster.munged) and socket_path.exists(), STARTUP_DEADLINE_S, "munged socket"
    )
    cluster.start_controller()
    for daemon in cluster.slurmds.values():
        daemon.start()
    cluster.wait_for(cluster._all_idle, STARTUP_DEADLINE_S, "all nodes IDLE")
