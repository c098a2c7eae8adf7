"""NVIDIA's and DCGM's documented health criteria as rules over the feature frame.

These are not learned: each rule is a published threshold (its source is cited next to
it and in `Rule.source`) turned into a vectorised predicate over `build_features`'s
output, plus a sentence an operator can act on. Missing data (NaN, or a feature column
the frame lacks) never fires a rule: a rule only speaks when the counter says so.

They are also the "rule baseline" the evaluation compares the risk model with.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from core.decisions import OUT_OF_SERVICE, REMEDIES, REMEDY_WHEN

Action = Literal["rma", "drain", "watch"]
ACTIONS: tuple[Action, ...] = ("watch", "drain", "rma")
"""Rule actions, least severe first."""

# Sources, cited by every rule below.
_REMAP_DOC = (
    "NVIDIA GPU Memory Error Management (A100/H100 row remapping): remap failure is RMA-eligible "
    "after field diagnostics"
)
_DCGM_HEALTH = "DCGM health watch MEM (DcgmHealthWatch.cpp, DcgmGpuHardwareLimits.h)"
_XID_DOC = "NVIDIA XID errors catalog (docs.nvidia.com/deploy/xid-errors)"
_DCGM_DIAG_PCIE = "DCGM diagnostics: DCGM_LIMIT_MAX_PCIREPLAY_RATE = 8 replays/min (DcgmGpuHardwareLimits.h)"
_MEM_GUIDE = "NVIDIA memory error management guide"
_NVML_RECOVERY = "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml.h nvmlDeviceGpuRecoveryAction_t)"

REMAP_PENDING = "remap_pending"
"""The rule for a row remap (or page retirement) pending a reset: watch, and a reset at idle (NVIDIA's
memory error management guide); the policy drains it only where the ECC head reads wearing memory
(`Thresholds.remap_hold_risk`)."""

RECOVERY_ACTIONS = {
    1: "GPU reset",
    2: "node reboot",
    3: "drain P2P",
    4: "drain P2P and reset",
    5: "recover the IMEX domain",
    6: "PCIe bus reset",
    7: "system reboot",
}
"""The driver's recovery actions (NVML, nvmlDeviceGpuRecoveryAction_t; DCGM field 1523; 0: none asked)."""
RECOVERY_RESET = (1, 4, 6)  # NVIDIA guide: terminate the GPU's processes, reset it (nvidia-smi -r)
RECOVERY_REBOOT = (2, 7)  # NVIDIA guide: the OS may be inconsistent, reboot it
RECOVERY_DRAIN_P2P = 3  # NVIDIA guide: end peer-to-peer work, then read the action again
RECOVERY_IMEX = 5  # the IMEX domain is recovered, not the GPU

# --- thresholds, each with its source ------------------------------------------------------------
ROW_REMAP_LIMIT = 512  # NVIDIA row remapping: 512 uncorrectable remaps per GPU -> remap failure
"""NVIDIA row remapping docs: 512 uncorrectable remaps per GPU; reaching them is a remap failure.
The other failure conditions (a bank already holding 8 uncorrectable remaps needs another; a
remapped row fails again) are not visible in the remapped-row counters: only the driver's
row_remap_failure flag (rule `row_remap_failure`) reports them."""
RETIRED_PAGES_LIMIT = 63  # DCGM health: SBE+DBE retired pages >= 63 -> fail (DCGM_LIMIT_MAX_RETIRED_PAGES)
RETIRED_PAGES_DBE_SOFT_LIMIT = 15  # DCGM health: DBE retired pages > 15 ... (..._SOFT_LIMIT)
RETIRED_PAGES_DBE_NEW_PER_WEEK = 1  # ... and more than 1 new DBE page in the past week -> fail
REPEATED_DBE_30D = 2
"""Product brief / NVIDIA DBE workflow: repeated uncorrectable (DBE, XID 48) errors are an RMA
sign. "Repeated" = 2 or more within 30 days is our policy choice (the docs give no window)."""
OFF_BUS_REPEATED_30D = 2
"""NVIDIA XID catalog: XID 79 (fell off the bus) -> drain, reboot; repeated -> RMA. 2 or more
within 30 days is our policy choice for "repeated"."""
PCIE_REPLAYS_PER_MIN = 8  # DCGM diag fails above 8 PCIe replays/min ("maximum recommended by RM")
PCIE_REPLAYS_PER_HOUR = PCIE_REPLAYS_PER_MIN * 60  # replay_rate_1d is per hour: 480/h
"""replay_rate_1d is a 1-day mean, so a short burst above 8/min is diluted: this rule only
catches sustained replay storms; bursts are left to the model."""
LINK_RATIO_HEALTHY = 1.0  # current/max PCIe width or generation; below 1 = downtrained (REFERENCE.md)

