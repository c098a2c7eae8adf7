"""Score a fleet at one time: risk per mode, rules, decision and reasons per GPU."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
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
from predictor.past import PastRounds
from predictor.policy import CarriedOver, decide, held_by_node, remap_drain_rows
from predictor.remedy import REMEDY_COLUMNS, remedies, with_decisions
from predictor.rules import BY_NAME, OUT_OF_SERVICE_RULES, REMAP_PENDING, evaluate_rules, remap_alone, rule_alerts
from predictor.thresholds import Thresholds

DEFAULT_MODEL = "default.skops"
MIN_HISTORY_S = 6 * 3600
"""Less history than this is too little to score; rules still apply."""
OUTPUT_COLUMNS = ["gpu_uuid", "hostname", "model_name", "risk", "risk_ecc", "risk_thermal", "risk_pcie",
                  "decision", "reasons", *REMEDY_COLUMNS]  # fmt: skip
"""The JSON contract of `gpuhealth score` (other tools read it): fields are added, never renamed."""
SCORE_COLUMNS = (*IDENTITY_COLUMNS, *USED_COLUMNS)
"""The history columns scoring reads; `read_history` reads only these."""


def default_model_path() -> Path:
    """The model shipped in predictor/models/ (rebuilt by `make model`)."""
    return Path(str(resources.files("predictor") / "models" / DEFAULT_MODEL))


def load_model(path: str | Path | None = None) -> RiskModel:
    """The given model, or the shipped default."""
    return RiskModel.load(path or default_model_path())


def load_model_soon(path: str | Path | None = None) -> Future[RiskModel]:
    """`load_model` started now in a thread of its own; `.result()` gives the model or raises its error.

    skops builds a model in Python while a Parquet read does its work outside the GIL, so a model
    loaded beside the history's read costs little of the wall time it costs alone."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="model")
    try:
        return pool.submit(load_model, path)
    finally:
        pool.shutdown(wait=False)  # the thread ends once the model is loaded


def read_history(path: str | Path) -> pd.DataFrame:
    """A history file as `history.read` gives it, with only the columns scoring uses."""
    return history.read(path, columns=SCORE_COLUMNS)


def score(
    model: RiskModel,
    frame: pd.DataFrame,
    at: pd.Timestamp | None = None,
    thresholds: Thresholds | None = None,
    failures: pd.DataFrame | None = None,
    past: PastRounds | None = None,
    lanes: int | None = None,
) -> pd.DataFrame:
    """One row per GPU that reported within 24 h before `at` (default: the latest sample).

    `failures`: failures and RMAs recorded so far (the store's), for the repeat-offender features.
    `past`: the rounds before this one (`predictor.past.PastRounds`: the service's stored rounds, or the
    history's own hours for `gpuhealth score`); each question is asked only where its wait or hold is
    on, of the GPUs for which its answer matters now, and `policy.decide` reads the answers per row
    (`policy.CarriedOver`): a model demote stands once its risk has held its riskiest head's wait, a
    GPU a drain or RMA let go is on probation, a standing demote is held, the core's heat alone
    demotes once it has held `thermal_heat_for_s`, and a pending remap's drain may wait at watch.
    None: this round decides alone (no wait, no probation, no hold; the heat alone only where
    `thermal_heat_for_s` is 0; NVIDIA's drain at once). `lanes`: threads the features are computed in
    (`build_features`; default: both cores for a history of `features.LANE_MIN_ROWS` hour rows or more).

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
    seen = up_to(frame, cutoff)  # the history as it stood at the cutoff
    x = build_features(seen, cutoff, stale_s=STALE_S, failures=failures, lanes=lanes)
    risk = model.predict(x)
    # Too little history: no model score, the rules still decide.
    age_s = x["age_days"].to_numpy() * 86400
    thin = too_little_history(x)
    risk.loc[thin, ["risk", *[f"risk_{m}" for m in MODES]]] = np.nan
    notes = pd.Series("", index=x.index)
    n_samples = _samples_per_gpu(seen) if thin.any() else pd.Series(dtype=int)
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
    carried = _carried_over(x, risk, hits, th, cutoff, thin, past)
    decided = decide(x, risk, th, hits, nodes=node_findings(x), carried=carried)
    out = x[["gpu_uuid", "hostname", "model_name", "cutoff"]].copy()
    for col in ("risk", *[f"risk_{m}" for m in MODES]):
        out[col] = risk[col].round(4)
    out["decision"] = decided["decision"].astype(str)
    # The remedy beside the decision (the rules that set it ask for it), its line after the decision's reasons.
    fix = with_decisions(remedies(hits, x.index, x), decided["decision"])
    out["reasons"] = [[*r, *m] for r, m in zip(decided["reasons"], fix["remedy_reasons"], strict=True)]
    for col in REMEDY_COLUMNS:
        out[col] = fix[col]
    for col, judged in zip(HEAT_COLUMNS, judged_heats(x, th), strict=True):
        out[col] = judged
    extra = _data_notes(seen, x, model.meta.get("inputs_seen"), model.meta.get("model_names"))
    if extra:
        models = out["model_name"].astype(str).tolist()  # a list: a pandas string column iterates slowly
        out["reasons"] = [[*r, *extra.get(m, [])] for r, m in zip(out["reasons"].tolist(), models, strict=True)]
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
    # A pending remap with no drain or RMA rule: a watch, or a drain where its memory wears (`replay`).
    keep["remap_alone"] = BY_NAME[REMAP_PENDING].fires(x).to_numpy() & ~keep["rule_act"].to_numpy()
    # A demote the policy holds at watch (node-wide heat) is no alert, as in the service.
    keep["held"] = held_by_node(x, r, th)
    # What the waits read beside the risk (`conditions.demote_waits`): the load the heat was judged at
    # (a thermal demote waits longer at light load) and the two readings that cut a thermal wait short.
    for col in WAIT_INPUTS:
        keep[col] = x[col].to_numpy()
    return keep


_Question = Callable[[list[str], pd.Timestamp], Mapping[str, pd.Timestamp]]
"""One of `PastRounds`' questions that answers a time per GPU."""


