"""A scheduler in memory: the simulated fleet's nodes for `demo` and `--actuate-target sim`.

It keeps, per node, the state our marks would say, and applies steps to that, so the demo's
actuator runs the same reconciliation (dry-run or on) without Slurm or Kubernetes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from actuate.plan import Observed, Step
from actuate.target import Applied, Reboot, RebootProgress


class MemoryTarget:
    """Nodes named by `hostnames()` (e.g. the store's), each carrying one state of ours."""

    name = "sim"
    agent_reboots = False

    def __init__(
        self,
        hostnames: Callable[[], Iterable[str]],
        *,
        unmanaged: Iterable[str] = (),
        on_reboot: Callable[[str], None] | None = None,
    ) -> None:
        self.hostnames = hostnames
        self.unmanaged = frozenset(unmanaged)
        self.on_reboot = on_reboot
        """Called with the hostname when a reboot is asked for (the demo resets that node's simulated GPUs)."""
        self.states: dict[str, str] = {}
        self.boots: dict[str, int] = {}
        """Per node, how many times it rebooted: its boot id."""
        self._lock = threading.Lock()

    def observe(self) -> dict[str, Observed]:
        """Every node and the state of ours it carries (ok until a step changed it)."""
        with self._lock:
            return {
                h: Observed(h, self.states.get(h, "ok"), h not in self.unmanaged) for h in sorted(set(self.hostnames()))
            }

    def workloads(self, hostname: str) -> list[str]:
        """A simulated fleet runs no jobs we could name."""
        return []

    def apply(self, step: Step, observed: Observed, saved: Mapping[str, Any] | None) -> Applied:
        """Carry the new state."""
        with self._lock:
            if step.to_state == "ok":
                self.states.pop(step.hostname, None)
            else:
                self.states[step.hostname] = step.to_state
        return Applied("applied", forget_saved=step.to_state == "ok")

    def announce(self, step: Step, result: str, note: str | None) -> None:
        """Nobody to tell."""

    def request_reboot(self, hostname: str, why: str, *, now: datetime) -> Reboot:
        """Reboot at once (a simulated node has no jobs to wait for)."""
        with self._lock:
            before = str(self.boots.get(hostname, 0))
            self.boots[hostname] = self.boots.get(hostname, 0) + 1
        if self.on_reboot is not None:
            self.on_reboot(hostname)
        return Reboot(requested_at=now, boot_id_before=before)

    def reboot_progress(self, hostname: str, asked: Reboot) -> RebootProgress:
        """done once the node booted again since `asked`."""
        with self._lock:
            return "done" if str(self.boots.get(hostname, 0)) != asked.boot_id_before else "failed"