_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Rule:
    """A documented health criterion: which features it reads, when it fires, what to do."""

    name: str
    """snake_case id, e.g. "row_remap_failure"."""
    action: Action
    source: str
    """Where the criterion comes from (a document or DCGM source file)."""
    inputs: tuple[str, ...]
    """Feature columns the predicate and reason read; absent ones are NaN (never fire)."""
    predicate: Callable[[pd.DataFrame], pd.Series]
    """Vectorised: the frame (restricted to `inputs`) -> boolean Series, NaN -> False."""
    reason: Callable[[Mapping[str, Any]], str]
    """One fired row (feature name -> value) -> a sentence with the GPU's values."""

    def __post_init__(self) -> None:
        if not _SNAKE.match(self.name):
            raise ValueError(f"rule name {self.name!r} must be snake_case")
        if self.action not in ACTIONS:
            raise ValueError(f"rule {self.name!r}: action {self.action!r} is not one of {', '.join(ACTIONS)}")
        if not self.source:
            raise ValueError(f"rule {self.name!r} must cite its source")

    def fires(self, features: pd.DataFrame) -> pd.Series:
        """Boolean Series over `features`' index: where this rule fires (missing data never does)."""
        view = features.reindex(columns=list(self.inputs))  # a missing column becomes NaN
        hit = self.predicate(view).to_numpy(dtype=bool, na_value=False)
        return pd.Series(hit, index=features.index, name=self.name)


# --- formatting helpers ----------------------------------------------------------------------------
def _count(v: Any) -> str:
    """A count for a sentence: 1,200."""
    return f"{float(v):,.0f}"


def _times(v: Any) -> str:
    """'1 time' / '3 times'."""
    n = float(v)
    return f"{n:,.0f} time" + ("" if n == 1 else "s")


