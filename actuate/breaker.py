"""The breaker: a bad model or a bad day must not drain the fleet.

At most `max_fraction` of the nodes *and* at most `max_nodes` may be newly demoted or drained
within a sliding `window`. Both bounds, because a percentage of a small cluster is too many
(NVSentinel added the absolute cap after learning that). Past either bound the actuator stops
acting until a person resets the breaker; the count starts again at the reset, and what happens
after a reset is decided from the scheduler's state then, never from queued events.

The count and the spend are one transaction across replicas (`store.actuation.Actuation.spend`):
the window starts `window` ago or at the last reset, whichever is later, and each step let
through is written there before it is taken.

The defaults let a real year through: in the public 400-server fault trace (REFERENCE.md) at
most 3 nodes got a new GPU fault within an hour (5 within a day, 11 within a week).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class BreakerPolicy:
    """The bounds on newly demoted or drained nodes per sliding window."""

    max_fraction: float = 0.10
    """Share of the scheduler's nodes (policy choice, NVSentinel's default is of this order)."""
    max_nodes: int = 5
    """Absolute cap: above the 3 per hour of the 400-server trace, far below a storm."""
    window: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        if not 0 < self.max_fraction <= 1:
            raise ValueError(f"breaker fraction must be in (0, 1], got {self.max_fraction}")
        if self.max_nodes < 1:
            raise ValueError(f"breaker max nodes must be at least 1, got {self.max_nodes}")
        if self.window <= timedelta(0):
            raise ValueError("breaker window must be positive")

    def limit(self, nodes: int) -> int:
        """How many nodes may be newly taken off work per window in a cluster of `nodes` (at least 1)."""
        return max(1, min(self.max_nodes, math.floor(self.max_fraction * nodes)))