def _carried_over(
    x: pd.DataFrame, risk: pd.DataFrame, hits: pd.DataFrame, th: Thresholds, cutoff: pd.Timestamp, thin: np.ndarray,
    past: PastRounds | None,
) -> CarriedOver:  # fmt: skip
    """Per row, what `decide` carries over from `past` (`CarriedOver`): each question asked only where its
    wait or hold is on, of the scored GPUs for which its answer matters now (none without `past`)."""
    if past is None:
        return CarriedOver(heat_since=_per_row(x, {}))
    r = risk["risk"].to_numpy()
    # A pending remap held at watch takes no GPU out (its probation or demote may stand); a drained one does.
    ecc_since, drained = _remap_history(x, hits, risk, th, cutoff, past)
    out_now = x.index.isin(hits.loc[hits["action"].isin(OUT_OF_SERVICE), "row"])
    out_now |= remap_drain_rows(x, hits, risk, th, ecc_since, drained)

    def ask(question: _Question | None, level: float, could: np.ndarray) -> np.ndarray | None:
        """Per row, what `question` says of the scored GPUs at `level` or above for which `could`."""
        if question is None:
            return None
        with np.errstate(invalid="ignore"):
            asked = could & ~thin & (r >= level)
        return _per_row(x, question(x.loc[asked, "gpu_uuid"].astype(str).tolist(), cutoff) if asked.any() else {})

    # With no wait no earlier round matters; the probation and the hold need no drain or RMA now.
    since = ask(past.risk_since if th.longest_wait > pd.Timedelta(0) else None, th.demote, np.ones(len(x), dtype=bool))
    released = ask(past.released if th.probation_for_s > 0 else None, th.probation_risk, ~out_now)
    demoted = ask(past.demoted, th.release_level, ~out_now)
    hot = heat_alone(x, th)
    warm = past.heat_since(x.loc[hot, "gpu_uuid"].astype(str).tolist(), cutoff) if hot.any() else None
    return CarriedOver(risk_since=since, released=released, demoted=demoted, heat_since=_per_row(x, warm or {}),
                       ecc_since=ecc_since, drained=drained)  # fmt: skip


def _remap_history(
    x: pd.DataFrame, hits: pd.DataFrame, risk: pd.DataFrame, th: Thresholds, cutoff: pd.Timestamp, past: PastRounds
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per row, what `CarriedOver.ecc_since` and `drained` hold, asked only of the GPUs with a pending
    remap and no drain or RMA rule (whose wearing memory would drain them); (None, None) with no level."""
    if th.remap_hold_risk <= 0:
        return None, None
    ecc = risk["risk_ecc"].to_numpy(dtype=np.float64, na_value=np.nan)
    could = remap_alone(hits, x.index)
    uuid = x["gpu_uuid"].astype(str)
    with np.errstate(invalid="ignore"):
        at_level = could & (ecc >= th.remap_hold_risk)
    asked = at_level.any() and th.remap_hold_for_s > 0  # with no hold for the level, its run does not matter
    since = _per_row(x, past.ecc_since(list(uuid[at_level]), cutoff) if asked else {})
    out = set(past.drained(list(uuid[could]), cutoff)) if could.any() else set()
    return since, uuid.isin(out).to_numpy()


def _per_row(x: pd.DataFrame, times: Mapping[str, pd.Timestamp]) -> np.ndarray:
    """Per feature row, its GPU's time in `times` as naive UTC datetime64[ns] (NaT where absent)."""
    if not times:
        return np.full(len(x), np.datetime64("NaT", "ns"))
    return np.array(
        [times[u].tz_convert(None).as_unit("ns").to_datetime64() if u in times else np.datetime64("NaT")
         for u in x["gpu_uuid"].astype(str).tolist()], dtype="datetime64[ns]",
    )  # fmt: skip


def too_little_history(x: pd.DataFrame) -> np.ndarray:
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


def up_to(frame: pd.DataFrame, cutoff: pd.Timestamp) -> pd.DataFrame:
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
    extra = list(HEAT_COLUMNS) if heat else []
    names = [*OUTPUT_COLUMNS, *extra]
    # Column by column as Python lists (a pandas string column iterates an item at a time).
    cols: dict[str, list[Any]] = {c: scored[c].tolist() for c in names}
    for k in ("risk", "risk_ecc", "risk_thermal", "risk_pcie", *extra):
        cols[k] = [None if v != v else float(v) for v in cols[k]]
    cols["reasons"] = [[str(r) for r in said] for said in cols["reasons"]]
    for k in ("remedy", "remedy_when", "gpu_uuid", "hostname", "model_name"):
        cols[k] = [str(v) for v in cols[k]]
    return [dict(zip(names, row, strict=True)) for row in zip(*(cols[c] for c in names), strict=True)]
