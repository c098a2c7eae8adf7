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
from modelops.training import fleet_history
from predictor.evaluate import MODE_LEAD, Scored, evaluate, score_rows, span_start
from predictor.model import DAY, HOUR, MODES, RiskModel
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


def _baseline(store: Store, against: Path | None) -> tuple[str, Callable[[], RiskModel]]:
    """The model a promotion would replace (its name, and how to load it): the active stored one, else the
    file `serve` runs."""
    active = store.models.active_info()
    if active is not None:
        version = active["version"]
        load = lambda: RiskModel.from_bytes(store.models.get(version)["data"], name=version)  # noqa: E731
        return f"active model {version}", load
    if against is not None:
        return f"model file {against}", lambda: RiskModel.load(against)
    return "shipped default model", load_model


def _report(
    model: RiskModel, frame: pd.DataFrame, failures: pd.DataFrame, start: pd.Timestamp, th: Thresholds, rows: Scored
) -> dict[str, Any]:
    """The slice's evaluation of one model's scored rows, decided under `th`."""
    return evaluate(model, frame, failures, lead=DAY, window=WINDOW, start=start, thresholds=th, scored=rows)


def _score_slice(
    model: RiskModel, frame: pd.DataFrame, failures: pd.DataFrame, score_from: pd.Timestamp, th: Thresholds
) -> Scored:
    """One model's rows over the slice, hourly from `score_from` (decided under `th`; `_report` judges them)."""
    begin = span_start(frame, WINDOW, score_from)
    return score_rows(model, frame, begin, frame["timestamp"].max(), "1h", th, failures=failures)


def _reports(
    models: dict[str, RiskModel],
    frame: pd.DataFrame,
    failures: pd.DataFrame,
    score_from: pd.Timestamp,
    th: Thresholds,
    scoring: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Each model's evaluation of the slice, decided under the operator's `th`."""
    reports = {}
    for name, model in models.items():
        scoring(name)
        reports[name] = _report(
            model, frame, failures, score_from, th, _score_slice(model, frame, failures, score_from, th)
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
    base_name, load_base = _baseline(store, against)
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
        reports = _reports(models, frame, failures, score_from, thresholds or Thresholds(),
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
    if verdict.promoted:
        # Even forced, never a model the scoring loop cannot load (ModelError says why).
        RiskModel.from_bytes(store.models.get(version)["data"], name=version)
        store.models.activate(version, verdict.at, card)
    else:
        store.models.update_card(version, card)
    return verdict
