"""What the actuator wants a node to be, what the scheduler says it is, and the steps between.

Pure functions over small records, so the reconciliation rules are tested without a scheduler:

- a node's desired state is the worst active decision among its GPUs (`desired_states`);
- a target (`actuate.slurm`, `actuate.kubernetes`) reads each node's observed state: which of
  *our* states it carries (`Observed.ours`), whether someone else drained or cordoned it, whether
  it is managed at all, and whether our last drain is still under way (`Observed.pending`);
- `plan` compares the two and returns one `Step` per node that must change. Raising a node
  happens at once; lowering it (down to `ok`, or from drain to demote) waits until the lower
  state has held for the settle period, so a decision that flaps does not flap the node. A node
  that is not managed, or held by an operator, gets no step at all: neither ours applied nor
  ours undone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from core.decisions import SEVERITY

ESCALATIONS = frozenset({"demote", "drain", "rma"})
"""States whose new arrival on a node counts against the breaker (work is taken off the node)."""


@dataclass(frozen=True)
class GpuDecision:
    """One GPU's active decision, as the store holds it."""

    hostname: str
    gpu_uuid: str
    gpu_index: int | None
    decision: str
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Desired:
    """The state a node should have and the GPU that decides it."""

    hostname: str
    state: str
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    why: str = ""


@dataclass(frozen=True)
class Observed:
    """A node as the scheduler shows it, in our terms."""

    hostname: str
    ours: str = "ok"
    """The state our own marks on the node say (ok: none of ours)."""
    managed: bool = True
    """False when the node opted out (label gpuhealth.io/managed=false, the Slurm node list)."""
    foreign: str | None = None
    """Someone else drained or cordoned it ("drained: admin reason"): we never undo that."""
    pending: bool = False
    """Our drain is not finished (pods still to evict): the step is applied again."""
    detail: Mapping[str, object] = field(default_factory=dict, compare=False)
    """What the target needs to apply a step without reading the node again (its raw object)."""


@dataclass(frozen=True)
class Step:
    """One node's change: from the state it carries to the state it should carry."""

    hostname: str
    from_state: str
    to_state: str
    why: str
    gpu_uuid: str | None = None
    gpu_index: int | None = None

    @property
    def escalates(self) -> bool:
        """True when work is newly taken off the node (counted by the breaker)."""
        return self.to_state in ESCALATIONS and self.from_state not in ESCALATIONS

    @property
    def action(self) -> str:
        """The action's name in the audit and metrics: the state moved to, or `release` for ok."""
        return "release" if self.to_state == "ok" else self.to_state


def why_of(d: GpuDecision) -> str:
    """One line for a reason, label or annotation: "GPU 3 rma: row remap failure"."""
    gpu = f"GPU {d.gpu_index}" if d.gpu_index is not None else f"GPU {d.gpu_uuid}"
    reasons = "; ".join(r for r in d.reasons if r)
    return f"{gpu} {d.decision}" + (f": {reasons}" if reasons else "")


def desired_states(decisions: Iterable[GpuDecision]) -> dict[str, Desired]:
    """Per hostname, the worst decision among its GPUs (ties: the lowest GPU index) and why."""
    best: dict[str, GpuDecision] = {}
    for d in decisions:
        if d.decision not in SEVERITY:
            raise ValueError(f"unknown decision {d.decision!r} for GPU {d.gpu_uuid}")
        cur = best.get(d.hostname)
        if cur is None or _rank(d) > _rank(cur):
            best[d.hostname] = d
    return {
        h: Desired(h, d.decision, d.gpu_uuid, d.gpu_index, why_of(d) if d.decision != "ok" else "all GPUs ok")
        for h, d in best.items()
    }


def _rank(d: GpuDecision) -> tuple[int, int]:
    # Worse decision first; among equals the lower index, so the named GPU does not hop between passes.
    return SEVERITY[d.decision], -(d.gpu_index if d.gpu_index is not None else 1 << 30)


@dataclass(frozen=True)
class Lowering:
    """Since when a node's desired state has been below what it carries (the settle clock)."""

    since: datetime
    to_state: str


def plan(
    desired: Mapping[str, Desired],
    observed: Mapping[str, Observed],
    *,
    now: datetime,
    settle: timedelta,
    lowering: Mapping[str, Lowering],
    held: Iterable[str] = (),
    released: Iterable[str] = (),
) -> list[Step]:
    """The steps that bring each observed node to its desired state, worst first.

    `lowering` is the settle clock the caller keeps (see `settle_clock`); `released` nodes skip it
    (an operator said so); `held` nodes and unmanaged ones get nothing. Nodes the scheduler does not
    know are not planned: there is nothing to act on.
    """
    hold = set(held)
    release = set(released)
    steps: list[Step] = []
    for host, obs in observed.items():
        if not obs.managed or host in hold:
            continue
        want = desired.get(host) or Desired(host, "ok", why="no active decision")
        if want.state == obs.ours:
            if obs.pending:
                steps.append(Step(host, obs.ours, want.state, want.why, want.gpu_uuid, want.gpu_index))
            continue
        if SEVERITY[want.state] < SEVERITY[obs.ours] and host not in release:
            low = lowering.get(host)
            if low is None or now - low.since < settle:
                continue
        steps.append(Step(host, obs.ours, want.state, want.why, want.gpu_uuid, want.gpu_index))
    steps.sort(key=lambda s: (-SEVERITY[s.to_state], s.hostname))
    return steps


def settle_clock(
    desired: Mapping[str, Desired],
    observed: Mapping[str, Observed],
    before: Mapping[str, Lowering],
    now: datetime,
) -> dict[str, Lowering]:
    """The settle clock after this look: started where a node's desired state fell below what it
    carries, kept while it stays below (restarted when the lower state rises again), dropped otherwise."""
    out: dict[str, Lowering] = {}
    for host, obs in observed.items():
        want = desired.get(host)
        state = want.state if want is not None else "ok"
        if SEVERITY[state] >= SEVERITY[obs.ours]:
            continue
        prev = before.get(host)
        if prev is not None and SEVERITY[prev.to_state] >= SEVERITY[state]:
            # Still lower (or lower still): the clock keeps running and names the highest state seen.
            out[host] = prev
        else:
            out[host] = Lowering(now, state)
    return out


__all__ = [
    "ESCALATIONS",
    "Desired",
    "GpuDecision",
    "Lowering",
    "Observed",
    "Step",
    "desired_states",
    "plan",
    "settle_clock",
    "why_of",
]
