"""The actuator: a controller's loop from the active decisions to the scheduler's nodes.

Each pass is level-triggered, as a Kubernetes controller's: read the desired state (the store's
active decisions, worst per node), read the observed state (the scheduler, one read), plan the
difference (`actuate.plan`), and apply it node by node, recording every planned and applied step.
Nothing is queued between passes, so a pass after a crash, an outage or a breaker reset starts
from what the scheduler shows then; a step already applied is seen as done and not repeated.

Safety: only nodes carrying our marks are ever lowered (a target reports someone else's drain as
`foreign` and leaves it); held and opted-out nodes get nothing; the breaker stops the loop when
too many nodes would newly lose work within its window (`actuate.breaker`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from actuate.breaker import BreakerPolicy
from actuate.plan import (
    ESCALATIONS,
    GpuDecision,
    Lowering,
    Observed,
    Step,
    desired_states,
    plan,
    settle_clock,
)
from actuate.target import Target, TargetError, TargetUnavailable
from core.worker import Worker
from service.remediation import RemediationConfig, RemediationView, Remediator
from store import ActionRow, Store, StoreError

log = logging.getLogger(__name__)

Mode = Literal["off", "dry-run", "on"]
MODES: tuple[Mode, ...] = ("off", "dry-run", "on")


@dataclass(frozen=True)
class ActuatorConfig:
    """How the actuator acts: mode, settle period, breaker, pacing."""

    mode: Mode = "off"
    settle: timedelta = timedelta(hours=1)
    """A node is lowered (ok: ours removed) only after its lower state held this long."""
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    interval_s: float = 60.0
    workers: int = 8
    """Nodes changed at once within a pass (API round trips overlap)."""
    max_backoff_s: float = 300.0
    """Longest wait between passes while the scheduler or the database is down."""
    remediation: RemediationConfig | None = None
    """Carry out the remedies the decisions name (reset, reboot, verify, return); None: drains only."""


@dataclass
class ActuatorState:
    """The last pass and the counters, for /metrics (read without the database)."""

    passes: int = 0
    failures: int = 0
    last_pass: float | None = None
    last_error: str | None = None
    breaker_open: bool = False
    actions: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(action, result) -> count since start."""
    nodes_by_state: dict[str, int] = field(default_factory=dict)
    """Nodes per state of ours, from the last look at the scheduler."""
    seen: frozenset[str] = frozenset()
    """Every node the scheduler showed at the last look (all replicas' shares): the nodes a hold may name."""


@dataclass(frozen=True)
class Outcome:
    """One step of a pass and what became of it."""

    step: Step
    result: str
    error: str | None = None
    workloads: tuple[str, ...] = ()


@dataclass(frozen=True)
class PassReport:
    """What one pass saw and did."""

    at: datetime
    nodes: int
    outcomes: list[Outcome]
    breaker_open: bool
    remediations: list[dict[str, Any]] = field(default_factory=list)
    """The remediation loop's audit rows of this pass (`service.remediation`)."""