def _rate(v: Any) -> str:
    """A rate with sensible precision: 1,200 or 7.5 or 0.25."""
    x = float(v)
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _known(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _ge(s: pd.Series, x: float) -> pd.Series:
    return s.ge(x)  # NaN >= x is False


def _gt(s: pd.Series, x: float) -> pd.Series:
    return s.gt(x)


# --- reasons -------------------------------------------------------------------------------------
def _reason_remapped_rows(r: Mapping[str, Any]) -> str:
    return (
        f"{_count(r['remapped_rows_uncorrectable'])} uncorrectable remapped rows >= the "
        f"{ROW_REMAP_LIMIT}-row remap limit: remap failure, RMA after field diagnostics "
        "(NVIDIA row remapping docs)"
    )


def _reason_retired_dbe(r: Mapping[str, Any]) -> str:
    return (
        f"DBE retired pages {_count(r['retired_pages_dbe'])} > {RETIRED_PAGES_DBE_SOFT_LIMIT} with "
        f"{_count(r['retired_pages_dbe_new_7d'])} new in 7 days (DCGM health: more than "
        f"{RETIRED_PAGES_DBE_NEW_PER_WEEK} per week): RMA"
    )


def _dbe_counts(r: Mapping[str, Any], dbe: str, xid: str) -> str:
    parts = []
    if _known(r.get(dbe)) and float(r[dbe]) > 0:
        parts.append(f"{_count(r[dbe])} DBE" + ("" if float(r[dbe]) == 1 else "s"))
    if _known(r.get(xid)) and float(r[xid]) > 0:
        parts.append(f"XID 48 logged {_times(r[xid])}")
    return ", ".join(parts)


def _reason_repeated_dbe(r: Mapping[str, Any]) -> str:
    return (
        f"repeated double-bit ECC errors ({_dbe_counts(r, 'dbe_30d', 'xid_48_30d')} in 30 days): "
        "RMA (NVIDIA DBE workflow: repeated uncorrectable errors)"
    )


def _reason_dbe_recent(r: Mapping[str, Any]) -> str:
    return (
        f"double-bit ECC error in the last 7 days ({_dbe_counts(r, 'dbe_7d', 'xid_48_7d')}): "
        "drain, reset the GPU and follow the DBE workflow (NVIDIA XID 48)"
    )


def _reason_pending(r: Mapping[str, Any]) -> str:
    what = []
    if _known(r.get("row_remap_pending")) and float(r["row_remap_pending"]) >= 1:
        what.append("row remap pending")
    if _known(r.get("retired_pages_pending")) and float(r["retired_pages_pending"]) >= 1:
        what.append("page retirement pending")
    return (
        f"{' and '.join(what)}: unaffected work goes on; reset the GPU at its next idle moment to apply it "
        "(NVIDIA memory error management)"
    )


def _contained(f: pd.DataFrame) -> pd.Series:
    """Where every uncorrectable error of the week was contained (XID 94, no XID 95) on a GPU with dynamic
    page offlining (it reports row remapping: A100 and later): the page is offlined already."""
    return _ge(f["xid_94_7d"], 1) & ~_ge(f["xid_95_7d"], 1) & f["remapped_rows_uncorrectable"].notna()


def _action(r: Mapping[str, Any]) -> str:
    n = int(float(r["recovery_action"]))
    return f"driver's recovery action {n} ({RECOVERY_ACTIONS.get(n, 'unknown')})"


def _reason_gsp(r: Mapping[str, Any]) -> str:
    seen = [f"XID {c} {_times(r[f'xid_{c}_7d'])}" for c in (119, 120) if _known(r.get(f"xid_{c}_7d"))
            and float(r[f"xid_{c}_7d"]) >= 1]  # fmt: skip
    return f"GSP error ({', '.join(seen)} in the last 7 days): drain and reset the GPU (NVIDIA XID catalog)"


def _reason_replays(r: Mapping[str, Any]) -> str:
    per_h = float(r["replay_rate_1d"])
    return (
        f"PCIe replays {_rate(per_h)}/h ({_rate(per_h / 60)}/min, 1-day mean) above DCGM's "
        f"{PCIE_REPLAYS_PER_MIN}/min: check the link, riser and seating"
    )


def _reason_link(r: Mapping[str, Any]) -> str:
    parts = []
    for col, what in (("link_width_ratio", "width"), ("link_gen_ratio", "generation")):
        if _known(r.get(col)) and float(r[col]) < LINK_RATIO_HEALTHY:
            parts.append(f"{what} at {float(r[col]):.0%} of max")
    return f"PCIe link downtrained ({', '.join(parts)}): reseat or inspect at the next maintenance"


def _reason_sbe_high(r: Mapping[str, Any]) -> str:
    rate = r.get("sbe_rate_1d")
    extra = f", SBE rate {_rate(rate)}/day" if _known(rate) else ""
    return f"high single-bit ECC rate (XID 92) {_times(r['xid_92_7d'])} in 7 days{extra}: watch for DBEs and remaps"


# --- the rules -----------------------------------------------------------------------------------
RULES: tuple[Rule, ...] = (
    # NVIDIA row remapping docs + DCGM health (MonitorMemRowRemapFailures: flag > 0 -> fail).
    Rule(
        "row_remap_failure",
        "rma",
        f"{_REMAP_DOC}; DCGM health: DCGM_FI_DEV_ROW_REMAP_FAILURE > 0 -> fail",
        ("row_remap_failure",),
        lambda f: _ge(f["row_remap_failure"], 1),
        lambda r: (
            "row remap failed (driver's remap-failure flag set): RMA after field diagnostics "
            "(NVIDIA row remapping docs)"
        ),
    ),
    # NVIDIA row remapping docs: 512 uncorrectable remaps reached is a remap failure. The
    # per-bank limit (8 uncorrectable remaps in one bank) cannot be seen from these counters.
    Rule(
        "remapped_rows_limit",
        "rma",
        f"{_REMAP_DOC}: {ROW_REMAP_LIMIT} uncorrectable remaps per GPU",
        ("remapped_rows_uncorrectable",),
        lambda f: _ge(f["remapped_rows_uncorrectable"], ROW_REMAP_LIMIT),
        _reason_remapped_rows,
    ),
    # DCGM health (MonitorMemSbeDbeRetiredPages): SBE+DBE retired pages >= 63 -> fail.
    Rule(
        "retired_pages_limit",
        "rma",
        f"{_DCGM_HEALTH}: SBE+DBE retired pages >= {RETIRED_PAGES_LIMIT} -> fail",
        ("retired_pages",),
        lambda f: _ge(f["retired_pages"], RETIRED_PAGES_LIMIT),
        lambda r: f"retired pages {_count(r['retired_pages'])} >= {RETIRED_PAGES_LIMIT} (DCGM health threshold): RMA",
    ),
    # DCGM health (MonitorMemSbeDbeRetiredPages): DBE retired pages > 15 and > 1 new per week.
    Rule(
        "retired_pages_dbe_growth",
        "rma",
        f"{_DCGM_HEALTH}: DBE retired pages > {RETIRED_PAGES_DBE_SOFT_LIMIT} and more than "
        f"{RETIRED_PAGES_DBE_NEW_PER_WEEK} new per week -> fail",
        ("retired_pages_dbe", "retired_pages_dbe_new_7d"),
        lambda f: (
            _gt(f["retired_pages_dbe"], RETIRED_PAGES_DBE_SOFT_LIMIT)
            & _gt(f["retired_pages_dbe_new_7d"], RETIRED_PAGES_DBE_NEW_PER_WEEK)
        ),
        _reason_retired_dbe,
    ),
    # Product brief's RMA signs + NVIDIA XID 48 (DBE workflow): repeated DBEs -> RMA.
    Rule(
        "repeated_dbe",
        "rma",
        f"{_XID_DOC}: XID 48 DBE workflow; product brief: repeated DBE / XID 48 is an RMA sign "
        f"(>= {REPEATED_DBE_30D} in 30 days: policy choice)",
        ("dbe_30d", "xid_48_30d"),
        lambda f: _ge(f["dbe_30d"], REPEATED_DBE_30D) | _ge(f["xid_48_30d"], REPEATED_DBE_30D),
        _reason_repeated_dbe,
    ),
    # NVIDIA XID catalog: XID 79 repeated -> RMA.
    Rule(
        "off_bus_repeated",
        "rma",
        f"{_XID_DOC}: XID 79 (fell off the bus) repeated -> RMA (>= {OFF_BUS_REPEATED_30D} in 30 days: policy choice)",
        ("xid_79_30d",),
        lambda f: _ge(f["xid_79_30d"], OFF_BUS_REPEATED_30D),
        lambda r: f"XID 79 fell off the bus {_times(r['xid_79_30d'])} in 30 days: RMA (repeated XID 79)",
    ),
    # NVIDIA XID catalog: XID 64 (remap / page retirement recording failure) -> reset; RMA candidate.
    Rule(
        "remap_recording_failure",
        "rma",
        f"{_XID_DOC}: XID 64 (row remap / page retirement recording failure) -> reset GPU; RMA candidate",
        ("xid_64_7d",),
        lambda f: _ge(f["xid_64_7d"], 1),
        lambda r: (
            f"XID 64 (remap/retirement recording failed) {_times(r['xid_64_7d'])} in 7 days: "
            "reset the GPU, RMA candidate"
        ),
    ),
    # NVIDIA XID catalog: XID 79 once -> drain, reboot.
    Rule(
        "off_bus",
        "drain",
        f"{_XID_DOC}: XID 79 (fell off the bus) -> drain, reboot",
        ("xid_79_7d",),
        lambda f: _ge(f["xid_79_7d"], 1),
        lambda r: f"XID 79 fell off the bus {_times(r['xid_79_7d'])} in the last 7 days: drain and reboot the node",
    ),
    # NVIDIA XID catalog: XID 95 uncontained ECC error -> reset GPU; DCGM health fails on it too.
    Rule(
        "uncontained_ecc",
        "drain",
        f"{_XID_DOC}: XID 95 (uncontained ECC error) -> reset GPU; {_DCGM_HEALTH}: uncontained error -> fail",
        ("xid_95_7d",),
        lambda f: _ge(f["xid_95_7d"], 1),
        lambda r: (
            f"uncontained ECC error (XID 95) {_times(r['xid_95_7d'])} in the last 7 days: drain and reset the GPU"
        ),
    ),
    # NVIDIA XID catalog: XID 48 (DBE) is fatal: DBE workflow, drain, reset. Not where every one of the
    # week was contained (XID 94) on a GPU with dynamic page offlining: the page is offlined already and
    # unaffected work goes on without a reset (memory error management guide; the remap, if any, is
    # the pending remap's reset at idle).
    Rule(
        "dbe_recent",
        "drain",
        f"{_XID_DOC}: XID 48 (double-bit ECC error) -> DBE workflow, drain, reset; XID 94 (contained, "
        f"dynamic page offlining) -> no reset ({_MEM_GUIDE})",
        ("dbe_7d", "xid_48_7d", "xid_94_7d", "xid_95_7d", "remapped_rows_uncorrectable"),
        lambda f: (_ge(f["dbe_7d"], 1) | _ge(f["xid_48_7d"], 1)) & ~_contained(f),
        _reason_dbe_recent,
    ),
    # NVIDIA XID catalog: XID 119 (GSP RPC timeout) and 120 (GSP error) -> reset the GPU.
    Rule(
        "gsp_error",
        "drain",
        f"{_XID_DOC}: XID 119 (GSP RPC timeout) / 120 (GSP error) -> reset GPU",
        ("xid_119_7d", "xid_120_7d"),
        lambda f: _ge(f["xid_119_7d"], 1) | _ge(f["xid_120_7d"], 1),
        _reason_gsp,
    ),
    # The driver's own recovery action (NVIDIA guide, "Error Recovery and Response Flags"): a reboot.
    Rule(
        "driver_reboot",
        "drain",
        f"{_NVML_RECOVERY}: node reboot / system reboot ({_MEM_GUIDE})",
        ("recovery_action",),
        lambda f: f["recovery_action"].isin(RECOVERY_REBOOT),
        lambda r: f"{_action(r)}: drain and reboot the node (NVIDIA memory error management)",
    ),
    # ... a GPU (or its PCIe bus) reset.
    Rule(
        "driver_reset",
        "drain",
        f"{_NVML_RECOVERY}: GPU reset / drain P2P and reset / PCIe bus reset ({_MEM_GUIDE})",
        ("recovery_action",),
        lambda f: f["recovery_action"].isin(RECOVERY_RESET),
        lambda r: f"{_action(r)}: drain and reset the GPU (NVIDIA memory error management)",
    ),
    # ... drain peer-to-peer work, then read the action again.
    Rule(
        "driver_drain_p2p",
        "drain",
        f"{_NVML_RECOVERY}: drain P2P, then read the action again ({_MEM_GUIDE})",
        ("recovery_action",),
        lambda f: f["recovery_action"].eq(RECOVERY_DRAIN_P2P),
        lambda r: f"{_action(r)}: drain its peer-to-peer work, then read the action again (NVIDIA)",
    ),
    # NVIDIA memory error management: a remap / page retirement takes effect only after a GPU reset
    # (pending until then); unaffected work goes on meanwhile and new work may launch, so the reset
    # waits for the next idle moment; DCGM health (MonitorMemRetiredPending) flags it.
    Rule(
        REMAP_PENDING,
        "watch",
        "NVIDIA GPU Memory Error Management: a pending row remap / page retirement applies at the next GPU "
        f"reset, unaffected applications continue; {_DCGM_HEALTH}: retired pages pending",
        ("row_remap_pending", "retired_pages_pending"),
        lambda f: _ge(f["row_remap_pending"], 1) | _ge(f["retired_pages_pending"], 1),
        _reason_pending,
    ),
    # DCGM diag: more than 8 PCIe replays per minute fails (DCGM_LIMIT_MAX_PCIREPLAY_RATE).
    Rule(
        "pcie_replays",
        "watch",
        f"{_DCGM_DIAG_PCIE}: above {PCIE_REPLAYS_PER_MIN}/min fails",
        ("replay_rate_1d",),
        lambda f: _gt(f["replay_rate_1d"], PCIE_REPLAYS_PER_HOUR),
        _reason_replays,
    ),
    # REFERENCE.md (PCIe): link downtraining (x16 -> x8, Gen5 -> Gen4) is a degradation sign.
    Rule(
        "link_downtrained",
        "watch",
        "NVML current vs max PCIe link width/generation: downtraining is a link degradation sign",
        ("link_width_ratio", "link_gen_ratio"),
        lambda f: f["link_width_ratio"].lt(LINK_RATIO_HEALTHY) | f["link_gen_ratio"].lt(LINK_RATIO_HEALTHY),
        _reason_link,
    ),
    # NVIDIA XID catalog: XID 92 (high single-bit ECC rate) -> watch.
    Rule(
        "sbe_rate_high",
        "watch",
        f"{_XID_DOC}: XID 92 (high single-bit ECC error rate) -> watch",
        ("xid_92_7d", "sbe_rate_1d"),
        lambda f: _ge(f["xid_92_7d"], 1),
        _reason_sbe_high,
    ),
    # The driver's recovery action 5: the IMEX domain is recovered, no GPU remedy.
    Rule(
        "driver_imex",
        "watch",
        f"{_NVML_RECOVERY}: recover the IMEX domain",
        ("recovery_action",),
        lambda f: f["recovery_action"].eq(RECOVERY_IMEX),
        lambda r: f"{_action(r)}: recover the IMEX domain (no GPU remedy)",
    ),
)
BY_NAME: dict[str, Rule] = {r.name: r for r in RULES}

BASELINE_RULES: tuple[Rule, ...] = RULES
"""The rule baseline of the evaluation: NVIDIA's and DCGM's thresholds alone. Every rule
above is one; a rule of our own (not a published criterion) goes in RULES only."""

OUT_OF_SERVICE_RULES: tuple[Rule, ...] = tuple(r for r in RULES if r.action in OUT_OF_SERVICE)
"""Rules whose action takes the GPU out of service (drain, RMA); when they let it go, a probation
may follow (`conditions.on_probation`)."""

# --- remedies: what brings a GPU back, beside what its decision does to work ------------------------
Remedy = Literal["none", "reset", "reboot", "replace"]
"""One of `core.decisions.REMEDIES` (weakest first): where several sources apply, the strongest wins."""
When = Literal["idle", "now"]
"""One of `core.decisions.REMEDY_WHEN` (least urgent first): `idle` is the next moment the GPU has no
work (or a maintenance window where one is configured), `now` is as soon as its work is drained."""


@dataclass(frozen=True)
class RemedyRef:
    """A remedy, when it is due, and why (the sentence cites its source)."""

    remedy: Remedy
    when: When
    why: str

    def __post_init__(self) -> None:
        if self.remedy not in REMEDIES or self.when not in REMEDY_WHEN:
            raise ValueError(f"remedy {self.remedy!r} {self.when!r}: expected one of {REMEDIES} and of {REMEDY_WHEN}")


RULE_REMEDIES: dict[str, RemedyRef] = {
    # NVIDIA's RMA criteria (every rma rule above): the GPU is replaced, not remedied in place.
    **{r.name: RemedyRef("replace", "now", f"{r.name}: NVIDIA's RMA criteria") for r in RULES if r.action == "rma"},
    # NVIDIA XID catalog: XID 79 -> reboot; a GPU off the bus cannot be reached by a GPU reset.
    "off_bus": RemedyRef("reboot", "now", f"XID 79, off the bus: a reset cannot reach it ({_XID_DOC})"),
    # NVIDIA XID catalog: XID 95 (uncontained ECC error) -> reset the GPU.
    "uncontained_ecc": RemedyRef("reset", "now", f"XID 95, uncontained ECC error ({_XID_DOC})"),
    # NVIDIA XID catalog: XID 48 (DBE) -> DBE workflow, drain, reset.
    "dbe_recent": RemedyRef("reset", "now", f"XID 48, double-bit ECC error ({_XID_DOC})"),
    # NVIDIA XID catalog: GSP errors 119 (RPC timeout) and 120 -> reset the GPU.
    "gsp_error": RemedyRef("reset", "now", f"XID 119/120, GSP error ({_XID_DOC})"),
    # NVIDIA memory error management: unaffected work goes on; the remap (or page retirement) is
    # applied at the next GPU reset, "as part of the regular service window".
    REMAP_PENDING: RemedyRef("reset", "idle", f"pending row remap applies at the next reset — {_MEM_GUIDE}"),
    # The driver's own recovery action (NVML, nvmlDeviceGpuRecoveryAction_t; DCGM field 1523).
    "driver_reset": RemedyRef("reset", "now", f"driver's recovery action: GPU reset ({_NVML_RECOVERY})"),
    "driver_reboot": RemedyRef("reboot", "now", f"driver's recovery action: node reboot ({_NVML_RECOVERY})"),
    "driver_drain_p2p": RemedyRef(
        "none", "idle", f"driver's recovery action: drain P2P, then read the action again ({_NVML_RECOVERY})"
    ),
    "driver_imex": RemedyRef(
        "none", "idle", f"driver's recovery action: recover the IMEX domain, no GPU remedy ({_NVML_RECOVERY})"
    ),
}
"""Remedy per rule name; a rule not named (the watch rules) asks for none."""

WORN_REMAP_REMEDY = RemedyRef(
    "reset", "now", f"pending row remap on memory that may be wearing: the reset does not wait — {_MEM_GUIDE}"
)
"""A pending remap the policy drains for its wearing memory (`policy.remap_drain_rows`): reset now."""

LOST_REMEDY = RemedyRef("reboot", "now", f"GPU lost, off the bus: a reset cannot reach it ({_XID_DOC}: XID 79)")
"""A GPU the collector reports lost (`findings.with_lost_gpus`): as XID 79."""

REPEAT_REMEDIES = 2
"""A GPU whose remedy opens for the REPEAT_REMEDIES-th time within REPEAT_WINDOW_DAYS goes to RMA
(`remedy.repeat_offender`): a second fault after a reset or reboot is a replacement, not another
reset. The public 348-day trace of a 400-server LLM cluster (stepfun-ai/InfiniteHBD-Trace;
REFERENCE.md): 16 of the 30 servers with DBE faults had the fault again, so a GPU that faulted once
is about as likely as not to fault again, and a second remedy already spends what a third would buy."""
REPEAT_WINDOW_DAYS = 30
"""The window of REPEAT_REMEDIES: the 30 days of the RMA rules' own repeats (`REPEATED_DBE_30D`,
`OFF_BUS_REPEATED_30D`: NVIDIA gives "repeated", we give it a window)."""

HIT_COLUMNS = ("row", "rule", "action", "reason")


def evaluate_rules(features: pd.DataFrame, rules: tuple[Rule, ...] = RULES) -> pd.DataFrame:
    """One row per (features row, rule that fired): columns row (index label), rule, action, reason."""
    parts: list[pd.DataFrame] = []
    for rule in rules:
        hit = rule.fires(features).to_numpy()
        if not hit.any():
            continue
        fired = features.reindex(columns=list(rule.inputs)).loc[hit]
        # Reasons only for rows that fired: formatting is per row, predicates are not. Each row as a dict of
        # Python values (`to_dict("records")`'s), built from whole columns.
        names, values = list(fired.columns), [fired[c].tolist() for c in fired.columns]
        reasons = [rule.reason(dict(zip(names, rec, strict=True))) for rec in zip(*values, strict=True)]
        parts.append(
            pd.DataFrame(
                {"row": fired.index, "rule": rule.name, "action": rule.action, "reason": reasons},
                columns=list(HIT_COLUMNS),
            )
        )
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in HIT_COLUMNS})
    return pd.concat(parts, ignore_index=True)


def remap_alone(hits: pd.DataFrame, index: pd.Index) -> np.ndarray:
    """Per features row (`index`): NVIDIA's pending remap fired among its `hits` (`evaluate_rules`) and
    no drain or RMA rule did: a watch and a reset at idle, unless the policy finds its memory wearing
    (`policy.remap_drain_rows`, `replay.remap_held`)."""
    rows = index.get_indexer(pd.Index(hits["row"]))
    out = hits["action"].isin(OUT_OF_SERVICE).to_numpy()
    remap, other = np.zeros(len(index), dtype=bool), np.zeros(len(index), dtype=bool)
    remap[rows[hits["rule"].to_numpy() == REMAP_PENDING]] = True
    other[rows[out]] = True
    return remap & ~other


def rule_alerts(features: pd.DataFrame, rules: tuple[Rule, ...] = BASELINE_RULES) -> pd.Series:
    """Whether any rule (rma, drain or watch) fires, per features row: the baseline's alert."""
    out = np.zeros(len(features), dtype=bool)
    for rule in rules:
        out |= rule.fires(features).to_numpy()
    return pd.Series(out, index=features.index, name="rule_alert")
