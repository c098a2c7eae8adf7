"""Score a fleet at one time: risk per mode, rules, decision and reasons per GPU."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core import history
from core.catalog import IDENTITY_COLUMNS
from core.decisions import OUT_OF_SERVICE
from core.history import HistoryError
from predictor.conditions import HEAT_COLUMNS, WAIT_INPUTS, heat_alone, judged_heats
from predictor.features import STALE_S, USED_COLUMNS, build_features, missing_inputs
from predictor.model import MODES, RiskModel
from predictor.node import node_findings
from predictor.policy import decide, held_by_node, remap_held_rows
from predictor.replay import apply_waits, high_since, probation_began, recently_wore, remap_held, stored_run_began
from predictor.rules import (
    OTHER_OUT_OF_SERVICE_RULES,
    OUT_OF_SERVICE_RULES,
    evaluate_rules,
    remap_alone,
    rule_alerts,
)
from predictor.thresholds import Thresholds

DEFAULT_MODEL = "default.skops"
MIN_HISTORY_S = 6 * 3600
"""Less history than this is too little to score; rules still apply."""
OUTPUT_COLUMNS = ["gpu_uuid", "hostname", "model_name", "risk", "risk_ecc", "risk_thermal", "risk_pcie",
                  "decision", "reasons"]  # fmt: skip
"""The JSON contract of `gpuhealth score` (other tools read it)."""
SCORE_COLUMNS = (*IDENTITY_COLUMNS, *USED_COLUMNS)
"""The history columns scoring reads; `read_history` reads only these."""


def default_model_path() -> Path:
    """The model shipped in predictor/models/ (rebuilt by `make model`)."""
    return Path(str(resources.files("predictor") / "models" / DEFAULT_MODEL))


def load_model(path: str | Path | None = None) -> RiskModel:
    """The given model, or the shipped default."""
    return RiskModel.load(path or default_model_path())


def read_history(path: str | Path) -> pd.DataFrame:
    """A history file as `history.read` gives it, with only the columns scoring uses."""
    return history.read(path, columns=SCORE_COLUMNS)


RiskSince = Callable[[list[str], pd.Timestamp], Mapping[str, pd.Timestamp]]
"""(GPUs at the demote threshold now, the cutoff) -> when each one's risk rose to it, if before this round."""
Released = Callable[[list[str], pd.Timestamp], Mapping[str, pd.Timestamp]]
"""(GPUs no drain or RMA holds now, at the probation risk or above; the cutoff) -> when a drain or
RMA let each one go, where its rounds since continue that release (`replay.probation_began`)."""
Demoted = Callable[[list[str], pd.Timestamp], Mapping[str, pd.Timestamp]]
"""(GPUs no drain or RMA holds now, at the release level or above; the cutoff) -> since when each
one's standing decision (the last round's) is a demote, for those it is (`replay.held_demotes`)."""
EccSince = Callable[[list[str], pd.Timestamp], Mapping[str, pd.Timestamp]]
"""(GPUs whose pending remap alone would drain them now, their ECC risk at `remap_hold_risk` or above;
the cutoff) -> when each one's ECC risk rose to that level, if before this round (`remap_waits`)."""
Drained = Callable[[list[str], pd.Timestamp], Collection[str]]
"""(GPUs whose pending remap alone would drain them now; the cutoff) -> those whose drain stands
(`replay.remap_held`): their standing decision (the last round's) is a drain or RMA, or their ECC risk
held `remap_hold_risk` within `remap_hold_clear_s` before (`replay.recently_wore`)."""
HeatSince = Callable[[list[str], pd.Timestamp], Mapping[str, pd.Timestamp]]
"""(GPUs whose heat alone counts now, `conditions.heat_alone`; the cutoff) -> when each one's run of
such rounds began, if before this round (`conditions.heat_held`)."""


