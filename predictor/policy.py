"""Decisions: the worst of what the rules say and what the risk model says, with reasons.

A rule (NVIDIA/DCGM criterion, `predictor.rules`) can ask for watch, drain or rma; the
model's risk score can ask for watch or demote; a node finding (`predictor.node`: the node's
GPUs run hot together) asks for watch on each GPU of the node and holds a thermal model
demote there at watch, since the heat is the node's cooling, not the GPU. The decision is
the most severe of them, and its reasons are the sentences of whatever set it: rule reasons
first (a documented criterion outranks a score), then the node's, then the model's; a node
finding that did not set the decision follows as context. `decision_changes` says what a
scoring round does to each GPU's standing decision; the store persists what it says.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from core.decisions import DECISIONS, SEVERITY
from predictor.conditions import (
    demote_waits,
    feature_column,
    heat_alone,
    heat_held,
    judged_heats,
    on_probation,
    remap_waits,
)
from predictor.node import NodeHeat, held_reason, node_findings, node_reason
from predictor.reasons import (
    agree_reason,
    heat_reason,
    hold_reason,
    pending_reason,
    probation_reason,
    remap_context,
    remap_stands_reason,
    remap_wear_reason,
)
from predictor.rules import REMAP_PENDING, evaluate_rules, remap_alone
from predictor.thresholds import HEADS, Thresholds

DECISION_DTYPE = pd.CategoricalDtype(DECISIONS, ordered=True)
"""Ordered, so decisions sort and compare by severity (rma > drain > ...)."""


def _model_severity(risk: np.ndarray, thresholds: Thresholds) -> np.ndarray:
    """0 (ok), 1 (watch) or 2 (demote) per row; NaN risk is 0 (the rules decide alone)."""
    with np.errstate(invalid="ignore"):
        return np.where(
            risk >= thresholds.demote,
            SEVERITY["demote"],
            np.where(risk >= thresholds.watch, SEVERITY["watch"], 0),
        )


def top_heads(risk: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the name of the highest mode head ("" if none is known) and its value."""
    cols = [c for c in HEADS if c in risk.columns]
    n = len(risk)
    if not cols:
        return np.full(n, "", dtype=object), np.full(n, np.nan)
    h = risk[cols].to_numpy(dtype=np.float64, na_value=np.nan)
    known = ~np.isnan(h).all(axis=1)
    arg = np.argmax(np.where(np.isnan(h), -np.inf, h), axis=1)
    names = np.asarray([HEADS[c] for c in cols], dtype=object)[arg]
    return np.where(known, names, ""), np.where(known, h[np.arange(n), arg], np.nan)


