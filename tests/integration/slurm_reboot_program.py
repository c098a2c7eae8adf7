"""The Slurm test cluster's RebootProgram: "reboots" the node by restarting its slurmd with `-b`.

slurmd runs RebootProgram through system() with its own environment, which names no node (22.05: no
SLURMD_NODENAME, no arguments), and several slurmd share this host: so the program finds the slurmd that ran
it among its ancestors and restarts that one only, with the same arguments plus `-b` ("report node rebooted
when daemon restarted. Used for testing purposes", slurmd(8)). slurmd waits for its threads on SIGTERM, the
one running us included: the restart happens in a detached child and this process returns at once, as
`reboot` does. The new slurmd inherits the old one's environment, so the cluster's stop() finds it.

    RebootProgram=/path/to/python /path/to/slurm_reboot_program.py
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

STOP_WAIT_S = 20.0
BOOT_S = 1.0
"""A boot takes time: the node stays REBOOT_ISSUED that long, long enough for a test to see it."""


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])  # the command name may hold spaces and parentheses


def _running(pid: int) -> bool:
    """Whether `pid` still runs: an exited slurmd stays a zombie until the test that started it reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]


def find_slurmd() -> tuple[int, list[str]]:
    """Pid and arguments of the slurmd among this process's ancestors."""
    pid = os.getppid()
    while pid > 1:
        argv = _argv(pid)
        if argv and Path(argv[0]).name == "slurmd":
            return pid, argv
        pid = _parent(pid)
    raise SystemExit("slurm_reboot_program: no slurmd among my ancestors")


def restart(pid: int, argv: list[str]) -> None:
    """Stop slurmd `pid`, wait for it to exit, start it again with `-b` (its output appended to its log)."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _running(pid):
        os.kill(pid, signal.SIGKILL)
    time.sleep(BOOT_S)
    node = argv[argv.index("-N") + 1] if "-N" in argv else "slurmd"
    conf = Path(os.environ.get("SLURM_CONF", "/tmp/slurm.conf"))
    out = os.open(conf.parent / "log" / f"slurmd-{node}.out", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(out, f"==== {time.strftime('%H:%M:%S')} rebooted by RebootProgram\n".encode())
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.execv(argv[0], [*(a for a in argv if a != "-b"), "-b"])


def main() -> None:
    pid, argv = find_slurmd()
    if os.fork() > 0:
        return  # slurmd's system() returns; the child restarts it
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    restart(pid, argv)


if __name__ == "__main__":
    main()
