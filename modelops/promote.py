"""Promote a stored model: make it active only if, on the fleet's own held-out data, it is no worse.

The candidate's card names its holdout slice: the newest days of the fleet's history that
`gpuhealth train --db` kept out of training. Promote scores that slice with the candidate
and with the model it would replace (the active stored model; with none active, the model
`serve` runs from a file: `against`, else the shipped one) using `predictor.evaluate`, and
compares, per incident as the evaluation does:

- recall per mode: ECC and thermal caught at least 24 h ahead, PCIe at least 1 h;
- precision over alert episodes.

The candidate must be no worse on every measure the slice can judge. A mode with fewer than
`min_failures` failures in the slice cannot be judged (one failure more or less would swing
its recall by a third or more), and precision is compared only when both models raised
alerts; the comparison says so, in the output and in the card. A slice that judges
nothing refuses: a model is never promoted on no evidence, unless forced.

On the same slice the candidate's evaluation weighs a pending remap's drain the other way, and
the fleet's own outcomes decide whether the service holds that drain while the candidate is active
(`predictor.remap_hold`): the verdict goes into the card (`remap_hold`) with its evidence, and the
scoring loop applies it with the model, unless the operator set GPUHEALTH_REMAP_HOLD_RISK. The
comparison judges each model as it would serve: the candidate with that verdict, the model it
would replace with the verdict it serves with now (`Verdict.served` says so where either holds).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from core.history import HistoryError
from modelops.model_card import json_safe
from modelops.training import TrainingError, fleet_history, fleet_trained_until
from predictor.evaluate import MODE_LEAD, Scored, evaluate, score_rows, span_start
from predictor.model import DAY, HOUR, MODES, RiskModel
from predictor.remap_hold import hold_said, operator_verdict, remap_hold_verdict, thresholds_with
from predictor.score import load_model
from predictor.thresholds import Thresholds
from service.scorer import SCORE_WINDOW
from store import Store

Progress = Callable[[str], None]
MIN_FAILURES = 3
"""Failures of a mode the slice must hold to judge that mode's recall."""
WINDOW = 7 * DAY
"""An alert counts for a failure up to this long before it (as `gpuhealth evaluate`)."""
TOLERANCE = 1e-9
"""Equal within float rounding is "no worse"."""


class PromoteError(RuntimeError):
    """Promotion cannot be decided (the version is already active); the message says why."""


@dataclass
class Measure:
    """One measure of the comparison: both values, and whether the slice could judge it."""

    name: str
    candidate: float | None
    baseline: float | None
    judged: bool
    worse: bool
    detail: str
    """How many failures or alert episodes stand behind the values, or why the measure was not judged."""