def _as_reasons(value: Any) -> list[str]:
    """The model's reasons for one row as a list (None/NaN/absent -> [])."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Sequence | np.ndarray):
        return [str(v) for v in value]
    return []


def _note(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return str(value).strip()


@dataclass(frozen=True)
class CarriedOver:
    """What a round carries over from the rounds before, per row of its features (in their order): the
    answers of `predictor.past.PastRounds` as `decide` reads them. Times are naive UTC datetime64[ns], NaT where
    nothing is carried for the row; those counted to this round (all but `demoted`) need a `cutoff`
    column in the features (a ValueError without one). None: not asked, as below."""

    risk_since: np.ndarray | None = None
    """When the GPU's risk last rose to `demote` and stayed (NaT: in this round); a model demote whose
    risk has not held the wait of its riskiest head (`Thresholds.wait_for`) is a watch saying so. None:
    the risk of this instant decides alone."""
    released: np.ndarray | None = None
    """When a drain or RMA last let the GPU go, where its rounds since continue it without a break
    (`replay.probation_began`; NaT: none). Where no drain or RMA holds now and the risk is at
    `probation_risk` or above, the GPU is demoted on probation (`on_probation`), with a reason saying
    since when and until when. None: no probation."""
    demoted: np.ndarray | None = None
    """Since when the GPU's standing decision is a demote (NaT: it is not). Where the risk is at
    `Thresholds.release_level` or above, the demote is held (`replay.held_demotes`), with a reason
    saying since when and what ends it. None: no hold."""
    heat_since: np.ndarray | None = None
    """When the GPU's run of rounds whose core heat alone counts (`conditions.heat_alone`) began (NaT:
    in this round). Where its heat counts now and has held `Thresholds.thermal_heat_for_s`, the GPU is
    demoted whatever its risk (`heat_held`), with a reason saying how hot and since when. None: as all
    NaT (without a `cutoff` column, only a hold of 0 is met)."""
    ecc_since: np.ndarray | None = None
    """When the GPU's run of rounds with its ECC risk at `Thresholds.remap_hold_risk` or above began
    (NaT: this round, or it is not at it). A pending remap, where no drain or RMA rule fires, is a watch
    and a reset at idle; it drains where the ECC risk has held that level for `remap_hold_for_s`
    (`remap_waits`, `remap_drain_rows`) or the GPU's drain stands (`drained`): a drain, once made, stands
    until the remap is taken. None: every run begins this round."""
    drained: np.ndarray | None = None
    """Whether the GPU's drain stands (bool): its standing decision is a drain or RMA, or its ECC risk
    held `remap_hold_risk` within `remap_hold_clear_s` (`replay.recently_wore`). None: none does."""


def decide(
    features: pd.DataFrame,
    risk: pd.DataFrame,
    thresholds: Thresholds,
    rule_hits: pd.DataFrame | None = None,
    *,
    nodes: pd.DataFrame | None = None,
    node_heat: NodeHeat | None = None,
    carried: CarriedOver | None = None,
) -> pd.DataFrame:
    """Per GPU row: `decision` (one of DECISIONS) and `reasons` (list[str]) from rules, risk, node
    findings and what the rounds before carry over (`carried`; None: nothing, this round decides alone).

    `risk` has the features' index and a `risk` column, optionally the heads `risk_ecc`,
    `risk_thermal`, `risk_pcie`, the model's `reasons` (list[str] per row) and a `risk_note`
    (why a row could not be scored). `rule_hits` is `evaluate_rules(features)`'s output and
    `nodes` is `node_findings(features, node_heat)`'s (each computed here when None).
    On a suspected node every GPU is at least `watch`, and a model demote whose riskiest head
    is thermal is held at `watch` unless the GPU's `temp_excess_vs_node_z` or its `mem_spread_z`
    reaches `node_heat.stands_out_z`; what a rule asks for is never lowered.
    """
    past = carried or CarriedOver()
    _check_frames(features, risk)
    n = len(features)
    hits = evaluate_rules(features) if rule_hits is None else rule_hits
    pos, hit_sev = _hit_severity(features, hits)
    remap_drain = remap_drain_rows(features, hits, risk, thresholds, past.ecc_since, past.drained)
    rule_sev = _rule_severity(n, pos, hit_sev, remap_drain)

    r = risk["risk"].to_numpy(dtype=np.float64, na_value=np.nan)
    model_sev = _model_severity(r, thresholds)
    heat = node_heat or NodeHeat()
    on_hot_node, node_text = _hot_node_rows(features, node_findings(features, heat) if nodes is None else nodes)
    mode, _ = top_heads(risk)
    held = _node_held(features, mode, model_sev, on_hot_node, heat)
    model_sev[held] = SEVERITY["watch"]
    pending = agreed = np.zeros(n, dtype=bool)
    if past.risk_since is not None and thresholds.longest_wait > pd.Timedelta(0):
        waits, cut_short = demote_waits(features, past.risk_since, thresholds, mode)
        pending = (model_sev == SEVERITY["demote"]) & waits
        agreed = (model_sev == SEVERITY["demote"]) & cut_short
        model_sev[pending] = SEVERITY["watch"]
    node_sev = np.where(on_hot_node, SEVERITY["watch"], 0)
    standing = _standing_demotes(features, r, rule_sev >= SEVERITY["drain"], thresholds, past)
    standing_sev = np.where(standing.probation | standing.heat | standing.hold, SEVERITY["demote"], 0)
    final = np.maximum(np.maximum(rule_sev, model_sev), np.maximum(node_sev, standing_sev))

    reasons: list[list[str]] = [[] for _ in range(n)]
    # Rule reasons first, only those whose action set the decision (hits keep RULES order).
    hit_reasons, set_it = hits["reason"].to_numpy(), hit_sev == final[pos]
    for i in np.flatnonzero(set_it):
        reasons[pos[i]].append(str(hit_reasons[i]))
    stands = None if past.ecc_since is None or past.drained is None else np.asarray(past.drained, dtype=bool)
    _add_remap_context(reasons, hits, pos, set_it, risk, thresholds)
    _add_remap_drain(reasons, hits, pos, np.flatnonzero(remap_drain & (rule_sev == final)), risk, thresholds, stands)
    # Then the node's, where it set the decision (with why a demote was held) ...
    vs_node, mem_spread = feature_column(features, "temp_excess_vs_node_z"), feature_column(features, "mem_spread_z")
    for i in np.flatnonzero(on_hot_node & (node_sev == final)):
        reasons[i].append(node_text[i])
        if held[i]:
            reasons[i].append(held_reason(float(vs_node[i]), float(mem_spread[i]), heat))
    # ... then the model's, where the model's own decision is the final one (a pending demote says so first).
    _add_pending_reasons(reasons, features, np.flatnonzero(pending & (model_sev == final)), past, thresholds, mode)
    # ... or why it did not wait, where two readings agree.
    _add_agree_reasons(reasons, features, np.flatnonzero(agreed & (model_sev == final)), thresholds)
    # ... or a standing demote's (a probation, the heat alone, a hold), where one set the decision (the
    # model's reasons then say why the risk).
    standing_set = standing.explain(reasons, features, r, (final == SEVERITY["demote"]) & (model_sev < final))
    set_by_model = ((model_sev == final) & (model_sev > 0)) | standing_set
    _add_model_reasons(reasons, risk, r, np.flatnonzero(set_by_model))
    # A node finding below a worse decision still says what the GPU's node is going through.
    for i in np.flatnonzero(on_hot_node & (node_sev < final)):
        reasons[i].append(node_text[i])
    # Unscored rows: say so even when the rules leave them ok, so "ok" never hides "not scored".
    for i in np.flatnonzero(np.isnan(r)):
        note = _note(risk["risk_note"].iat[i]) if "risk_note" in risk.columns else ""
        reasons[i].append(f"no risk score: {note}" if note else "no risk score")

    decision = pd.Categorical.from_codes(final, dtype=DECISION_DTYPE)
    out = pd.DataFrame({"decision": decision}, index=features.index)
    out["reasons"] = pd.Series(reasons, index=features.index, dtype=object)
    return out


def _add_pending_reasons(
    reasons: list[list[str]], features: pd.DataFrame, rows: np.ndarray, past: CarriedOver, thresholds: Thresholds,
    mode: np.ndarray,
) -> None:  # fmt: skip
    """Append to `rows`' reasons why their model demote waits: since when its risk is high
    (`past.risk_since`; NaT: this round's cutoff) and until when (`pending_reason`)."""
    load_share, surprise = feature_column(features, "heat_load_share"), feature_column(features, "replay_surprise_6h")
    mem_spread, own_vs_node = feature_column(features, "mem_spread_z"), feature_column(features, "heat_vs_node_own_z")
    since = past.risk_since
    for i in rows:
        began = pd.Timestamp(since[i]) if since is not None and not pd.isna(since[i]) else None
        at = began.tz_localize("UTC") if began is not None else pd.Timestamp(features["cutoff"].iat[i])
        reasons[i].append(
            pending_reason(
                at,
                thresholds,
                str(mode[i]),
                float(load_share[i]),
                float(surprise[i]),
                float(mem_spread[i]),
                float(own_vs_node[i]),
            )
        )


def _add_agree_reasons(
    reasons: list[list[str]], features: pd.DataFrame, rows: np.ndarray, thresholds: Thresholds
) -> None:
    """Append to `rows`' reasons why their thermal demote did not wait: the readings (`agree_reason`)."""
    heat_z, spread_z = feature_column(features, "heat_excess_z"), feature_column(features, "mem_spread_z")
    vs_node_z = feature_column(features, "heat_vs_node_own_z")
    for i in rows:
        reasons[i].append(agree_reason(float(heat_z[i]), float(spread_z[i]), float(vs_node_z[i]), thresholds))


@dataclass(frozen=True)
class _Standing:
    """Per row, the demotes that stand apart from the round's own model demote, and since when."""

    probation: np.ndarray
    """On probation after a drain or RMA let the GPU go (at `released`)."""
    heat: np.ndarray
    """On its core's heat alone, held since `heat_since` (NaT: this round)."""
    hold: np.ndarray
    """A standing demote held (since `demoted`)."""
    released: np.ndarray | None
    heat_since: np.ndarray
    demoted: np.ndarray | None
    thresholds: Thresholds

    def explain(self, reasons: list[list[str]], features: pd.DataFrame, r: np.ndarray, open_: np.ndarray) -> np.ndarray:
        """Append to the rows `open_` (a demote the model's own did not set) the reason of the standing
        demote that set it: the probation's first, then the heat's, then the hold's. Returns those rows."""
        th = self.thresholds
        # The round's time: its cutoff, or without one (a caller's own frame) when the GPU was last seen.
        now = features["cutoff"] if "cutoff" in features.columns else features.get("last_seen")
        probation = self.probation & open_
        heat = self.heat & open_ & ~probation
        hold = self.hold & open_ & ~probation & ~heat
        for i in np.flatnonzero(probation):
            began = pd.Timestamp(self.released[i]).tz_localize("UTC")  # type: ignore[index]
            reasons[i].append(probation_reason(began, float(r[i]), th))
        heat_z, vs_node_z = judged_heats(features, th)
        for i in np.flatnonzero(heat):
            t = self.heat_since[i]
            if not np.isnat(t):
                began = pd.Timestamp(t).tz_localize("UTC")
            else:
                began = pd.Timestamp(now.iat[i]) if now is not None else pd.Timestamp.now(tz="UTC").floor("min")
            reasons[i].append(heat_reason(float(heat_z[i]), float(vs_node_z[i]), began, th))
        for i in np.flatnonzero(hold):
            began = pd.Timestamp(self.demoted[i]).tz_localize("UTC")  # type: ignore[index]
            reasons[i].append(hold_reason(began, float(r[i]), th))
        return np.asarray(probation | heat | hold)


def _standing_demotes(
    features: pd.DataFrame,
    r: np.ndarray,
    out_now: np.ndarray,
    thresholds: Thresholds,
    past: CarriedOver,
) -> _Standing:
    """Per row: whether the GPU is demoted on probation (`past.released`, `on_probation`), on its heat
    alone (`heat_alone`, held since `past.heat_since` for `heat_held`), and whether its standing demote
    is held (`past.demoted`: since when it stands; risk `r` at the release level)."""
    released, demoted, heat_since = past.released, past.demoted, past.heat_since
    n = len(features)
    probation = hold = np.zeros(n, dtype=bool)
    if released is not None and thresholds.probation_for_s > 0:
        probation = on_probation(_cutoffs(features, "released"), released, out_now, r, thresholds)
    if demoted is not None:
        with np.errstate(invalid="ignore"):
            hold = ~np.isnat(np.asarray(demoted, dtype="datetime64[ns]")) & (r >= thresholds.release_level)
    warm = np.full(n, np.datetime64("NaT"), dtype="datetime64[ns]") if heat_since is None else heat_since
    heat = heat_alone(features, thresholds)
    if heat.any():
        # Without the rounds before, every run begins in this round (NaT), whatever its cutoff.
        at = _cutoffs(features, "heat_since") if heat_since is not None else np.zeros(n, dtype="datetime64[ns]")
        heat &= heat_held(at, warm, thresholds)
    return _Standing(probation, heat, hold, released, warm, demoted, thresholds)


def _cutoffs(features: pd.DataFrame, argument: str) -> pd.Series:
    """The features' `cutoff` column, which `argument`'s times are counted to; a ValueError saying so without it."""
    if "cutoff" not in features.columns:
        raise ValueError(f"decide needs a 'cutoff' column in features to count {argument} to (one per row)")
    return features["cutoff"]


def _hot_node_rows(features: pd.DataFrame, nodes: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """Per row: whether its node (at its cutoff) is suspected of a cooling problem, and the node's reason."""
    n = len(features)
    hot = nodes.loc[nodes["suspected"].to_numpy(dtype=bool)] if "suspected" in nodes.columns else nodes.iloc[:0]
    if not len(hot) or "hostname" not in features.columns:
        return np.zeros(n, dtype=bool), [""] * n
    # Findings per cutoff when both sides know it (a backtest scores many cutoffs at once).
    by_cutoff = "cutoff" in features.columns and bool(hot["cutoff"].notna().all())

    def keys(frame: pd.DataFrame) -> pd.Index:
        host = frame["hostname"].astype(str).to_numpy()
        return pd.MultiIndex.from_arrays([host, frame["cutoff"].array]) if by_cutoff else pd.Index(host)

    found = keys(hot)
    if not found.is_unique:
        raise ValueError("node findings name a node (at a cutoff) more than once")
    at = found.get_indexer(keys(features))
    texts = [
        node_reason(str(h), float(z), float(k), float(g))
        for h, z, k, g in zip(hot["hostname"], hot["heat_z"], hot["hot_gpus"], hot["gpus"], strict=True)
    ]
    return at >= 0, [texts[k] if k >= 0 else "" for k in at]


def held_by_node(
    features: pd.DataFrame, risk: pd.DataFrame, thresholds: Thresholds, node_heat: NodeHeat | None = None
) -> np.ndarray:
    """Per row: whether the model's demote is held at watch by a node finding (as `decide` does);
    the evaluation counts alerts the way the service decides them."""
    heat = node_heat or NodeHeat()
    model_sev = _model_severity(risk["risk"].to_numpy(dtype=np.float64, na_value=np.nan), thresholds)
    on_hot_node, _ = _hot_node_rows(features, node_findings(features, heat))
    return _node_held(features, top_heads(risk)[0], model_sev, on_hot_node, heat)


def _node_held(
    features: pd.DataFrame, mode: np.ndarray, model_sev: np.ndarray, on_hot_node: np.ndarray, heat: NodeHeat
) -> np.ndarray:
    """Rows whose model demote is held at watch: on a hot node, thermal head riskiest (`mode`, per
    row as `top_heads` names it), standing out neither of its node's heat nor of its own memory-core spread."""
    candidates = on_hot_node & (model_sev == SEVERITY["demote"])
    if not candidates.any():
        return candidates
    with np.errstate(invalid="ignore"):
        # Its core beyond its node's, or its memory-core spread beyond its own past: the node's
        # air moves core and memory together, a failing heat sink on the GPU widens the spread.
        stands_out = (feature_column(features, "temp_excess_vs_node_z") >= heat.stands_out_z) | (
            feature_column(features, "mem_spread_z") >= heat.stands_out_z
        )
    return candidates & (mode == "thermal") & ~stands_out


def _check_frames(features: pd.DataFrame, risk: pd.DataFrame) -> None:
    """ValueError unless features has a unique index and risk scores the same rows, with a `risk` column."""
    if not features.index.is_unique:
        raise ValueError("decide needs a features frame with a unique index (one row per GPU and cutoff)")
    if not risk.index.equals(features.index):
        raise ValueError(
            f"risk frame's index ({len(risk)} rows) differs from the features' ({len(features)} rows): "
            "score the same rows, in the same order"
        )
    if "risk" not in risk.columns:
        raise ValueError(f"risk frame has no 'risk' column (columns: {', '.join(map(str, risk.columns))})")


def _hit_severity(features: pd.DataFrame, hits: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per rule hit: the position of its row in `features` and the severity of its action."""
    pos = features.index.get_indexer(pd.Index(hits["row"]))
    if (pos < 0).any():
        bad = hits["row"].to_numpy()[pos < 0][0]
        raise ValueError(f"rule hits name row {bad!r}, which is not in the features frame")
    hit_sev = hits["action"].map(SEVERITY).to_numpy(dtype=np.int64, na_value=-1)
    if (hit_sev < 0).any():
        bad = hits["action"].to_numpy()[hit_sev < 0][0]
        raise ValueError(f"rule hits hold action {bad!r}; expected one of rma, drain, watch")
    return pos, hit_sev


def _add_remap_context(
    reasons: list[list[str]], hits: pd.DataFrame, pos: np.ndarray, set_it: np.ndarray, risk: pd.DataFrame,
    thresholds: Thresholds,
) -> None:  # fmt: skip
    """After a pending remap's reason, where its watch set the decision and the ECC head's risk is known:
    what that risk makes of the remap (`remap_context`): a weak row on a healthy GPU is remapped too, and
    NVIDIA lets work go on until the reset; a wearing memory shows in the ECC risk, and drains."""
    if "risk_ecc" not in risk.columns:
        return
    ecc = risk["risk_ecc"].to_numpy(dtype=np.float64, na_value=np.nan)
    for i in np.flatnonzero(set_it & (hits["rule"].to_numpy() == REMAP_PENDING)):
        if not np.isnan(ecc[pos[i]]):
            reasons[pos[i]].append(remap_context(float(ecc[pos[i]]), thresholds))


def _rule_severity(n: int, pos: np.ndarray, hit_sev: np.ndarray, remap_drain: np.ndarray) -> np.ndarray:
    """Per row: the worst action of the rules that fired; a drain where a pending remap's memory wears
    (`remap_drain`)."""
    rule_sev = np.zeros(n, dtype=np.int64)
    np.maximum.at(rule_sev, pos, hit_sev)
    rule_sev[remap_drain] = np.maximum(rule_sev[remap_drain], SEVERITY["drain"])
    return rule_sev


def remap_drain_rows(
    features: pd.DataFrame, hits: pd.DataFrame, risk: pd.DataFrame, thresholds: Thresholds,
    ecc_since: np.ndarray | None, drained: np.ndarray | None,
) -> np.ndarray:  # fmt: skip
    """Per row: a pending remap, with no drain or RMA rule (`rules.remap_alone`), drained because the ECC
    head reads its memory as wearing: its risk has held `remap_hold_risk` for `remap_hold_for_s`
    (`CarriedOver.ecc_since`; None: its run begins this round), or the drain stands (`drained`: the GPU
    is out already, or its ECC risk held the level within `remap_hold_clear_s`). Elsewhere (an unknown
    ECC risk included) the pending remap is a watch and a reset at idle (NVIDIA's guide). A level of 0:
    every such remap drains at once (an operator's choice)."""
    n = len(features)
    if thresholds.remap_hold_risk <= 0:  # the operator's choice: every pending remap drains at once
        return remap_alone(hits, features.index)
    if "risk_ecc" not in risk.columns:
        return np.zeros(n, dtype=bool)
    if ecc_since is not None and "cutoff" not in features.columns:
        raise ValueError("ecc_since is a time per row: the features need a cutoff column to measure it from")
    since = np.full(n, np.datetime64("NaT"), dtype="datetime64[ns]") if ecc_since is None else ecc_since
    at = features["cutoff"] if "cutoff" in features.columns else np.zeros(n, dtype="datetime64[ns]")
    ecc = risk["risk_ecc"].to_numpy(dtype=np.float64, na_value=np.nan)
    waits = remap_waits(at, since, ecc, thresholds)
    was_out = np.zeros(n, dtype=bool) if drained is None else np.asarray(drained, dtype=bool)
    return np.asarray(remap_alone(hits, features.index) & (~waits | was_out))


def _add_remap_drain(
    reasons: list[list[str]], hits: pd.DataFrame, pos: np.ndarray, rows: np.ndarray, risk: pd.DataFrame,
    thresholds: Thresholds, stands: np.ndarray | None,
) -> None:  # fmt: skip
    """To `rows` (a pending remap drained for its wearing memory, which set the decision): the rule's
    reason, then why it drains: the ECC risk at its level (`remap_wear_reason`), or, under it, the drain
    that stands (`remap_stands_reason`: drained already, or the risk held the level shortly before)."""
    if len(rows) == 0:
        return
    hit_reasons, is_remap = hits["reason"].to_numpy(), hits["rule"].to_numpy() == REMAP_PENDING
    ecc = risk["risk_ecc"].to_numpy(dtype=np.float64, na_value=np.nan)
    for i in rows:
        reasons[i] += [str(t) for t in hit_reasons[is_remap & (pos == i)]]
        e = float(ecc[i])
        below = stands is not None and bool(stands[i]) and not e >= thresholds.remap_hold_risk
        reasons[i].append(remap_stands_reason(e, thresholds) if below else remap_wear_reason(e, thresholds))


def _add_model_reasons(reasons: list[list[str]], risk: pd.DataFrame, r: np.ndarray, contributed: np.ndarray) -> None:
    """Append the model's reasons to the rows (positions in `contributed`) whose decision it set."""
    if not len(contributed):
        return
    mode, head = top_heads(risk.iloc[contributed])
    model_reasons = risk["reasons"].to_numpy()[contributed] if "reasons" in risk.columns else None
    for k, i in enumerate(contributed):
        prefix = f"risk {r[i]:.2f}" + (f" ({mode[k]} {head[k]:.2f})" if mode[k] else "")
        own = _as_reasons(model_reasons[k]) if model_reasons is not None else []
        if own:
            reasons[i].extend([f"{prefix}: {own[0]}", *own[1:]])
        else:
            reasons[i].append(prefix)


@dataclass(frozen=True)
class DecisionChanges:
    """What one scoring round does to the GPUs' standing decisions (`store.DecisionChanges`' shape)."""

    close: tuple[int, ...] = ()
    """Decisions to close, by id."""
    refresh: tuple[tuple[int, list[str]], ...] = ()
    """Decisions that stand, by id, with the round's reasons."""
    open: tuple[tuple[str, str, list[str]], ...] = ()
    """Decisions to open: (GPU uuid, decision, reasons)."""


def decision_changes(
    active: Mapping[str, tuple[int, str]], scored: Sequence[tuple[str, str, Sequence[str]]]
) -> DecisionChanges:
    """Per scored GPU (uuid, decision, reasons), given its active decision {uuid: (id, decision)}.

    The same decision again refreshes the active one's reasons (an acknowledgement stays:
    someone is already acting on it); another decision closes it, and opens a new one unless
    the new decision is "ok". Opened decisions keep the order of `scored`.
    """
    close: list[int] = []
    refresh: list[tuple[int, list[str]]] = []
    open_: list[tuple[str, str, list[str]]] = []
    for uuid, decision, reasons in scored:
        current = active.get(uuid)
        if current is not None and current[1] == decision:
            refresh.append((current[0], list(reasons)))
            continue
        if current is not None:
            close.append(current[0])
        if decision != "ok":
            open_.append((uuid, decision, list(reasons)))
    return DecisionChanges(tuple(close), tuple(refresh), tuple(open_))