class Actuator(Worker):
    """Reconciles decisions with a scheduler every `interval_s` (`reconcile_once` for one pass)."""

    thread_name = "gpuhealth-actuator"

    def __init__(
        self,
        store: Store,
        target: Target,
        config: ActuatorConfig,
        *,
        now: Callable[[], datetime] | None = None,
        owns: Callable[[], Callable[[str], bool]] | None = None,
    ) -> None:
        super().__init__()
        if config.mode == "off":
            raise ValueError("an actuator in mode off does not run; do not build one")
        self.store = store
        self.target = target
        self.config = config
        self.now = now or (lambda: datetime.now(UTC))
        self.owns = owns
        """With replicas: asked once a pass, which nodes this one acts on now (the hostnames of its shards)."""
        self.state = ActuatorState()
        self.remediator = (
            Remediator(store, target, config.remediation, breaker=config.breaker, dry_run=config.mode == "dry-run")
            if config.remediation is not None
            else None
        )
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()

    @property
    def mode(self) -> Mode:
        return self.config.mode

    # -- one pass ---------------------------------------------------------------------------

    def reconcile_once(self) -> PassReport:
        """Read desired and observed states, plan, apply (or, dry-run, record), audit; one pass."""
        with self._lock:
            try:
                report = self._pass()
            except Exception as err:  # GET /v1/actuator says why, whatever it was
                self.state.failures += 1
                self.state.last_error = str(err) if isinstance(err, TargetUnavailable | StoreError) else _err(err)
                raise
            self.state.passes += 1
            self.state.last_pass = time.time()
            self.state.last_error = None
            return report

    def _pass(self) -> PassReport:
        now = self.now()
        act = self.store.actuation
        name = self.target.name
        observed = self.target.observe()
        nodes = len(observed)
        self.state.seen = frozenset(observed)
        if self.owns is not None:
            mine = self.owns()
            observed = {h: o for h, o in observed.items() if mine(h)}
        self.state.nodes_by_state = dict(Counter(o.ours for o in observed.values()))
        controls = act.node_controls()
        released = {h: c["released_at"] for h, c in controls.items() if c["released_at"] is not None}
        view = self.remediator.desired(observed) if self.remediator is not None else RemediationView()
        returned = view.returned_gpus
        decisions = [
            GpuDecision(d["hostname"], d["gpu_uuid"], d["gpu_index"], d["decision"], tuple(d["reasons"]))
            for d in act.active_decisions()
            # An operator's release covers the decisions the node had then; a newer one acts again. So does a
            # GPU's return from a verified remedy, for that GPU.
            if (d["hostname"] not in released or d["created_at"] > released[d["hostname"]])
            and (d["gpu_uuid"] not in returned or d["created_at"] > returned[d["gpu_uuid"]])
        ]
        desired = desired_states([*decisions, *view.decisions])
        before = {
            h: Lowering(c["lowering_since"], c["lowering_to"])
            for h, c in controls.items()
            if c["lowering_since"] is not None and c["lowering_to"] is not None
        }
        clocks = settle_clock(desired, observed, before, now)
        changed: dict[str, tuple[datetime, str] | None] = {
            h: (c.since, c.to_state) for h, c in clocks.items() if before.get(h) != c
        }
        changed.update({h: None for h in before if h not in clocks})
        if changed:
            act.set_lowering(changed)
        held = {h for h, c in controls.items() if c["held"]}
        # A release, or a GPU's verified return, skips the settle period once: until we changed the node after it.
        back = {h: max(at, released.get(h, at)) for h, at in view.returned_nodes.items()}
        back = {**released, **back}
        changed_at = act.last_applied_at(name, list(back))
        fresh = [h for h, at in back.items() if h not in changed_at or changed_at[h] < at]
        steps = plan(desired, observed, now=now, settle=self.config.settle, lowering=clocks, held=held, released=fresh)
        last = act.last_actions(name, [s.hostname for s in steps])
        # The breaker's bound is of the scheduler's nodes, whichever replica acts on which.
        outcomes = self._apply(steps, observed, controls, nodes=nodes, now=now, last=last)
        remedied = self.remediator.reconcile(observed, nodes=nodes, now=now) if self.remediator is not None else []
        return PassReport(now, len(observed), outcomes, self.state.breaker_open, remedied)

    def _apply(
        self,
        steps: list[Step],
        observed: Mapping[str, Observed],
        controls: Mapping[str, Any],
        *,
        nodes: int,
        now: datetime,
        last: Mapping[str, ActionRow],
    ) -> list[Outcome]:
        out, go, reserved = self._gate(steps, nodes=nodes, now=now, last=last)
        for o in out.values():
            self._record(o, last.get(o.step.hostname), now)
        out.update(self._run_steps(go, observed, controls, last, reserved, now))
        return [out[k] for k in range(len(steps))]

    def _gate(
        self, steps: list[Step], *, nodes: int, now: datetime, last: Mapping[str, ActionRow]
    ) -> tuple[dict[int, Outcome], list[tuple[int, Step]], dict[str, int]]:
        """The breaker's verdict on each step: the blocked ones' outcomes, the steps to take, and the audit
        rows the breaker wrote for the steps it counted (spent in the store, for every replica at once)."""
        act = self.store.actuation
        name = self.target.name
        if not steps:
            self.state.breaker_open = act.breaker(name)["breaker_open"]
            return {}, [], {}
        dry = self.mode == "dry-run"
        policy = self.config.breaker
        counted = ("planned",) if dry else ("applied", "pending")
        # Nodes whose last change by us took work off them already: marks lost under us (a slurmctld
        # restart puts slurm.conf's features back) are put back without counting as new.
        already = {h for h, r in last.items() if r["result"] in counted and r["to_state"] in ESCALATIONS}
        new = [s for s in steps if s.escalates and s.hostname not in already]
        why = f"more than {policy.limit(nodes)} of {nodes} nodes newly demoted or drained within {_span(policy.window)}"
        spent = act.spend(
            name, [self._row(s, "planned" if dry else "pending", None, (), now) for s in new],
            window_start=now - policy.window, limit=policy.limit(nodes), counted=counted,
            open_reason=None if dry else why, at=now,
        )  # fmt: skip
        if spent["opened"]:
            log.error("actuator breaker opened: %s; no more actions until a reset", why)
        self.state.breaker_open = spent["breaker_open"] or spent["opened"]
        refused = set(spent["refused"])
        stop = spent["breaker_open"]
        out: dict[int, Outcome] = {}
        go: list[tuple[int, Step]] = []
        for k, step in enumerate(steps):
            if stop:
                out[k] = Outcome(step, "blocked", "the breaker is open: POST /v1/actuator/reset after checking")
            elif step.hostname in refused:
                out[k] = Outcome(step, "blocked", f"the breaker {'would open' if dry else 'opened'}: {why}")
                stop = not dry  # open: nothing after it is done
            else:
                go.append((k, step))
        return out, go, spent["reserved"]

    def _run_steps(
        self,
        go: list[tuple[int, Step]],
        observed: Mapping[str, Observed],
        controls: Mapping[str, Any],
        last: Mapping[str, ActionRow],
        reserved: Mapping[str, int],
        now: datetime,
    ) -> dict[int, Outcome]:
        """Take the steps, each audited as soon as it is done: a step applied is recorded whatever the others do."""
        lost: list[StoreError] = []

        def one(item: tuple[int, Step]) -> tuple[int, Outcome]:
            k, step = item
            o = self._step(step, observed[step.hostname], controls.get(step.hostname))
            try:
                self._record(o, last.get(step.hostname), now, reserved.get(step.hostname))
            except StoreError as err:
                lost.append(err)
            return k, o

        # Nodes are independent: a few at once, as a controller's workers (the breaker has decided already).
        if len(go) > 1 and self.config.workers > 1:
            with ThreadPoolExecutor(min(self.config.workers, len(go)), thread_name_prefix="gpuhealth-act") as pool:
                done = dict(pool.map(one, go))
        else:
            done = dict(map(one, go))
        if lost:  # the database went away mid-pass: the pass failed (the next one sees the scheduler's state)
            raise lost[0]
        return done

    def _step(self, step: Step, obs: Observed, control: Mapping[str, Any] | None) -> Outcome:
        """One node's step, whatever happens: an unexpected error is this node's `failed` outcome."""
        workloads = tuple(self._workloads(step.hostname))
        if self.mode == "dry-run":
            return Outcome(step, "planned", None, workloads)
        try:
            return self._apply_one(step, obs, control, workloads)
        except Exception as err:  # an odd byte or a bug on one node must not stop the fleet's pass
            log.exception("actuator: %s → %s on %s failed", step.from_state, step.to_state, step.hostname)
            return Outcome(step, "failed", f"unexpected error: {_err(err)}", workloads)

    def _apply_one(self, step: Step, obs: Observed, control: Mapping[str, Any] | None, workloads: tuple[str, ...]
                   ) -> Outcome:  # fmt: skip
        saved = control.get("saved") if control else None
        try:
            done = self.target.apply(step, obs, saved)
        except TargetError as err:
            log.warning("actuator: %s → %s on %s failed: %s", step.from_state, step.to_state, step.hostname, err)
            return Outcome(step, "failed", str(err), workloads)
        except TargetUnavailable as err:
            # The rest of the pass would fail the same way; the next pass starts from what is then seen.
            log.warning("actuator: %s unreachable while changing %s: %s", self.target.name, step.hostname, err)
            return Outcome(step, "failed", f"unreachable: {err}", workloads)
        note = done.note
        try:
            if done.forget_saved:
                self.store.actuation.set_saved(step.hostname, None)
            elif done.saved is not None:
                self.store.actuation.set_saved(step.hostname, done.saved)
        except StoreError as err:  # the step is applied all the same: say so, with what was not kept
            log.error("actuator: %s changed, but not what to put back (%s): %s", step.hostname, done.saved, err)
            note = "; ".join(filter(None, [note, f"what to put back later was not stored ({done.saved}): {err}"]))
        try:
            self.target.announce(step, done.result, note)
        except Exception as err:  # an Event lost is not an action lost
            log.info("actuator: no event for %s: %s", step.hostname, _err(err))
        return Outcome(step, done.result, note, workloads)

    def _workloads(self, hostname: str) -> list[str]:
        try:
            return self.target.workloads(hostname)
        except (TargetError, TargetUnavailable) as err:
            return [f"(unknown: {err})"]
        except Exception as err:  # the audit says what ran when it can; a step never waits for it
            return [f"(unknown: {_err(err)})"]

    def _record(self, o: Outcome, prev: ActionRow | None, now: datetime, reserved: int | None = None) -> None:
        """Audit one outcome (finish the row the breaker wrote for it), unless it only repeats the node's
        last record (the same pass again)."""
        s = o.step
        with self._count_lock:
            self.state.actions[(s.action, o.result)] += 1
        repeat = prev is not None and _same(prev, s, o, self._mode_word())
        if reserved is not None:
            self.store.actuation.finish(reserved, result=o.result, error=o.error, workloads=o.workloads, drop=repeat)
        elif not repeat:
            self.store.actuation.record([self._row(s, o.result, o.error, o.workloads, now)])

    def _row(self, s: Step, result: str, error: str | None, workloads: Sequence[str], now: datetime) -> dict[str, Any]:
        """The audit row of a step."""
        return {
            "at": now, "target": self.target.name, "mode": self._mode_word(), "hostname": s.hostname,
            "action": s.action, "from_state": s.from_state, "to_state": s.to_state, "why": s.why,
            "gpu_uuid": s.gpu_uuid, "gpu_index": s.gpu_index, "result": result, "error": error,
            "workloads": list(workloads), "escalates": s.escalates,
        }  # fmt: skip

    def _mode_word(self) -> str:
        return "dry-run" if self.mode == "dry-run" else "on"

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        wait = 0.0
        failures = 0
        while not self._stop.wait(wait):
            try:
                self.reconcile_once()
                failures = 0
                wait = self.config.interval_s
            except (TargetUnavailable, StoreError) as err:
                failures += 1
                wait = min(self.config.max_backoff_s, self.config.interval_s * 2 ** min(failures - 1, 10))
                log.warning("actuator pass failed (%s); next try in %.0f s", err, wait)
            except Exception:  # a bug must not end the loop silently: log it and keep the pacing
                log.exception("actuator pass failed")
                wait = self.config.interval_s

    def run(self) -> None:
        """The loop in the calling thread (`gpuhealth actuate`), until `stop()` or Ctrl-C."""
        self._run()

    def reset_breaker(self, by: str) -> bool:
        """Close an open breaker (the API's POST /v1/actuator/reset); the next pass re-reads everything.
        False, and nothing changed, when it is closed (a reset would restart its window)."""
        if self.store.actuation.reset_breaker(self.target.name, by=by, at=self.now()) is None:
            return False
        self.state.breaker_open = False
        return True


def _same(prev: ActionRow, step: Step, o: Outcome, mode: str) -> bool:
    """True when `o` only repeats the node's last record: the same step not done again (an applied
    step changed the node, so it is always recorded, even when it is the same change as last time)."""
    return (
        o.result != "applied"
        and prev["action"] == step.action
        and prev["to_state"] == step.to_state
        and prev["from_state"] == step.from_state
        and prev["result"] == o.result
        and prev["mode"] == mode
        and (prev["error"] or None) == (o.error or None)
    )


def _err(err: BaseException) -> str:
    """An unexpected error in one line: its type and its text, cut short."""
    return f"{type(err).__name__}: {' '.join(str(err).split())}"[:500]


def _span(d: timedelta) -> str:
    s = int(d.total_seconds())
    return f"{s // 3600} h" if s % 3600 == 0 else f"{s // 60} min"


__all__ = ["MODES", "Actuator", "ActuatorConfig", "ActuatorState", "Outcome", "PassReport"]