def score(
    model: RiskModel,
    frame: pd.DataFrame,
    at: pd.Timestamp | None = None,
    thresholds: Thresholds | None = None,
    failures: pd.DataFrame | None = None,
    risk_since: RiskSince | None = None,
    released: Released | None = None,
    demoted: Demoted | None = None,
    heat_since: HeatSince | None = None,
    ecc_since: EccSince | None = None,
    drained: Drained | None = None,
) -> pd.DataFrame:
    """One row per GPU that reported within 24 h before `at` (default: the latest sample).

    `failures`: failures and RMAs recorded so far (the store's), for the repeat-offender features.
    `risk_since(uuids, cutoff)`: for the GPUs at the demote threshold now, when their risk rose to it
    (earlier rounds: the service's store); a model demote stands once that has held
    its riskiest head's wait (`Thresholds.wait_for`, `policy.decide`). None: this instant's risk
    decides alone.
    `released(uuids, cutoff)`: for the GPUs that could be on probation now (no drain or RMA holds,
    risk at `probation_risk` or above), when a drain or RMA let them go (the service's stored
    decisions); those still within `probation_for_s` of it are demoted (`conditions.on_probation`).
    None: no probation.
    `demoted(uuids, cutoff)`: for the GPUs that could be held demoted now (no drain or RMA holds,
    risk at the release level or above), since when their standing decision is a demote (the
    service's stored decisions); those stay demoted (`policy.decide`'s `demoted`). None: no hold.
    `heat_since(uuids, cutoff)`: for the GPUs whose heat alone counts now (`conditions.heat_alone`),
    when their run of such rounds began (the service's stored rounds); those whose heat has held
    `thermal_heat_for_s` are demoted (`policy.decide`'s `heat_since`). None: the heat of this round
    alone, which demotes only where `thermal_heat_for_s` is 0.
    `ecc_since(uuids, cutoff)` and `drained(uuids, cutoff)`: for the GPUs whose pending remap alone
    would drain them now, when their ECC risk rose to `remap_hold_risk` (the stored rounds) and whose
    drain stands (drained at their last round, the stored decisions, or their ECC risk at that level
    within `remap_hold_clear_s`, the stored rounds); NVIDIA's drain then waits at watch until the ECC
    risk has held that level for `remap_hold_for_s`, unless the drain stands (`policy.decide`'s
    `remap_since` and `drained`). Either None: no hold, the drain at once.

    Only data at or before `at` is used. Columns: OUTPUT_COLUMNS plus `cutoff` and HEAT_COLUMNS (the
    core's heat the round judged, `conditions.judged_heats`: what a later round's `heat_since` reads).
    Raises HistoryError with a clear message for an empty frame or a cutoff before the data.
    """
    if len(frame) == 0:
        raise HistoryError("the history has no rows: nothing to score")
    first, last = frame["timestamp"].min(), frame["timestamp"].max()
    cutoff = last if at is None else pd.Timestamp(at)
    if cutoff.tzinfo is None:
        cutoff = cutoff.tz_localize("UTC")
    if cutoff < first:
        raise HistoryError(
            f"--at {cutoff.isoformat()} is before the history begins ({first.isoformat()}): nothing to score"
        )
    past = _up_to(frame, cutoff)
    x = build_features(past, cutoff, stale_s=STALE_S, failures=failures)
    risk = model.predict(x)
    # Too little history: no model score, the rules still decide.
    age_s = x["age_days"].to_numpy() * 86400
    thin = _too_little_history(x)
    risk.loc[thin, ["risk", *[f"risk_{m}" for m in MODES]]] = np.nan
    notes = pd.Series("", index=x.index)
    n_samples = _samples_per_gpu(past) if thin.any() else pd.Series(dtype=int)
    notes[thin] = [
        f"too little history to score ({int(n_samples.get(u, 0))} sample(s) over {a / 3600:.1f} h)"
        for u, a in zip(x.loc[thin, "gpu_uuid"], age_s[thin], strict=True)
    ]
    risk["risk_note"] = notes
    th = thresholds or Thresholds()
    flagged = np.flatnonzero((risk["risk"].to_numpy() >= th.watch) & ~thin)
    explained = model.explain(x, risk, flagged)
    risk["reasons"] = [explained.get(i, []) for i in range(len(x))]
    hits = evaluate_rules(x)
    r = risk["risk"].to_numpy()
    # A pending remap's drain held at watch takes no GPU out: its probation or demote may stand.
    remap_since, was_out = _remap_history(x, hits, risk, th, cutoff, ecc_since, drained)
    out_now = x.index.isin(hits.loc[hits["action"].isin(OUT_OF_SERVICE), "row"])
    out_now &= ~remap_held_rows(x, hits, risk, th, remap_since, was_out)

    def ask(question: RiskSince | Released | Demoted | None, level: float, could: np.ndarray) -> np.ndarray | None:
        """Per row, what `question` says of the scored GPUs at `level` or above for which `could`."""
        if question is None:
            return None
        with np.errstate(invalid="ignore"):
            asked = could & ~thin & (r >= level)
        return _per_row(x, question([str(u) for u in x.loc[asked, "gpu_uuid"]], cutoff) if asked.any() else {})

    # With no wait no earlier round matters; the probation and the hold need no drain or RMA now.
    since = ask(risk_since if th.longest_wait > pd.Timedelta(0) else None, th.demote, np.ones(len(x), dtype=bool))
    rel = ask(released if th.probation_for_s > 0 else None, th.probation_risk, ~out_now)
    held = ask(demoted, th.release_level, ~out_now)
    hot = heat_alone(x, th)
    warm = None if heat_since is None or not hot.any() else heat_since([str(u) for u in x.loc[hot, "gpu_uuid"]], cutoff)
    decided = decide(x, risk, th, hits, nodes=node_findings(x), since=since, released=rel, demoted=held,
                     heat_since=_per_row(x, warm or {}), remap_since=remap_since, drained=was_out)  # fmt: skip
    out = x[["gpu_uuid", "hostname", "model_name", "cutoff"]].copy()
    for col in ("risk", *[f"risk_{m}" for m in MODES]):
        out[col] = risk[col].round(4)
    out["decision"] = decided["decision"].astype(str)
    out["reasons"] = decided["reasons"]
    for col, judged in zip(HEAT_COLUMNS, judged_heats(x, th), strict=True):
        out[col] = judged
    extra = _data_notes(past, x, model.meta.get("inputs_seen"), model.meta.get("model_names"))
    if extra:
        out["reasons"] = [[*r, *extra.get(m, [])] for r, m in zip(out["reasons"], out["model_name"], strict=True)]
    out = out[[*OUTPUT_COLUMNS, "cutoff", *HEAT_COLUMNS]]
    return out.sort_values("risk", ascending=False, na_position="last", kind="stable")