@dataclass
class Verdict:
    """Promote's answer: promoted or not, every measure, and why."""

    version: str
    baseline: str
    promoted: bool
    forced: bool
    at: datetime
    measures: list[Measure] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    """Why the candidate is not promoted (each: the measure and both values); empty when it may be."""
    notes: list[str] = field(default_factory=list)
    """What the slice could not judge."""
    slice: dict[str, Any] = field(default_factory=dict)
    served: str | None = None
    """How each model was judged where a pending remap's drain is held for either (as each would serve)."""
    remap_hold: dict[str, Any] | None = None
    """What the fleet's outcomes on the slice say of a pending remap's drain (`remap_hold.RemapHoldVerdict`);
    None where the slice was not scored."""

    def to_card(self) -> dict[str, Any]:
        """The verdict as the card's `promotion` entry."""
        out = asdict(self)
        out["at"] = self.at.isoformat()
        return json_safe(out)


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _value(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def compare(candidate: dict[str, Any], baseline: dict[str, Any], min_failures: int = MIN_FAILURES) -> list[Measure]:
    """Each measure of two evaluation reports of the same slice (`predictor.evaluate.evaluate`)."""
    out: list[Measure] = []
    judged_failures = candidate["failures"]
    for mode in MODES:
        name = f"recall_{mode}"
        c, b = _value(candidate["model"][name]), _value(baseline["model"][name])
        n = int(judged_failures.get(mode, 0))
        lead = f"{MODE_LEAD[mode] / HOUR:g} h lead"
        if n < min_failures:
            detail = f"only {n} {mode} failure(s) in the holdout slice, {min_failures} needed to judge ({lead})"
            out.append(Measure(name, c, b, False, False, detail))
            continue
        worse = c is not None and b is not None and c < b - TOLERANCE
        out.append(Measure(name, c, b, True, worse, f"{n} {mode} failures, {lead}"))
    c, b = _value(candidate["model"]["precision"]), _value(baseline["model"]["precision"])
    ce, be = int(candidate["model"]["episodes"]), int(baseline["model"]["episodes"])
    episodes = f"over {ce} and {be} alert episodes"
    if c is None or b is None:
        who = "either model" if c is None and b is None else "the candidate" if c is None else "the baseline"
        out.append(Measure("precision", c, b, False, False, f"no alert episodes from {who} in the slice: not compared"))
    else:
        out.append(Measure("precision", c, b, True, c < b - TOLERANCE, episodes))
    return out


def holdout_slice(store: Store, holdout: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame, pd.Timestamp]:
    """The fleet's hourly history the slice's scoring needs (a feature context before it), the failures,
    and where scoring starts: one alert window before the holdout, so each held-out failure has a full
    window of alerts that never were training rows."""
    start, end = pd.Timestamp(holdout["start"]), pd.Timestamp(holdout["end"])
    score_from = start - WINDOW
    since = (score_from - pd.Timedelta(SCORE_WINDOW)).to_pydatetime()
    frame = fleet_history(store, since=since, until=end.to_pydatetime())
    return frame, store.labels.failures_frame(), score_from


def _baseline(store: Store, against: Path | None) -> tuple[str, Callable[[], RiskModel], dict[str, Any] | None]:
    """The model a promotion would replace (its name, how to load it, and the verdict on a pending remap's
    drain it serves with): the active stored one, else the file `serve` runs (no verdict)."""
    active = store.models.active_info()
    if active is not None:
        version = active["version"]
        load = lambda: RiskModel.from_bytes(store.models.get(version)["data"], name=version)  # noqa: E731
        return f"active model {version}", load, active["card"].get("remap_hold")
    if against is not None:
        return f"model file {against}", lambda: RiskModel.load(against), None
    return "shipped default model", load_model, None


def _hold_said(th: Thresholds) -> str:
    said = hold_said(th.remap_hold_risk)
    return said if th.remap_hold_risk <= 0 else f"a pending remap's drain {said}"


def _report(
    model: RiskModel, frame: pd.DataFrame, failures: pd.DataFrame, start: pd.Timestamp, th: Thresholds, rows: Scored
) -> dict[str, Any]:
    """The slice's evaluation of one model's scored rows, decided under `th`."""
    return evaluate(model, frame, failures, lead=DAY, window=WINDOW, start=start, thresholds=th, scored=rows)


def fleet_verdict(report: dict[str, Any], th: Thresholds) -> dict[str, Any]:
    """What a model's evaluation of a slice (scored with NVIDIA's drain, `th`) says of holding a pending
    remap's drain: the verdict the evaluation made of the fleet's outcomes, or the operator's where they
    set the hold."""
    if th.remap_hold_fixed:
        return operator_verdict(th).to_dict()
    whatif = report.get("remap_hold")  # absent where no GPU was drained for a pending remap alone
    return dict(whatif["verdict"]) if whatif else remap_hold_verdict(None).to_dict()


def _score_slice(
    model: RiskModel, frame: pd.DataFrame, failures: pd.DataFrame, score_from: pd.Timestamp, th: Thresholds
) -> Scored:
    """One model's rows over the slice, hourly from `score_from` (decided under `th`; `_report` judges them)."""
    begin = span_start(frame, WINDOW, score_from)
    return score_rows(model, frame, begin, frame["timestamp"].max(), "1h", th, failures=failures)


def _served_reports(
    verdict: Verdict,
    models: dict[str, RiskModel],
    base_hold: dict[str, Any] | None,
    frame: pd.DataFrame,
    failures: pd.DataFrame,
    score_from: pd.Timestamp,
    th: Thresholds,
    scoring: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Each model's evaluation of the slice as it would serve: the candidate with the verdict its own
    evaluation gives on a pending remap's drain (set in `verdict.remap_hold`), the baseline with the
    verdict it serves with now (`base_hold`); the operator's `th` where they set the hold."""
    scored, reports = {}, {}
    for name, model in models.items():
        scoring(name)
        scored[name] = _score_slice(model, frame, failures, score_from, th)
        reports[name] = _report(model, frame, failures, score_from, th, scored[name])
    verdict.remap_hold = fleet_verdict(reports["candidate"], th)
    base_name = verdict.baseline
    served = {"candidate": thresholds_with(th, verdict.remap_hold), base_name: thresholds_with(th, base_hold)}
    for name, t in served.items():
        if t != th:
            reports[name] = _report(models[name], frame, failures, score_from, t, scored[name])
    if served["candidate"] != th or served[base_name] != th:
        verdict.served = (
            f"compared as each would serve: the candidate with {_hold_said(served['candidate'])}, the {base_name} "
            f"with {_hold_said(served[base_name])}"
        )
    return reports


def judge(
    store: Store,
    version: str,
    *,
    against: Path | None = None,
    min_failures: int = MIN_FAILURES,
    thresholds: Thresholds | None = None,
    progress: Progress | None = None,
) -> Verdict:
    """Compare a stored candidate with the model it would replace on its holdout slice (changes nothing)."""
    say = progress or (lambda _msg: None)
    info = store.models.info(version)
    if info["active"]:
        raise PromoteError(f"model {version} is already the active model")
    base_name, load_base, base_hold = _baseline(store, against)
    verdict = Verdict(version, base_name, promoted=False, forced=False, at=datetime.now(UTC))
    holdout = info["card"].get("holdout")
    if not holdout:
        verdict.refusals.append(
            f"model {version} has no holdout slice (trained with --holdout-days 0): nothing to judge it on"
        )
        return verdict
    frame, failures, score_from = holdout_slice(store, holdout)
    if len(frame) == 0 or frame["timestamp"].max() < score_from:
        verdict.refusals.append(f"the store no longer holds the holdout slice {holdout['start']} .. {holdout['end']}")
        return verdict
    models = {
        "candidate": RiskModel.from_bytes(store.models.get(version)["data"], name=version),
        base_name: load_base(),
    }
    span = f"{holdout['start']} .. {holdout['end']}"
    try:
        reports = _served_reports(verdict, models, base_hold, frame, failures, score_from, thresholds or Thresholds(),
                                  lambda name: say(f"scoring the holdout slice {span} with the {name}"))  # fmt: skip
    except HistoryError as err:  # e.g. a fleet younger than the slice and the alert window before it
        verdict.refusals.append(f"the holdout slice {span} cannot be scored on this fleet's history: {err}")
        return verdict
    cand = reports["candidate"]
    verdict.slice = {"start": holdout["start"], "end": holdout["end"], "scored_from": cand["span"][0],
                     "gpus": cand["gpus"], "failures": cand["failures"]}  # fmt: skip
    verdict.measures = compare(cand, reports[base_name], min_failures)
    for m in verdict.measures:
        if not m.judged:
            verdict.notes.append(f"{m.name} not judged: {m.detail}")
        elif m.worse:
            verdict.refusals.append(
                f"{m.name} {_fmt(m.candidate)} is worse than the {base_name}'s {_fmt(m.baseline)} ({m.detail})"
            )
    if not any(m.judged for m in verdict.measures):
        verdict.refusals.append("the holdout slice judges no measure: too few failures and alerts in it")
    return verdict


def promote(
    store: Store,
    version: str,
    *,
    against: Path | None = None,
    force: bool = False,
    min_failures: int = MIN_FAILURES,
    thresholds: Thresholds | None = None,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> Verdict:
    """Judge the candidate; activate it when it is no worse (or forced). The card records the verdict either way."""
    verdict = judge(
        store, version, against=against, min_failures=min_failures, thresholds=thresholds, progress=progress
    )
    verdict.at = now or verdict.at
    verdict.forced = force and bool(verdict.refusals)
    verdict.promoted = force or not verdict.refusals
    card = {**store.models.info(version)["card"], "promotion": verdict.to_card()}
    if verdict.promoted and verdict.remap_hold is not None:  # the hold the service applies with this model
        card["remap_hold"] = json_safe(verdict.remap_hold)
    if verdict.promoted:
        # Even forced, never a model the scoring loop cannot load (ModelError says why).
        RiskModel.from_bytes(store.models.get(version)["data"], name=version)
        store.models.activate(version, verdict.at, card)
    else:
        store.models.update_card(version, card)
    return verdict


HOLD_DAYS = 28.0
"""`gpuhealth model hold`'s default span: the fleet's newest four weeks."""


@dataclass
class HoldJudged:
    """`judge_hold`'s answer: the active model's hold before and as the fleet's newest days judge it."""

    version: str
    before: dict[str, Any] | None
    after: dict[str, Any]
    slice: dict[str, Any]
    recorded: bool


def judge_hold(
    store: Store,
    *,
    days: float = HOLD_DAYS,
    thresholds: Thresholds | None = None,
    record: bool = True,
    progress: Progress | None = None,
    now: datetime | None = None,
) -> HoldJudged:
    """Judge again, on the fleet's newest `days`, whether the active stored model's pending-remap drain is held.

    A verdict made at a promotion stands until the next one; a fleet changes (older memory wears, a new
    GPU generation arrives), and a hold that outlived its evidence would drain wearing memory late. The
    slice is scored with the active model and NVIDIA's drain, and decided as promote decides
    (`fleet_verdict`). Days the model was trained on (a `train --db` model's span of this fleet) are left
    out. With `record`, the card's `remap_hold` is replaced and the judgement appended to its
    `remap_hold_history`; the scoring loop applies it at its next round, without reloading the model.
    """
    say = progress or (lambda _msg: None)
    th = thresholds or Thresholds()
    if th.remap_hold_fixed:
        raise PromoteError(
            "GPUHEALTH_REMAP_HOLD_RISK is set: the operator's hold stands over any verdict of the fleet's outcomes; "
            "unset it to let them decide"
        )
    info = store.models.active_info()
    if info is None:
        raise PromoteError(
            "no stored model is active, so none carries a hold to judge: `gpuhealth model add` the model serve runs, "
            "then `gpuhealth model promote` it"
        )
    version, card = info["version"], info["card"]
    newest = store.samples.newest_time()
    if newest is None:
        raise PromoteError(f"{store.url} holds no history to judge the hold on")
    end = pd.Timestamp(newest)
    start = _unseen_since(version, card, end - pd.Timedelta(days=days), end)
    frame, failures, score_from = holdout_slice(store, {"start": start.isoformat(), "end": end.isoformat()})
    if len(frame):  # features need a window of history before the first round scored
        score_from = max(score_from, span_start(frame, WINDOW))
    if len(frame) == 0 or score_from >= frame["timestamp"].max():
        raise PromoteError(
            f"{store.url} holds too little history to judge the hold on: {WINDOW / DAY:g} days to build features "
            "on, then the days to judge"
        )
    model = RiskModel.from_bytes(store.models.get(version)["data"], name=version)
    say(f"scoring {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} with the active model {version}")
    try:
        report = _report(model, frame, failures, score_from, th, _score_slice(model, frame, failures, score_from, th))
    except HistoryError as err:  # e.g. days without a sample of any GPU (the collectors were down)
        span = f"{start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M}"
        raise PromoteError(f"cannot score {span}: {err}; try other --days") from None
    after = fleet_verdict(report, th)
    at = now or datetime.now(UTC)
    slice_ = json_safe({"start": start, "end": end, "scored_from": report["span"][0], "gpus": report["gpus"],
                        "failures": report["failures"]})  # fmt: skip
    if record:
        history = [
            *(card.get("remap_hold_history") or []),
            {"at": at.isoformat(), "slice": slice_, "remap_hold": after},
        ]
        store.models.update_card(version, {**card, "remap_hold": json_safe(after), "remap_hold_history": history})
    return HoldJudged(version, card.get("remap_hold"), after, slice_, record)


def _unseen_since(version: str, card: dict[str, Any], start: pd.Timestamp, end: pd.Timestamp) -> pd.Timestamp:
    """Where a hold's slice begins: `start`, or later where the model trained on this fleet's days after it."""
    try:
        trained = fleet_trained_until(card.get("meta") or {})
    except TrainingError as err:
        raise PromoteError(f"model {version}'s card: {err}") from None
    if trained is not None and trained > start:
        start = trained
    if end - start < WINDOW:
        raise PromoteError(
            f"model {version} was trained on this fleet's history up to {start:%Y-%m-%d %H:%M}: the days since are "
            f"fewer than the {WINDOW / DAY:g}-day window a drain's outcome needs; judge its hold later"
        )
    return start
