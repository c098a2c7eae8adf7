"""What a scheduler client gives the actuator: the nodes as they are, the workloads on one, a step applied."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from actuate.plan import Observed, Step

MANAGED_LABEL = "gpuhealth.io/managed"
"""A node labelled `gpuhealth.io/managed=false` is never touched (Kubernetes)."""
REASON_PREFIX = "gpuhealth:"
"""Every Slurm drain reason we write starts so; a drain without it is someone else's (LBNL NHC's `NHC:` rule)."""


class TargetUnavailable(Exception):
    """The scheduler cannot be reached now (slurmctld or the API server down): retry later."""


class TargetError(Exception):
    """A step on one node failed; the next pass tries again from what the scheduler then shows."""


class NotOurs(TargetError):
    """A step refused: the node is held by someone else (an admin's or NHC's drain), never ours to change."""


@dataclass(frozen=True)
class Reboot:
    """A node reboot we asked for, as the remediation loop keeps it between passes (Slurm, Kubernetes)."""

    requested_at: datetime
    boot_id_before: str
    """What identifies the boot before we asked: Slurm's BootTime=, Kubernetes' status.nodeInfo.bootID."""
    done: bool = False
    """The node is back from a new boot (its boot id differs and no reboot is pending)."""


@dataclass(frozen=True)
class Applied:
    """What applying a step did."""

    result: Literal["applied", "pending", "skipped"]
    """pending: started, not finished (evictions refused for now); skipped: not ours to change."""
    note: str | None = None
    saved: Mapping[str, Any] | None = field(default=None)
    """Values to remember for undoing it later (the Slurm weight before a demote); None: keep as is."""
    forget_saved: bool = False
    """The node is ours no more: forget what was saved."""


class Target(Protocol):
    """A scheduler the actuator acts on (`actuate.slurm.SlurmTarget`, `actuate.kubernetes.KubeTarget`)."""

    name: str

    def observe(self) -> dict[str, Observed]:
        """Every node of the scheduler in our terms, in one read (raises TargetUnavailable)."""
        ...

    def workloads(self, hostname: str) -> list[str]:
        """The jobs or pods running on a node now, for the audit ("job 42", "ns/pod")."""
        ...

    def apply(self, step: Step, observed: Observed, saved: Mapping[str, Any] | None) -> Applied:
        """Bring one node from `step.from_state` to `step.to_state` (raises TargetError, TargetUnavailable)."""
        ...

    def announce(self, step: Step, result: str, note: str | None) -> None:
        """Tell the scheduler's users what was done (a Kubernetes Event); may do nothing."""
        ...


RebootProgress = Literal["waiting", "done", "failed"]
"""waiting: asked, the node not back from a new boot yet; done: back from a new boot; failed: the
scheduler gave the reboot up (Slurm: no reboot pending and the same boot)."""


@runtime_checkable
class Reboots(Protocol):
    """A target that reboots nodes for the remediation loop (`service.remediation`)."""

    agent_reboots: bool
    """True where the node agent asks for the reboot (kured's sentinel on Kubernetes); the target then only
    records the boot before it and tells when the node is back. False: `request_reboot` asks the scheduler."""

    def request_reboot(self, hostname: str, why: str, *, now: datetime) -> Reboot:
        """Ask for the node's reboot once it is idle (or record the boot to tell it by); raises TargetError."""
        ...

    def reboot_progress(self, hostname: str, asked: Reboot) -> RebootProgress:
        """Where the reboot asked for stands."""
        ...


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
"""Direction marks and overrides: text that reads other than it is in a terminal (CVE-2021-42574)."""


def printable(text: str) -> str:
    """`text` without control characters, for what we write on a node (a drain reason, an annotation, an
    Event): a line break or tab becomes a space, other controls (NUL, ESC, DEL, C1) and direction
    overrides go. A decision's reasons come from data we do not write ourselves."""
    out = []
    for ch in text:
        if ch in "\t\n\r\v\f":
            out.append(" ")
        elif ch not in _BIDI and unicodedata.category(ch) != "Cc":
            out.append(ch)
    return "".join(out)


_RANGE = re.compile(r"^(?P<pre>[^\[\]]*)\[(?P<body>[^\[\]]+)\](?P<post>.*)$")


def expand_hostlist(text: str) -> list[str]:
    """Node names from a comma list with Slurm's bracket ranges: "gpu[001-003,007],login1" → gpu001, gpu002,
    gpu003, gpu007, login1 (zero padding kept; one bracket group per name, as most site lists use)."""
    names: list[str] = []
    for part in _split_top(text):
        m = _RANGE.match(part)
        if m is None:
            if "[" in part or "]" in part:
                raise ValueError(f"cannot read the node list entry {part!r}")
            names.append(part)
            continue
        for item in m["body"].split(","):
            lo, _, hi = item.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) < int(lo)):
                raise ValueError(f"cannot read the range {item!r} in {part!r}")
            width = len(lo)
            for n in range(int(lo), int(hi or lo) + 1):
                names.append(f"{m['pre']}{n:0{width}d}{m['post']}")
    return names


def _split_top(text: str) -> list[str]:
    """Split on the commas outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    out.append(cur.strip())
    return [p for p in out if p]