def hour_rows(model: RiskModel, x: pd.DataFrame, th: Thresholds) -> pd.DataFrame:
    """Per feature row (GPU, cutoff): its risks, the rules that fire, whether a node finding holds
    the model's demote, and the load its heat was judged at: what `replay.apply_waits` decides the
    rounds from, before any wait (so the evaluation keeps them and decides them again under others)."""
    r = model.predict(x)
    keep = x[["gpu_uuid", "hostname", "model_name", "cutoff", "last_seen"]].copy()
    keep["risk"] = r["risk"].to_numpy()
    for m in MODES:
        keep[f"risk_{m}"] = r[f"risk_{m}"].to_numpy()
    keep["rule_alert"] = rule_alerts(x).to_numpy()
    keep["rule_act"] = rule_alerts(x, OUT_OF_SERVICE_RULES).to_numpy()
    # Out of service by NVIDIA's pending remap alone: the drain a GPU without wear holds (`replay`).
    keep["remap_alone"] = keep["rule_act"].to_numpy() & ~rule_alerts(x, OTHER_OUT_OF_SERVICE_RULES).to_numpy()
    # A demote the policy holds at watch (node-wide heat) is no alert, as in the service.
    keep["held"] = held_by_node(x, r, th)
    # What the waits read beside the risk (`conditions.demote_waits`): the load the heat was judged at
    # (a thermal demote waits longer at light load) and the two readings that cut a thermal wait short.
    for col in WAIT_INPUTS:
        keep[col] = x[col].to_numpy()
    return keep


def _remap_history(
    x: pd.DataFrame, hits: pd.DataFrame, risk: pd.DataFrame, th: Thresholds, cutoff: pd.Timestamp,
    ecc_since: EccSince | None, drained: Drained | None,
) -> tuple[np.ndarray | None, np.ndarray | None]:  # fmt: skip
    """Per row, what `decide`'s `remap_since` and `drained` need, asked only of the GPUs whose pending
    remap alone would drain them now with their ECC risk known; (None, None) without both questions."""
    if ecc_since is None or drained is None or th.remap_hold_risk <= 0:
        return None, None
    ecc = risk["risk_ecc"].to_numpy(dtype=np.float64, na_value=np.nan)
    could = remap_alone(hits, x.index) & ~np.isnan(ecc)
    uuid = x["gpu_uuid"].astype(str)
    with np.errstate(invalid="ignore"):
        at_level = could & (ecc >= th.remap_hold_risk)
    asked = at_level.any() and th.remap_hold_for_s > 0  # with no hold for the level, its run does not matter
    since = _per_row(x, ecc_since(list(uuid[at_level]), cutoff) if asked else {})
    out = set(drained(list(uuid[could]), cutoff)) if could.any() else set()
    return since, uuid.isin(out).to_numpy()


