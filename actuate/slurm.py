"""The actuator's Slurm client: `scontrol` and `squeue` (pyslurm does not match 22.05; REFERENCE.md).

Our marks on a node, and only ours, say what we did, so a pass reads them back from `scontrol`:

| state | features | Weight | state |
|---|---|---|---|
| watch | `+gpuhealth_watch` | unchanged | |
| demote | `-reliable`, `+gpuhealth_demoted` | raised (used last) | |
| drain, rma | as demote | as demote | `DRAIN`, reason `gpuhealth: drain GPU 3: …` |

Non-interruptible jobs ask for `--constraint=reliable`, so a demoted node runs only work that may
be interrupted (docs/actuation.md: a job script). A drain lets running jobs finish; new ones do not start.
A drain whose reason does not start with `gpuhealth:` is someone else's (NHC's rule): we never
resume it, never overwrite its reason, never reboot its node. The weight a node had before we raised
it is returned in `Applied.saved` and put back when we let the node go.

A reboot is Slurm's own: `scontrol reboot ASAP nextstate=RESUME reason="gpuhealth: reboot …" NODE` drains
the node (its jobs finish), runs RebootProgram once it is idle, and resumes it when its slurmd registers
with a new boot. `scontrol show node` (22.05) reads, in order: `MIXED+DRAIN+REBOOT_REQUESTED` while jobs
run, `IDLE+DRAIN+REBOOT_REQUESTED`, then `DOWN+DRAIN+REBOOT_ISSUED` (the reason gains " : reboot issued"),
all with `NextState=RESUME`; then `IDLE` with no reason and a new `BootTime=`. With `nextstate=DOWN` it ends
`DOWN`, reason "gpuhealth: reboot … : reboot issued : reboot complete", for a check before return.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from actuate.plan import Observed, Step
from actuate.target import (
    REASON_PREFIX,
    Applied,
    NotOurs,
    Reboot,
    RebootProgress,
    TargetError,
    TargetUnavailable,
    printable,
)
from core.decisions import OUT_OF_SERVICE, SEVERITY

WATCH_FEATURE = "gpuhealth_watch"
DEMOTED_FEATURE = "gpuhealth_demoted"
OUR_FEATURES = (WATCH_FEATURE, DEMOTED_FEATURE)
UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused", "Zero Bytes were")
"""What scontrol and squeue print when slurmctld is down or restarting: retry later, not a failed step."""
REASON_CHARS = 255
_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_]*)=")
RebootStage = Literal["requested", "issued", "done", "failed"]
"""requested: waiting for the node to go idle; issued: RebootProgram ran, the node not back yet; failed: no
reboot pending and no new boot (cancelled, or DOWN "reboot timed out" after ResumeTimeout)."""
_NODE_REASON = re.compile(r"(?:^|\s)Reason=(?P<reason>.*?) \[(?P<user>[^@\]]*)@(?P<time>[^\]]*)\]")


@dataclass(frozen=True)
class SlurmNode:
    """The fields of `scontrol show node -o` the actuator reads."""

    name: str
    state: str
    reason: str
    weight: int | None
    available: tuple[str, ...]
    active: tuple[str, ...]
    boot_time: str = ""
    """BootTime= as scontrol prints it: a reboot is done when it changed."""
    next_state: str = ""
    """NextState= (RESUME while a `reboot nextstate=RESUME` is pending), "" when absent."""

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.split("+")

    @property
    def reboot_pending(self) -> Literal["requested", "issued"] | None:
        """The reboot Slurm holds for the node: requested (waiting for idle), issued (RebootProgram ran)."""
        flags = self.state.split("+")
        return "issued" if "REBOOT_ISSUED" in flags else "requested" if "REBOOT_REQUESTED" in flags else None

    @property
    def our_drain(self) -> str | None:
        """drain or rma when the node is drained by us (the reason says which), else None."""
        if not self.drained or not self.reason.startswith(REASON_PREFIX):
            return None
        word = self.reason[len(REASON_PREFIX) :].split(None, 1)[:1]
        return "rma" if word == ["rma"] else "drain"


def scontrol_fields(line: str, *, node: bool = False) -> dict[str, str]:
    """Fields of one `scontrol -o show node|job` line; a value runs up to the next ` Key=` (OS= holds spaces)."""
    fields: dict[str, str] = {}
    # A node's Reason is free text (it may contain "a=b") ending in "[user@time]": cut it out first.
    m = _NODE_REASON.search(line) if node else None
    if m:
        fields |= {"Reason": m["reason"], "ReasonUser": m["user"], "ReasonTime": m["time"]}
        line = line[: m.start()] + line[m.end() :]
    keys = list(_KEY.finditer(line))
    for key, nxt in zip(keys, [*keys[1:], None], strict=True):
        end = nxt.start() if nxt else len(line)
        fields.setdefault(key[1], line[key.end() : end].strip())
    return fields


def parse_node_line(line: str) -> SlurmNode:
    """One node of `scontrol show node -o`."""
    fields = scontrol_fields(line, node=True)
    if "NodeName" not in fields:
        raise TargetError(f"scontrol printed a node line without NodeName: {line[:200]!r}")
    reason = fields.get("Reason", "")
    weight = fields.get("Weight", "")
    return SlurmNode(
        name=fields["NodeName"],
        state=fields.get("State", ""),
        reason="" if reason == "(null)" else reason,
        weight=int(weight) if weight.isascii() and weight.isdigit() else None,
        available=_features(fields.get("AvailableFeatures", "")),
        active=_features(fields.get("ActiveFeatures", "")),
        boot_time=fields.get("BootTime", ""),
        next_state=fields.get("NextState", ""),
    )


def _features(value: str) -> tuple[str, ...]:
    return tuple(f for f in value.split(",") if f and f != "(null)")


class SlurmTarget:
    """Applies the actuator's steps to Slurm nodes through `scontrol`."""

    name = "slurm"
    agent_reboots = False
    """Slurm reboots through its RebootProgram (`request_reboot`); the node agent is not asked."""

    def __init__(
        self,
        *,
        scontrol: str = "scontrol",
        squeue: str = "squeue",
        env: Mapping[str, str] | None = None,
        reliable_feature: str = "reliable",
        demoted_weight: int = 1000,
        unmanaged: Collection[str] = (),
        timeout_s: float = 30.0,
    ) -> None:
        self.scontrol = scontrol
        self.squeue = squeue
        self.env = dict(env) if env is not None else None
        self.reliable = reliable_feature
        self.demoted_weight = demoted_weight
        """Slurm uses the lowest weight first: a demoted node is picked last (policy choice)."""
        self.unmanaged = frozenset(unmanaged)
        self.timeout_s = timeout_s

    def _run(self, args: Sequence[str], what: str) -> str:
        try:
            # Job names and drain reasons are anyone's bytes (`sbatch --job-name=$'r\xe9sum\xe9'`):
            # an odd byte is read as U+FFFD, never a failed pass.
            done = subprocess.run(
                list(args), env=self.env, capture_output=True, encoding="utf-8", errors="replace",
                timeout=self.timeout_s, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as err:
            raise TargetUnavailable(f"{what}: no answer within {self.timeout_s:g} s") from err
        except (OSError, ValueError) as err:  # ValueError: a NUL in an argument
            raise TargetError(f"{what}: cannot run {args[0]}: {err}") from err
        if done.returncode != 0:
            msg = (done.stderr or done.stdout).strip().splitlines()
            text = msg[-1] if msg else f"exit status {done.returncode}"
            if any(u in (done.stderr or "") for u in UNREACHABLE):
                raise TargetUnavailable(f"{what}: slurmctld unreachable: {text}")
            raise TargetError(f"{what}: {text}")
        return done.stdout

    def nodes(self) -> dict[str, SlurmNode]:
        """Every node as `scontrol show node -o` shows it."""
        out = self._run([self.scontrol, "show", "node", "-o"], "reading the nodes")
        nodes = [parse_node_line(line) for line in out.splitlines() if line.strip().startswith("NodeName=")]
        return {n.name: n for n in nodes}

    def observe(self) -> dict[str, Observed]:
        """Every node in our terms, from one `scontrol show node`."""
        return {name: self._observed(n) for name, n in self.nodes().items()}

    def _observed(self, n: SlurmNode) -> Observed:
        ours = n.our_drain or (
            "demote" if DEMOTED_FEATURE in n.available else "watch" if WATCH_FEATURE in n.available else "ok"
        )
        foreign = f"drained: {n.reason or 'no reason'}" if n.drained and n.our_drain is None else None
        # Our marks incomplete (a reconfigure put slurm.conf's features back): apply the state again.
        demoted = SEVERITY[ours] >= SEVERITY["demote"]
        drift = demoted and (DEMOTED_FEATURE not in n.available or self.reliable in n.available)
        return Observed(n.name, ours, n.name not in self.unmanaged, foreign, drift, {"node": n})

    def workloads(self, hostname: str) -> list[str]:
        """The jobs running on the node: "job 42 (alice, train.sh)"."""
        out = self._run(
            [self.squeue, "-h", "-w", hostname, "-t", "RUNNING,COMPLETING,SUSPENDED", "-o", "%i|%u|%j"],
            f"listing the jobs on {hostname}",
        )
        jobs = []
        for line in out.splitlines():
            job, _, rest = line.partition("|")
            user, _, name = rest.partition("|")
            if job.strip():
                jobs.append(f"job {job.strip()} ({user}, {name})")
        return jobs

    def apply(self, step: Step, observed: Observed, saved: Mapping[str, Any] | None) -> Applied:
        """Set our features and weight for `step.to_state`, and drain or resume the node (only our drain)."""
        node = observed.detail.get("node")
        if not isinstance(node, SlurmNode):
            node = self.nodes().get(step.hostname)
            if node is None:
                raise TargetError(f"slurm knows no node {step.hostname}")
        update, keep = self._marks(node, step.to_state, saved)
        if len(update) > 1:
            self._run([self.scontrol, "update", *update], f"setting features and weight of {node.name}")
        note = self._drain_state(node, step)
        if step.to_state == "ok":
            return Applied("applied", note, forget_saved=True)
        return Applied("applied", note, saved=keep)

    def _marks(self, node: SlurmNode, to: str, saved: Mapping[str, Any] | None) -> tuple[list[str], dict[str, Any]]:
        """The `scontrol update` arguments that give the node our features and weight for `to`, and
        what to remember for undoing them."""
        keep = dict(saved or {})
        demoted = SEVERITY[to] >= SEVERITY["demote"]
        base = [f for f in node.available if f not in OUR_FEATURES]
        if demoted and self.reliable in base:
            keep["reliable"] = True  # we take it away: we give it back
            base.remove(self.reliable)
        elif not demoted and keep.pop("reliable", False) and self.reliable not in base:
            base.append(self.reliable)
        features = base + ([DEMOTED_FEATURE] if demoted else [WATCH_FEATURE] if to == "watch" else [])
        update = [f"NodeName={node.name}"]
        if sorted(features) != sorted(node.available) or sorted(features) != sorted(node.active):
            joined = ",".join(features)
            update += [f"AvailableFeatures={joined}", f"ActiveFeatures={joined}"]
        if demoted and node.weight != self.demoted_weight:
            keep.setdefault("weight", node.weight)
            update.append(f"Weight={self.demoted_weight}")
        elif not demoted and "weight" in keep:
            weight = keep.pop("weight")
            if weight is not None and weight != node.weight:
                update.append(f"Weight={weight}")
        return update, keep

    def _drain_state(self, node: SlurmNode, step: Step) -> str | None:
        """Drain (drain, rma) or resume (below) — but never touch a drain that is not ours."""
        if step.to_state in OUT_OF_SERVICE:
            if node.drained and node.our_drain is None:
                return f"left as it is: already drained by someone else ({node.reason or 'no reason'})"
            reason = printable(f"{REASON_PREFIX} {step.to_state} {step.why}")[:REASON_CHARS]
            if node.drained and node.reason == reason:
                return None
            self._run(
                [self.scontrol, "update", f"NodeName={node.name}", "State=DRAIN", f"Reason={reason}"],
                f"draining {node.name}",
            )
            return None
        if node.our_drain is not None:
            self._run([self.scontrol, "update", f"NodeName={node.name}", "State=RESUME"], f"resuming {node.name}")
        return None

    def node(self, hostname: str) -> SlurmNode:
        """One node as `scontrol show node -o` shows it (raises TargetError when slurm knows no such node)."""
        node = self.nodes().get(hostname)
        if node is None:
            raise TargetError(f"slurm knows no node {hostname}")
        return node

    def reboot(self, hostname: str, why: str, *, now: datetime | None = None, resume: bool = True) -> Reboot:
        """Ask Slurm to reboot the node once its jobs are done, then resume it (`resume`) or leave it DOWN with our
        reason for a check before return; a reboot already pending is not asked again. Raises NotOurs when
        someone else drained the node."""
        node = self.node(hostname)
        if node.drained and node.our_drain is None:
            raise NotOurs(f"not rebooting {hostname}: drained by someone else ({node.reason or 'no reason'})")
        if node.reboot_pending is None:
            reason = printable(f"{REASON_PREFIX} reboot {why}")[:REASON_CHARS]
            self._run(
                # 22.05 knows nextstate=RESUME and DOWN only ("Invalid state: DRAIN").
                [self.scontrol, "reboot", "ASAP", f"nextstate={'RESUME' if resume else 'DOWN'}", f"reason={reason}",
                 hostname],
                f"asking slurm to reboot {hostname}",
            )  # fmt: skip
        return Reboot(requested_at=now or datetime.now(UTC), boot_id_before=node.boot_time)

    def reboot_stage(self, hostname: str, asked: Reboot) -> RebootStage:
        """Where the reboot asked for in `asked` stands, from the node's state flags and its BootTime=."""
        node = self.node(hostname)
        if node.reboot_pending is not None:
            return node.reboot_pending
        return "done" if node.boot_time != asked.boot_id_before else "failed"

    def request_reboot(self, hostname: str, why: str, *, now: datetime) -> Reboot:
        """The remediation loop's reboot: as `reboot`, left DOWN with our reason after it (verified before
        it returns: our drain is put back on the DOWN node and lifted once the GPU passed)."""
        return self.reboot(hostname, why, now=now, resume=False)

    def reboot_progress(self, hostname: str, asked: Reboot) -> RebootProgress:
        """`reboot_stage` in the loop's words: requested and issued are waiting."""
        stage = self.reboot_stage(hostname, asked)
        return "done" if stage == "done" else "failed" if stage == "failed" else "waiting"

    def reboot_status(self, hostname: str, asked: Reboot) -> Reboot:
        """`asked`, with `done` set once the node is back from a new boot."""
        return replace(asked, done=self.reboot_stage(hostname, asked) == "done")

    def drain(self, hostname: str, state: str, why: str) -> bool:
        """Drain one node with our reason unless someone else drained it (the health check); True if drained now."""
        node = self.node(hostname)
        if node.drained:
            return False
        self._drain_state(node, Step(hostname, "ok", state, why))
        return True

    def announce(self, step: Step, result: str, note: str | None) -> None:
        """Slurm has no events: the drain reason and `GET /v1/actions` tell the story."""
