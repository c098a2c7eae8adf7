"""A scheduler in memory: the simulated fleet's nodes for `demo` and `--actuate-target sim`.

It keeps, per node, the state our marks would say, and applies steps to that, so the demo's
actuator runs the same reconciliation (dry-run or on) without Slurm or Kubernetes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from actuate.plan import Observed, Step
from actuate.target import Applied


class MemoryTarget:
    """Nodes named by `hostnames()` (e.g. the store's), each carrying one state of ours."""

    name = "sim"

    def __init__(self, hostnames: Callable[[], Iterable[str]], *, unmanaged: Iterable[str] = ()) -> None:
        self.hostnames = hostnames
        self.unmanaged = frozenset(unmanaged)
        self.states: dict[str, str] = {}
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