def _per_row(x: pd.DataFrame, times: Mapping[str, pd.Timestamp]) -> np.ndarray:
    """Per feature row, its GPU's time in `times` as naive UTC datetime64[ns] (NaT where absent)."""
    return np.array(
        [times[u].tz_convert(None).as_unit("ns").to_datetime64() if u in times else np.datetime64("NaT")
         for u in x["gpu_uuid"].astype(str)], dtype="datetime64[ns]",
    )  # fmt: skip


HOLD_LOOKBACK = pd.Timedelta(days=30)
"""How far back `gpuhealth score` rebuilds the hours to find a standing demote (the service reads
it from its stored decisions, however old): a demote older than this, whose risk has held at the
release level since, is not seen."""
HOURS_PER_PASS = 96
"""Hourly cutoffs whose features are built at once when the history is scored again (memory)."""


class HistoryRounds:
    """`score`'s `risk_since`, `released`, `demoted`, `ecc_since` and `drained` read from the history itself, as the
    service's stored rounds and decisions would say (`gpuhealth score` has none of its own): the
    asked GPUs' rounds at every hour before the cutoff are scored again and decided as the service
    decides them (`replay.apply_waits`). The hours of the last question are kept, so a question
    about fewer GPUs over no longer a span (the hold's after the probation's) builds nothing again."""

    def __init__(
        self, model: RiskModel, frame: pd.DataFrame, thresholds: Thresholds, failures: pd.DataFrame | None = None
    ) -> None:
        self.model, self.frame, self.th, self.failures = model, frame, thresholds, failures
        self._kept: tuple[pd.Timestamp, pd.Timedelta, set[str], pd.DataFrame] | None = None

    def hours(self, uuids: list[str], cutoff: pd.Timestamp, span: pd.Timedelta) -> pd.DataFrame:
        """The GPUs' rounds at every hour of `span` before the cutoff (`_hours_before`)."""
        k = self._kept
        if k is not None and k[0] == cutoff and k[1] >= span and set(uuids) <= k[2]:
            rows = k[3]
            return rows[rows["gpu_uuid"].isin(uuids) & (rows["cutoff"] >= cutoff - span)].reset_index(drop=True)
        rows = _hours_before(self.model, self.frame, uuids, cutoff, span, self.th, self.failures)
        self._kept = (cutoff, span, set(uuids), rows)
        return rows

    def risk_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """When each GPU's run at the demote level began (`score`'s `risk_since`)."""
        with np.errstate(invalid="ignore"):
            return self._run_began(uuids, cutoff, self.th.longest_wait, lambda rows: rows["risk"] >= self.th.demote)

    def heat_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """When each GPU's run of rounds whose heat alone counts began (`score`'s `heat_since`)."""
        return self._run_began(uuids, cutoff, self.th.heat_hold, lambda rows: heat_alone(rows, self.th))

    def _run_began(
        self,
        uuids: list[str],
        cutoff: pd.Timestamp,
        span: pd.Timedelta,
        counts: Callable[[pd.DataFrame], Any],
    ) -> Mapping[str, pd.Timestamp]:
        """When each GPU's run of rounds that `counts` (per hour row) began, from its hours over `span`
        before the cutoff (`replay.stored_run_began`, as the service's stored rounds)."""
        rows = self.hours(uuids, cutoff, span)
        return stored_run_began(list(zip(rows["gpu_uuid"], rows["cutoff"], strict=True)), counts(rows), uuids, cutoff)

    def ecc_since(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """When each GPU's run of rounds with its ECC risk at `remap_hold_risk` began (`score`'s `ecc_since`)."""
        span, level = pd.Timedelta(seconds=self.th.remap_hold_for_s), self.th.remap_hold_risk
        with np.errstate(invalid="ignore"):
            return self._run_began(uuids, cutoff, span, lambda rows: rows["risk_ecc"] >= level)

    def drained(self, uuids: list[str], cutoff: pd.Timestamp) -> set[str]:
        """The GPUs whose pending remap's drain stands (`score`'s `drained`), from their hours over
        HOLD_LOOKBACK: their last round was a drain or RMA (a drain the hold let stand is found by
        replaying its run of such rounds), or their ECC risk held the hold's level within
        `remap_hold_clear_s` (`replay.recently_wore`)."""
        rows = self.hours(uuids, cutoff, max(HOLD_LOOKBACK, pd.Timedelta(seconds=self.th.remap_hold_clear_s
                                                                           + self.th.remap_hold_for_s)))  # fmt: skip
        if len(rows) == 0:
            return set()
        decided = apply_waits(rows, self.th)
        last = _last_rounds(rows)
        out = {str(u) for u, o in zip(rows["gpu_uuid"].to_numpy()[last], decided["out_of_service"].to_numpy()[last],
                                      strict=True) if o}  # fmt: skip
        stored = list(zip(rows["gpu_uuid"], rows["cutoff"], strict=True))
        return out | recently_wore(stored, rows["risk_ecc"].to_numpy(dtype=np.float64), cutoff, self.th)

    def released(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """When a drain or RMA let each GPU go (`score`'s `released`)."""
        rows = self.hours(uuids, cutoff, pd.Timedelta(seconds=self.th.probation_for_s))
        if len(rows) == 0:
            return {}
        # The rounds before, then this one: no drain or RMA holds now and the risk is high (asked).
        gpu = np.r_[rows["gpu_uuid"].to_numpy(), np.asarray(uuids, dtype=object)]
        at = pd.DatetimeIndex([*rows["cutoff"], *[cutoff] * len(uuids)])
        out = np.r_[
            rows["rule_act"].to_numpy(dtype=bool) & ~remap_held(rows, self.th), np.zeros(len(uuids), dtype=bool)
        ]
        risk = np.r_[rows["risk"].to_numpy(dtype=np.float64), np.ones(len(uuids))]
        began = probation_began(gpu, at, out, risk, self.th)[len(rows) :]
        return {u: pd.Timestamp(b).tz_localize("UTC") for u, b in zip(uuids, began, strict=True) if not np.isnat(b)}

    def demoted(self, uuids: list[str], cutoff: pd.Timestamp) -> Mapping[str, pd.Timestamp]:
        """Since when each GPU's last round was a demote, not a drain or RMA (`score`'s `demoted`):
        the run of demote rounds its last round ends, as the store's standing demote began."""
        rows = self.hours(uuids, cutoff, max(HOLD_LOOKBACK, pd.Timedelta(seconds=self.th.probation_for_s)))
        if len(rows) == 0:
            return {}
        decided = apply_waits(rows, self.th)
        standing = decided["demote"].to_numpy(dtype=bool) & ~decided["out_of_service"].to_numpy(dtype=bool)
        gpu = rows["gpu_uuid"].to_numpy()
        since = high_since(gpu, rows["cutoff"], standing)
        last = _last_rounds(rows)
        return {str(u): pd.Timestamp(t).tz_localize("UTC") for u, t in zip(gpu[last], since[last], strict=True)
                if not np.isnat(t)}  # fmt: skip


def _last_rounds(rows: pd.DataFrame) -> np.ndarray:
    """The position of each GPU's last round among hour rows (`_hours_before`'s, a RangeIndex)."""
    return rows.groupby("gpu_uuid")["cutoff"].idxmax().to_numpy()


def _hours_before(
    model: RiskModel,
    frame: pd.DataFrame,
    uuids: list[str],
    cutoff: pd.Timestamp,
    span: pd.Timedelta,
    th: Thresholds,
    failures: pd.DataFrame | None,
) -> pd.DataFrame:
    """The GPUs' rounds (`hour_rows`) at every hour of `span` before the cutoff (within the history),
    as the service's rounds would have scored them: the whole fleet's history feeds the features
    (peers), their nodes' GPUs the node findings, and only the asked GPUs' rows are kept; risk is NaN
    with too little history."""
    hours = int(np.ceil(span / pd.Timedelta(hours=1)))
    if hours <= 0 or not uuids:
        return _no_hours()
    cuts = pd.DatetimeIndex([cutoff - pd.Timedelta(hours=k) for k in range(hours, 0, -1)])
    cuts = cuts[cuts >= frame["timestamp"].min()]
    if len(cuts) == 0:
        return _no_hours()
    past, asked = _up_to(frame, cuts[-1]), set(uuids)
    hosts = set(frame.loc[frame["gpu_uuid"].astype(str).isin(asked), "hostname"].astype(str))
    parts = []
    for i in range(0, len(cuts), HOURS_PER_PASS):
        x = build_features(past, cuts[i : i + HOURS_PER_PASS], stale_s=STALE_S, failures=failures)
        x = x[x["hostname"].astype(str).isin(hosts)].reset_index(drop=True)
        rows = hour_rows(model, x, th) if len(x) else None
        if rows is not None:
            rows["risk"] = np.where(_too_little_history(x), np.nan, rows["risk"].to_numpy())
            parts.append(rows[x["gpu_uuid"].astype(str).isin(asked).to_numpy()])
    if not parts:
        return _no_hours()
    rows = pd.concat(parts, ignore_index=True)
    rows["gpu_uuid"] = rows["gpu_uuid"].astype(str)
    return rows


def _no_hours() -> pd.DataFrame:
    """`_hours_before`'s answer where there are no hours: `hour_rows`' columns, no rows."""
    cols = ["gpu_uuid", "hostname", "model_name", "risk", *[f"risk_{m}" for m in MODES], *WAIT_INPUTS]
    out = pd.DataFrame({c: pd.Series(dtype=object if c in cols[:3] else np.float64) for c in cols})
    out["cutoff"] = out["last_seen"] = pd.to_datetime([], utc=True)
    for c in ("rule_alert", "rule_act", "held"):
        out[c] = pd.Series(dtype=bool)
    return out


def _too_little_history(x: pd.DataFrame) -> np.ndarray:
    """Per feature row: whether its GPU has reported for less than MIN_HISTORY_S (no model score)."""
    return np.asarray(x["age_days"].to_numpy() * 86400 < MIN_HISTORY_S)


def _samples_per_gpu(frame: pd.DataFrame) -> pd.Series:
    """Rows per GPU, indexed by gpu_uuid (from the categorical's codes when it is one)."""
    uuid = frame["gpu_uuid"]
    if isinstance(uuid.dtype, pd.CategoricalDtype):
        cats = uuid.cat.categories
        codes = uuid.cat.codes.to_numpy()
        return pd.Series(np.bincount(codes[codes >= 0], minlength=len(cats)), index=cats)
    return uuid.groupby(uuid.to_numpy()).size()


def _up_to(frame: pd.DataFrame, cutoff: pd.Timestamp) -> pd.DataFrame:
    """The rows at or before the cutoff; a time-ordered frame (as history.read gives) is
    sliced, not filtered, so the usual case (the latest sample) copies nothing."""
    ts = frame["timestamp"]
    if ts.dt.tz is not None:
        arr = ts.array  # nanoseconds since the epoch whatever the zone; as_unit copies even to ns
        ns = arr.asi8 if arr.unit == "ns" else arr.as_unit("ns").asi8
        if bool(np.all(ns[1:] >= ns[:-1])):
            end = int(np.searchsorted(ns, pd.Timestamp(cutoff).as_unit("ns").value, side="right"))
            return frame if end == len(frame) else frame.iloc[:end]
    return frame[ts <= cutoff]


def _data_notes(
    frame: pd.DataFrame, x: pd.DataFrame, seen: list[str] | None, trained_on: list[str] | None
) -> dict[str, list[str]]:
    """Reasons that say what the score could not see: missing columns, unknown models.

    Only columns the model learned from count as missing (retired pages are absent on
    every Ampere+ GPU, and a model trained on such fleets never used them). A GPU model is
    unknown when it is not among the model's `trained_on` (meta "model_names"); a model file
    older than that record names none, and then no GPU model is called unknown: better no
    note than one on every GPU.
    """
    notes: dict[str, list[str]] = {}
    missing = [c for c in missing_inputs(frame) if seen is None or c in seen]
    for model_name in x["model_name"].unique():
        n = []
        if missing:
            n.append(f"scored without {', '.join(missing)} (not in the history)")
        if trained_on is not None and model_name not in trained_on:
            n.append(f"model {model_name!r} was not in the training fleets: peer comparisons use its own kind only")
        notes[str(model_name)] = n
    return notes


def to_records(scored: pd.DataFrame, heat: bool = False) -> list[dict[str, Any]]:
    """The JSON contract: a list of objects with OUTPUT_COLUMNS (NaN risk as null); with `heat`, each
    also with HEAT_COLUMNS (`conditions.judged_heats`, NaN as null), which the service stores with its rounds."""
    recs = []
    extra = list(HEAT_COLUMNS) if heat else []
    for row in scored[[*OUTPUT_COLUMNS, *extra]].itertuples(index=False):
        d = row._asdict()
        for k in ("risk", "risk_ecc", "risk_thermal", "risk_pcie", *extra):
            v = d[k]
            d[k] = None if v != v else float(v)
        d["reasons"] = [str(r) for r in d["reasons"]]
        d["gpu_uuid"], d["hostname"], d["model_name"] = (
            str(d["gpu_uuid"]),
            str(d["hostname"]),
            str(d["model_name"]),
        )
        recs.append(d)
    return recs
