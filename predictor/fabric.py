"""Node findings from what a node's GPUs share: the NVLink fabric, NVLink links, the InfiniBand rails.

A GPU whose fabric is not registered, or whose NVLink link is down, looks healthy to its own counters
while the node's multi-GPU work hangs; a flapping rail stops the node's multi-node work. The fault is
the node's, so every GPU of the node gets the finding: `demote` (interruptible work only, off the
gang-scheduled jobs; docs/decisions/0083-fabric-and-rail-findings-demote-the-node.md) with a reason
that names the node's numbers, and the GPUs on a flapping rail say it is theirs, naming its port
(`device/port`) where the store knows it.

Pure functions over the scoring frame (the store's hour rows and its raw tail, `core.hourly`) and a
round's records, as `predictor.findings` is: the service applies them after scoring. A frame without
the columns (older stores, other backends, GPUs without a fabric or rails) has no findings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from core import catalog
from core.decisions import SEVERITY
from core.infiniband import RAILS_ATTR

COLUMNS = catalog.NODE_FINDING_COLUMNS
"""History columns the findings read; any may be missing."""
LINKS_DOWN, FABRIC_STATE, RAIL_DOWNS = COLUMNS
FABRIC_COMPLETED = 3.0
"""`gpu_fabric_state` of a GPU registered well; 1, 2 and 4 are not ready (core.catalog's enum)."""
FABRIC_NOT_READY = {1.0: "registration not started", 2.0: "registration in progress", 4.0: "registration failed"}
FLAPS_PER_HOUR = 3.0
"""More link downs than this in an hour is a flapping rail: alerts.config.IB_FLAPS_PER_HOUR's policy
(one or two follow a switch reboot)."""
HOUR = pd.Timedelta(hours=1)
DECISION = "demote"
FABRIC_REASON = "fabric not ready"
LINK_REASON = "NVLink link down"
RAIL_REASON = "InfiniBand rail flapping"
"""How each finding's reason starts."""


@dataclass
class NodeFindings:
    """The reasons a round adds: for every GPU of each node with a finding, in the node's order."""

    node: dict[str, list[str]] = field(default_factory=dict)
    """Hostname -> the reasons every GPU of the node gets."""
    own: dict[str, list[str]] = field(default_factory=dict)
    """GPU UUID -> the reasons that GPU gets instead of the node's (its own rail)."""


def _latest(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values("timestamp", kind="stable").groupby("gpu_uuid", sort=False).tail(1)


def _gpus(rows: pd.DataFrame) -> str:
    idx = sorted(int(i) for i in rows["gpu_index"] if i == i)
    return "GPU " + ", ".join(str(i) for i in idx) if idx else f"{len(rows)} GPUs"


def fabric_reason(host: str, rows: pd.DataFrame) -> str | None:
    """The node's fabric finding from its GPUs' latest rows, or None when every registered GPU is ready."""
    state = pd.to_numeric(rows[FABRIC_STATE], errors="coerce")
    known = state.notna()
    bad = known & (state != FABRIC_COMPLETED)
    if not bad.any():
        return None
    what = ", ".join(sorted({FABRIC_NOT_READY.get(float(s), f"state {s:g}") for s in state[bad]}))
    return (
        f"{FABRIC_REASON} on {int(bad.sum())} of {int(known.sum())} GPUs of {host} ({what}): check "
        "nvidia-fabricmanager; not for multi-GPU work"
    )


def link_reason(host: str, rows: pd.DataFrame) -> str | None:
    """The node's NVLink finding (links down on some GPU), or None."""
    down = pd.to_numeric(rows[LINKS_DOWN], errors="coerce")
    bad = down > 0
    if not bad.any():
        return None
    return (
        f"{LINK_REASON}: {int(down[bad].sum())} link(s) down on {_gpus(rows[bad])} of {host} "
        "(nvidia-smi nvlink -s): not for multi-GPU work"
    )


def rail_flaps(frame: pd.DataFrame) -> pd.DataFrame:
    """Per GPU with a rail: its link downs over the last hour or more (`flaps`), the window (`hours`),
    from its latest row back to its newest row at least an hour older (else its first)."""
    rows = frame[["gpu_uuid", "hostname", "gpu_index", "timestamp", RAIL_DOWNS]].dropna(subset=[RAIL_DOWNS])
    out = []
    for uuid, g in rows.sort_values("timestamp", kind="stable").groupby("gpu_uuid", sort=False):
        last = g.iloc[-1]
        older = g[g["timestamp"] <= last["timestamp"] - HOUR]
        base = older.iloc[-1] if len(older) else g.iloc[0]
        flaps = float(last[RAIL_DOWNS]) - float(base[RAIL_DOWNS])
        if flaps < 0:  # the counters restarted (a driver reload): what was counted since
            flaps = float(last[RAIL_DOWNS])
        hours = (last["timestamp"] - base["timestamp"]) / HOUR
        out.append((uuid, str(last["hostname"]), last["gpu_index"], flaps, float(hours)))
    return pd.DataFrame(out, columns=["gpu_uuid", "hostname", "gpu_index", "flaps", "hours"])


def _window(hours: float) -> str:
    return f"{hours * 60:.0f} minutes" if hours < 1.5 else f"{hours:.1f} hours"


def _flapping(per: pd.DataFrame) -> pd.DataFrame:
    """The GPUs whose rail flapped more than FLAPS_PER_HOUR an hour (an hour at least: a short history
    needs more than that many outright)."""
    return per[per["flaps"] > FLAPS_PER_HOUR * np.maximum(per["hours"], 1.0)]


def fabric_findings(frame: pd.DataFrame, rails: Mapping[str, str] | None = None) -> NodeFindings:
    """The fabric, NVLink and rail findings of each node in the scoring frame; `rails` (GPU UUID -> its
    ports, "mlx5_3/1"; default: the frame's `RAILS_ATTR`, the store's GPU records) names each GPU's rail."""
    found = NodeFindings()
    if len(frame) == 0 or not any(c in frame.columns for c in COLUMNS):
        return found
    latest = _latest(frame)
    for host, rows in latest.groupby("hostname", sort=True):
        reasons = [
            r
            for col, fn in ((FABRIC_STATE, fabric_reason), (LINKS_DOWN, link_reason))
            if col in rows.columns
            for r in [fn(str(host), rows)]
            if r is not None
        ]
        if reasons:
            found.node[str(host)] = reasons
    if RAIL_DOWNS in frame.columns:
        named = frame.attrs.get(RAILS_ATTR, {}) if rails is None else rails
        _rail_findings(_flapping(rail_flaps(frame)), found, named)
    return found


def _rail_findings(flapping: pd.DataFrame, found: NodeFindings, rails: Mapping[str, str]) -> None:
    """Each GPU on a flapping rail names its port where the store knows it (else the series that does)."""
    for host, rail in flapping.groupby("hostname", sort=True):
        worst = rail.loc[rail["flaps"].idxmax()]
        said = f"{worst['flaps']:.0f} times in the last {_window(float(worst['hours']))}"
        ports = sorted({p.strip() for u in rail["gpu_uuid"] for p in str(rails.get(str(u)) or "").split(",")} - {""})
        which = f"rail{'s' if len(ports) > 1 else ''} {', '.join(ports)}" if ports else "rail"
        found.node.setdefault(str(host), []).append(
            f"{RAIL_REASON}: the {which} of {_gpus(rail)} of {host} went down {said}: not for multi-node work"
        )
        for row in rail.itertuples():
            port = rails.get(str(row.gpu_uuid))
            its = f"its rail {port}" if port else "its rail"
            where = "" if port else " (gpuhealth_infiniband_port_gpu_info names the port)"
            found.own[str(row.gpu_uuid)] = [
                f"{RAIL_REASON}: {its} went down {row.flaps:.0f} times in the last {_window(row.hours)}{where}: "
                "not for multi-node work"
            ]


def with_node_findings(records: list[dict[str, Any]], frame: pd.DataFrame) -> list[dict[str, Any]]:
    """Demote every GPU of a node with a fabric, NVLink or rail finding (never lowering a decision),
    its reasons added last; a GPU on the flapping rail says it is its own."""
    found = fabric_findings(frame)
    if not found.node:
        return records
    for rec in records:
        host_reasons = found.node.get(str(rec["hostname"]))
        if not host_reasons:
            continue
        own = found.own.get(str(rec["gpu_uuid"]), [])
        mine = [r for r in host_reasons if not (own and r.startswith(RAIL_REASON))] + own
        if SEVERITY[str(rec["decision"])] < SEVERITY[DECISION]:
            rec["decision"] = DECISION
        rec["reasons"] = [*rec["reasons"], *mine]
    return records


def is_node_fabric_reason(reason: str) -> bool:
    """Whether a decision reason is one of these findings'."""
    return reason.startswith((FABRIC_REASON, LINK_REASON, RAIL_REASON))
