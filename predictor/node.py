"""Node context: when a node's GPUs run hot together, the finding is the node's cooling, not its GPUs.

A node's fans or its rack's cooling failing heats every GPU of the node at once. Each GPU's
thermal features then look like a failing GPU, and the model would demote several GPUs of one
node together. `node_findings` reads the node columns of the feature frame (`node_heat_z`,
`node_hot_gpus`, `node_gpus`, computed by `predictor.features` from each GPU's
`temp_excess_own_z`) and says which nodes look like a cooling problem; the policy
(`predictor.policy.decide`) turns that into a `watch` on each GPU of the node with
`NODE_HEAT_REASON`, and holds a thermal model demote at `watch` unless the GPU stands out from
its node (`temp_excess_vs_node_z`). A feature frame without those columns (an older one) has
no findings.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

NODE_COLUMNS = ("node_heat_z", "node_hot_gpus", "node_gpus")
"""Feature columns a finding reads; without any of them there are no findings."""
FINDING_COLUMNS = ("hostname", "cutoff", "suspected", "heat_z", "hot_gpus", "gpus")
"""`node_findings`' columns: the node, the cutoff, whether it is suspected, and its numbers."""
_DTYPES: dict[str, Any] = {
    "hostname": object,
    "cutoff": "datetime64[ns, UTC]",
    "suspected": bool,
    "heat_z": np.float64,
    "hot_gpus": np.float64,
    "gpus": np.float64,
}
NODE_HEAT_REASON = "node-wide heat: check cooling"
"""How every reason of a node finding starts (the service's node metric looks for it)."""


@dataclass(frozen=True)
class NodeHeat:
    """When a node's GPUs run hot together (a cooling finding), and when one GPU stands out of it.

    A GPU counts as hot when its `temp_excess_own_z` >= 2 (the features count those in
    `node_hot_gpus`); the thresholds here are policy choices, not published criteria.
    """

    heat_z: float = 3.0
    """The node's median `temp_excess_own_z` at or above this: the node as a whole runs hot.
    Policy: 3 σ above each GPU's own 30 days is rare for one GPU, let alone half a node."""
    hot_share: float = 0.5
    """At least this share of the node's scored GPUs hot: the heat is the node's, not one GPU's."""
    min_hot: int = 2
    """And at least this many: a one-GPU node (or one hot GPU) is a GPU finding, never a node's."""
    stands_out_z: float = 3.0
    """A GPU whose `temp_excess_vs_node_z` is at or above this runs hotter than its hot node
    (its own fault on top of the node's heat), so its thermal demote stands; so does one whose
    `mem_spread_z` is: the node's air (an incident, its fans, the room) moves core and memory
    together, so a memory-core spread 3 σ wider than its own 30 days is the GPU's own cooling."""

    def __post_init__(self) -> None:
        # Written so that NaN fails too: every comparison with NaN is False.
        if not (0.0 < self.hot_share <= 1.0 and self.min_hot >= 1 and self.heat_z > 0 and self.stands_out_z > 0):
            raise ValueError(
                "node heat settings must satisfy 0 < hot_share <= 1, min_hot >= 1, heat_z > 0, stands_out_z > 0; "
                f"got {self}"
            )


def node_findings(features: pd.DataFrame, settings: NodeHeat | None = None) -> pd.DataFrame:
    """One row per node and cutoff: FINDING_COLUMNS, `suspected` True where the node runs hot as a whole.

    The node columns are the same on every GPU row of a node and cutoff. A frame without them
    (or without `hostname`) gives no rows; NaN values never suspect a node.
    """
    s = settings or NodeHeat()
    if "hostname" not in features.columns or any(c not in features.columns for c in NODE_COLUMNS):
        return pd.DataFrame({c: pd.Series(dtype=_DTYPES[c]) for c in FINDING_COLUMNS})
    keys = ["hostname", "cutoff"] if "cutoff" in features.columns else ["hostname"]
    cols = features[[*keys, *NODE_COLUMNS]].copy()
    cols["hostname"] = cols["hostname"].astype(str)
    for c in NODE_COLUMNS:
        cols[c] = pd.to_numeric(cols[c], errors="coerce").astype(np.float64)
    # max, not first: a node's rows hold the same values, and max skips a row that lacks them
    per = cols.groupby(keys, sort=True, dropna=False)[list(NODE_COLUMNS)].max().reset_index()
    if "cutoff" not in per.columns:
        per["cutoff"] = pd.Series(pd.NaT, index=per.index, dtype=_DTYPES["cutoff"])
    heat, hot, gpus = (per[c].to_numpy(dtype=np.float64) for c in NODE_COLUMNS)
    with np.errstate(invalid="ignore"):
        per["suspected"] = (heat >= s.heat_z) & (hot >= s.min_hot) & (hot >= s.hot_share * gpus)
    return per.rename(columns={"node_heat_z": "heat_z", "node_hot_gpus": "hot_gpus", "node_gpus": "gpus"})[
        list(FINDING_COLUMNS)
    ]


def node_reason(hostname: str, heat_z: float, hot_gpus: float, gpus: float) -> str:
    """The reason every GPU of a suspected node gets: NODE_HEAT_REASON and the node's numbers."""
    return (
        f"{NODE_HEAT_REASON} ({_n(hot_gpus)} of {_n(gpus)} GPUs of {hostname} run hot, "
        f"the node's median {heat_z:.1f} σ above their own 30 days)"
    )


def held_reason(vs_node_z: float, mem_spread_z: float, settings: NodeHeat) -> str:
    """Why a thermal model demote was held at watch on a suspected node."""
    return (
        f"thermal demote held at watch: the GPU runs as hot as its node (its own excess against the node's: "
        f"{_z(vs_node_z)}; memory-core spread against its own 30 days: {_z(mem_spread_z)}; a demote needs "
        f"{settings.stands_out_z:+.1f} σ in either)"
    )


def _z(v: float) -> str:
    return "not known" if math.isnan(v) else f"{v:+.1f} σ"


def _n(v: float) -> str:
    return "?" if math.isnan(v) else f"{v:.0f}"


def is_node_heat_reason(reason: str) -> bool:
    """Whether a decision reason is a node finding's (`node_reason`)."""
    return reason.startswith(NODE_HEAT_REASON)


def cooling_suspected(records: Iterable[tuple[str, Iterable[str]]]) -> dict[str, bool]:
    """Per host of (hostname, reasons) pairs, one per GPU: whether any of its GPUs carries a node finding.

    The finding lives in the GPUs' reasons, which the store keeps, so the service can say it again
    after a restart without a table of its own.
    """
    out: dict[str, bool] = {}
    for host, reasons in records:
        out[host] = out.get(host, False) or any(is_node_heat_reason(str(r)) for r in reasons)
    return out
