"""One process of the Slurm test cluster (tests/integration/slurm_cluster.py): started, stopped, its log read."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.integration.conftest import Service, terminate

STOP_WAIT_S = 10.0


@dataclass
class Daemon:
    """One process of the cluster: its command, its stdout and stderr, and the log file it writes itself."""

    name: str
    cmd: list[str]
    out_path: Path
    """stdout and stderr; slurm's daemons in the foreground (-D) echo their log there without timestamps."""
    env: dict[str, str]
    cwd: Path
    """Where it runs; slurmd's health check program inherits it (on a real node it would be /)."""
    log_path: Path | None = None
    """The daemon's own log file (SlurmctldLogFile, SlurmdLogFile: timestamped), if it has one."""
    proc: subprocess.Popen[bytes] | None = None

    @property
    def report_path(self) -> Path:
        """The log to show: the daemon's own once it exists (timestamps), else its stdout and stderr."""
        if self.log_path is not None and self.log_path.exists():
            return self.log_path
        return self.out_path

    def start(self) -> None:
        """Start (again); output is appended to, so a restart keeps the earlier lines."""
        with self.out_path.open("ab") as log:
            log.write(f"==== {time.strftime('%H:%M:%S')} starting: {' '.join(self.cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                start_new_session=True,  # a Ctrl-C meant for pytest must not hit the daemons first
            )  # fmt: skip

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = STOP_WAIT_S) -> None:
        """SIGTERM (slurmctld saves its state), then SIGKILL if it does not exit within `timeout`."""
        if self.proc is not None:
            terminate(self.proc, timeout)

    def log_tail(self, max_chars: int = 6000) -> str:
        """The end of the daemon's log."""
        if self.proc is None:
            return "(not started)"
        try:
            text = self.report_path.read_text(errors="replace")
        except OSError as err:
            return f"(cannot read {self.report_path}: {err})"
        return text if len(text) <= max_chars else "...\n" + text[-max_chars:]

    def service(self, url: str) -> Service | None:
        """This daemon as a conftest Service, so a failed test's report carries its log."""
        return Service(self.name, self.proc, url, self.report_path) if self.proc else None
