"""Honest evaluation of the predictor, per incident, beside the NVIDIA/DCGM rule baseline.

Method (../shared/REFERENCE.md "How to evaluate a failure predictor honestly"):
score every GPU at regular cutoffs over the test span; a failure is *caught* when an
alert fired for its GPU in [failed_at - window, failed_at - lead]; alerts are merged
into episodes per GPU (a gap of more than a day starts a new one), and an episode is a
*true* alert when a failure of that GPU follows within the window; precision is over
episodes. Recall is reported per mode (ECC and thermal at a 24 h lead, PCIe at 1 h)
and over all failures, those without any precursor included.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score

from predictor.downtime import Alerts, DowntimeParams, Span, downtime_report, per_1000_gpu_days, react
from predictor.features import build_features
from predictor.model import MODES, RiskModel, failure_counts, make_labels
from predictor.policy import top_heads
from predictor.remediation_downtime import RemediationParams, field_downtime, skill_of
from predictor.replay import apply_waits
from predictor.score import hour_rows
from predictor.thresholds import Thresholds

HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
MODE_LEAD = {"ecc": DAY, "thermal": DAY, "pcie": HOUR}
"""Lead each mode must be caught with: 24 h to schedule an RMA, 1 h to drain (REFERENCE.md)."""
EPISODE_GAP = DAY
FLOORS = {
    "recall_ecc": 0.80,
    "recall_thermal": 0.80,
    "recall_pcie": 0.70,
    "precision": 0.90,
    "false_demotions_per_1000_gpu_days": 1.0,
    "false_episodes_per_1000_gpu_days": 1.0,
    "field_precision": 0.80,
    "pr_auc": 0.85,
}
FIELD_RATE = 0.15
"""Predictable GPU failures per 1,000 GPU-days in the field (REFERENCE.md: 0.14 in a 400-server
trace, ~0.30 in Llama 3's run, of which about half give warning): what field precision assumes."""
Progress = Callable[[str], None]


@dataclass
class Scored:
    """Every (GPU, cutoff) of the test span with risk, rule alerts and the decision it led to."""

    rows: pd.DataFrame
    every: pd.Timedelta


def score_span(
    model: RiskModel,
    frame: pd.DataFrame,
    start: pd.Timestamp,
    end: pd.Timestamp,
    every: str = "1h",
    thresholds: Thresholds | None = None,
    chunk: int = 96,
    failures: pd.DataFrame | None = None,
) -> Scored:
    """Features, risk and alerts at cutoffs from start to end, in chunks of cutoffs: `score_rows`,
    then the demotes decided under the thresholds' waits (`apply_waits`).

    `failures`: the failure records; each cutoff's features see only those before it."""
    th = thresholds or Thresholds()
    scored = score_rows(model, frame, start, end, every, th, chunk, failures)
    return Scored(apply_waits(scored.rows, th), scored.every)


def score_rows(
    model: RiskModel,
    frame: pd.DataFrame,
    start: pd.Timestamp,
    end: pd.Timestamp,
    every: str,
    th: Thresholds,
    chunk: int = 96,
    failures: pd.DataFrame | None = None,
) -> Scored:
    """What `score_span` finds before the waits: per (GPU, cutoff) the risks, the rules that fire
    and whether a node finding holds the model's demote. Nothing here depends on the waits, so
    these rows can be kept and decided again under other ones (`modelops.scorecache`)."""
    cuts = pd.date_range(start, end, freq=every)
    parts = []
    for i in range(0, len(cuts), chunk):
        x = build_features(frame, cuts[i : i + chunk], failures=failures)
        parts.append(hour_rows(model, x, th))
    rows = pd.concat(parts, ignore_index=True)
    rows["gpu_uuid"] = rows["gpu_uuid"].astype(str)
    return Scored(rows, pd.Timedelta(every))


def out_of_service(rows: pd.DataFrame, failures: pd.DataFrame) -> np.ndarray:
    """Per scored row: its GPU's failure is recorded at or before the cutoff and it has not reported since.

    The scorer keeps a GPU that stopped reporting for a while on its last samples (STALE_S), so a
    GPU that died still shows its last decision. Its alerts then are no prediction: the outcome
    is on record. Judged, an alert that begins there (a rule on the dead GPU's last counters, or
    one just after the judged span opens on a GPU that failed before it) would count as false,
    and its GPU-hours as healthy ones; both are left out. A GPU that reports again is judged again.

    `last_seen` is an hour row's stamp, its hour's end (`core.hourly`): a GPU sampled at 19:00:18
    that failed at 19:52 was last seen "at 20:00". So a GPU reports again only with an hour row
    after the hour of its failure.
    """
    if failures.empty or rows.empty:
        return np.zeros(len(rows), dtype=bool)
    f = failures[["gpu_uuid", "failed_at"]].assign(gpu_uuid=lambda d: d["gpu_uuid"].astype(str))
    m = rows[["gpu_uuid", "cutoff", "last_seen"]].reset_index(drop=True).reset_index().merge(f, on="gpu_uuid")
    hit = (m["failed_at"] <= m["cutoff"]) & (m["last_seen"] <= m["failed_at"].dt.ceil("h"))
    return np.isin(np.arange(len(rows)), m.loc[hit, "index"].to_numpy())


def _in_service(scored: Scored, failures: pd.DataFrame, say: Progress) -> tuple[pd.DataFrame, float]:
    """The scored rows less those `out_of_service`, and the GPU-days left out."""
    dead = out_of_service(scored.rows, failures)
    if dead.any():
        say(f"left out {int(dead.sum())} scored rows of GPUs already failed (scored on their last samples)")
    return scored.rows[~dead].reset_index(drop=True), float(dead.sum() * (scored.every / DAY))


def episodes(rows: pd.DataFrame, flag: str, gap: pd.Timedelta = EPISODE_GAP, first: str | None = None) -> pd.DataFrame:
    """Merge alerting cutoffs per GPU into episodes: gpu_uuid, start, end (and, with `first`, that
    column's value at the episode's first row)."""
    cols = ["gpu_uuid", "cutoff", *([first] if first else [])]
    a = rows.loc[rows[flag].to_numpy(dtype=bool), cols].sort_values(["gpu_uuid", "cutoff"], kind="stable")
    if a.empty:
        empty = {"gpu_uuid": [], "start": pd.to_datetime([], utc=True), "end": pd.to_datetime([], utc=True)}
        return pd.DataFrame(empty | ({first: []} if first else {}))
    new = (a["gpu_uuid"] != a["gpu_uuid"].shift()) | (a["cutoff"] - a["cutoff"].shift() > gap)
    eid = new.cumsum()
    agg = {"gpu_uuid": ("gpu_uuid", "first"), "start": ("cutoff", "min"), "end": ("cutoff", "max")}
    return a.groupby(eid).agg(**agg, **({first: (first, "first")} if first else {}))


def caught(
    rows: pd.DataFrame, flag: str, failures: pd.DataFrame, window: pd.Timedelta, lead: pd.Timedelta = DAY
) -> pd.DataFrame:
    """Per failure: caught at its mode's lead, caught at 1 h and 24 h, and the lead of the first alert."""
    a = rows.loc[rows[flag].to_numpy(dtype=bool), ["gpu_uuid", "cutoff"]]
    f = failures.reset_index(drop=True).copy()
    f["gpu_uuid"] = f["gpu_uuid"].astype(str)
    f["fid"] = np.arange(len(f))
    m = f[["fid", "gpu_uuid", "failed_at"]].merge(a, on="gpu_uuid", how="inner")
    before = m["failed_at"] - m["cutoff"]
    m = m[(before >= pd.Timedelta(0)) & (before <= window)]
    first = m.assign(before=before).groupby("fid")["before"].max()
    # NaT where nothing fired (reindex keeps the timedelta type even when nothing did).
    f["first_alert_lead"] = first.astype("timedelta64[ns]").reindex(f["fid"].to_numpy()).to_numpy()
    f["caught_1h"] = f["first_alert_lead"] >= HOUR
    f["caught_24h"] = f["first_alert_lead"] >= DAY
    f["caught"] = f["first_alert_lead"] >= lead_needed(f, lead)
    return f


def mode_leads(lead: pd.Timedelta) -> dict[str, pd.Timedelta]:
    """The lead each failure mode must be caught with: `lead` for ECC and thermal, MODE_LEAD's otherwise."""
    return {**MODE_LEAD, "ecc": lead, "thermal": lead}


def lead_needed(failures: pd.DataFrame, lead: pd.Timedelta) -> np.ndarray:
    """Per failure: the lead its mode must be caught with (`mode_leads`; an hour for a mode not named)."""
    return failures["mode"].map(mode_leads(lead)).fillna(HOUR).to_numpy(dtype="timedelta64[ns]")


def true_episodes(eps: pd.DataFrame, failures: pd.DataFrame, window: pd.Timedelta) -> np.ndarray:
    """Per episode, whether it is true: its GPU fails between its start and window after its end."""
    f = failures[["gpu_uuid", "failed_at"]].assign(gpu_uuid=lambda d: d["gpu_uuid"].astype(str))
    m = eps.reset_index(drop=True).reset_index().merge(f, on="gpu_uuid", how="left")
    hit = (m["failed_at"] >= m["start"]) & (m["failed_at"] - window <= m["end"])
    return np.isin(np.arange(len(eps)), m.loc[hit, "index"].to_numpy())


WARNING_MARGIN = pd.Timedelta(hours=12)
"""A failure "gave warning" when its precursor began at least its lead plus this before it: a
day's lead needs some evidence before that day begins."""


def gave_warning(failures: pd.DataFrame, lead: pd.Timedelta | np.ndarray) -> np.ndarray:
    """Per failure: whether its precursor began at least lead (one, or one per failure) + WARNING_MARGIN before it.

    Only a simulation knows when a precursor began (`precursor_onset`); without the column
    every failure counts as having given warning (recall over them all)."""
    if "precursor_onset" not in failures.columns or failures.empty:
        return np.ones(len(failures), dtype=bool)
    # A failures file read from CSV holds the times as text.
    onset = pd.to_datetime(failures["precursor_onset"], utc=True, errors="coerce")
    span = pd.to_datetime(failures["failed_at"], utc=True) - onset
    return (span >= lead + WARNING_MARGIN).to_numpy(dtype=bool) | onset.isna().to_numpy()


def _warned_a_day(failures: pd.DataFrame) -> np.ndarray:
    """Per failure: of a precursor mode, and its precursor began a day (+ the margin) before it."""
    return failures["mode"].isin(MODES).to_numpy(dtype=bool) & gave_warning(failures, DAY)


def warned_at_lead(failures: pd.DataFrame, lead: pd.Timedelta) -> np.ndarray:
    """Per failure: whether it gave warning at its own mode's lead (`mode_leads`: `lead` for ECC
    and thermal, an hour for the rest): the failures the recall floors are measured on."""
    return gave_warning(failures, lead_needed(failures, lead))


def field_precision(
    true_eps: int, false_eps: int, predictable: int, gpu_days: float, field_rate: float = FIELD_RATE
) -> float:
    """Precision re-weighted to the field's base rate of predictable failures.

    A simulated fleet fails several times more often than a real one, which flatters
    precision: true episodes scale with the failure rate, false ones with the healthy GPUs.
    So the true episodes are scaled by field_rate / (predictable failures per 1,000 GPU-days
    here) and the false ones kept. NaN without failures or episodes to judge.
    """
    if predictable <= 0 or gpu_days <= 0 or true_eps + false_eps == 0:
        return float("nan")
    scaled = true_eps * field_rate / (predictable / gpu_days * 1000)
    return scaled / (scaled + false_eps) if scaled + false_eps > 0 else float("nan")


def judge(
    eps: pd.DataFrame, failures: pd.DataFrame, window: pd.Timedelta, until: pd.Timestamp | None
) -> tuple[pd.DataFrame, np.ndarray]:
    """The episodes whose truth the history can tell, and which of them are true.

    Judged are the true ones and those ending at least a window before `until` (the end of
    the history): a GPU alerting in the last week and not failed by the end may yet fail,
    so counting it false (or true) would be a guess. `until` None judges all.
    """
    if eps.empty:
        return eps, np.zeros(0, dtype=bool)
    true = true_episodes(eps, failures, window)
    if until is None:
        return eps, true
    known = true | (eps["end"] + window <= until).to_numpy()
    return eps[known], true[known]


def judged_gpu_days(rows: pd.DataFrame, every: pd.Timedelta, window: pd.Timedelta, until: pd.Timestamp | None) -> float:
    """GPU-days of the scored rows whose alerts the history can judge: a window before `until`."""
    n = len(rows) if until is None else int((rows["cutoff"] <= until - window).sum())
    return n * (every / DAY)


def precision(
    eps: pd.DataFrame, failures: pd.DataFrame, window: pd.Timedelta, until: pd.Timestamp | None = None
) -> tuple[float, int, int]:
    """(precision, true episodes, judged episodes): true when the GPU fails within window of it;
    with `until`, episodes whose outcome lies past the history are left out (`judged_episodes`)."""
    eps, true = judge(eps, failures, window, until)
    if eps.empty:
        return float("nan"), 0, 0
    tp = int(true.sum())
    return tp / len(eps), tp, len(eps)


def span_start(frame: pd.DataFrame, window: pd.Timedelta = 7 * DAY, start: pd.Timestamp | None = None) -> pd.Timestamp:
    """Where `evaluate` begins scoring a history: `start`, or a window after its first sample (each
    cutoff's features then have a window of history), on the hour."""
    return pd.Timestamp(start or frame["timestamp"].min() + window).ceil("h")


def _scored_span(
    model: RiskModel,
    frame: pd.DataFrame,
    failures: pd.DataFrame,
    begin: pd.Timestamp,
    every: str,
    th: Thresholds,
    kept: Scored | None,
) -> Scored:
    """The span scored now, or `kept` rows of it (`score_rows`) decided under `th`'s waits."""
    if kept is None:
        return score_span(model, frame, begin, frame["timestamp"].max(), every, th, failures=failures)
    return Scored(apply_waits(kept.rows, th), kept.every)


def evaluate(
    model: RiskModel,
    frame: pd.DataFrame,
    failures: pd.DataFrame,
    lead: pd.Timedelta = DAY,
    window: pd.Timedelta = 7 * DAY,
    every: str = "1h",
    start: pd.Timestamp | None = None,
    thresholds: Thresholds | None = None,
    progress: Progress | None = None,
    downtime: DowntimeParams | None = None,
    scored: Scored | None = None,
    remediation: RemediationParams | None = None,
) -> dict[str, Any]:
    """Score the span and measure the model and the rule baseline; returns the report dict.

    With `downtime`, also the what-if in GPU-hours under react, rules and model (predictor/downtime.py),
    and at real precursor shares with remediate (`remediation`, predictor/remediation_downtime.py).
    With `scored`, the span's rows as `score_rows` made them for this frame (kept from an earlier
    run): they are not scored again, only their demotes decided under `thresholds`' waits.
    """
    say = progress or (lambda _m: None)
    th = thresholds or Thresholds()
    t1 = frame["timestamp"].max()
    begin = span_start(frame, window, start)
    say(f"scoring every {every} from {begin:%Y-%m-%d} to {t1:%Y-%m-%d}" + (" (kept rows)" if scored else ""))
    scored = _scored_span(model, frame, failures, begin, every, th, scored)
    rows, dead_days = _in_service(scored, failures, say)
    # Failures the span can judge: a full window of scoring before them.
    judged = failures[(failures["failed_at"] >= begin + window) & (failures["failed_at"] <= t1 + DAY)].copy()
    say(f"judging {len(judged)} failures")
    gpu_days = len(rows) * (scored.every / DAY)
    # False alerts per GPU-day over the span whose alerts can be judged (a window before the end).
    judged_days = judged_gpu_days(rows, scored.every, window, t1)
    report: dict[str, Any] = {
        "span": [str(begin), str(t1)],
        "every": every,
        "lead_hours_by_mode": {"ecc": lead / HOUR, "thermal": lead / HOUR, "pcie": 1.0, "other": 1.0},
        "window_days": window / DAY,
        "thresholds": {"watch": th.watch, "demote": th.demote},
        "gpus": int(rows["gpu_uuid"].nunique()),
        "gpu_days": gpu_days,
        "gpu_days_after_failure": dead_days,
        "judged_gpu_days": judged_days,
        "failures": failure_counts(judged),
    }
    systems = {"model": "alert", "rules": "rule_alert"}
    per_system: dict[str, Any] = {}
    per_failure: dict[str, pd.DataFrame] = {}
    judging = Judging(judged, failures, window, lead, t1, judged_days)
    for name, flag in systems.items():
        per_system[name], per_failure[name] = judging.measure(rows, flag)
    per_system["model"]["episodes_by_cause"] = judging.by_cause(rows)
    dem_eps = episodes(rows, "demote")
    _, dem_tp, dem_n = precision(dem_eps, failures, window, t1)
    per_system["model"]["false_demotions"] = dem_n - dem_tp
    per_system["model"]["false_demotions_per_1000_gpu_days"] = per_1000_gpu_days(dem_n - dem_tp, judged_days)
    report["model"] = per_system["model"]
    report["rules"] = per_system["rules"]
    curve = pr_curve(rows, judged, failures, window, lead, t1)
    report["pr_auc"] = curve.attrs["auc"]
    report["pr_auc_all"] = curve.attrs["auc_all"]
    labels = make_labels(rows, failures, HOUR, window)
    y = labels[list(MODES)].max(axis=1).to_numpy()
    report["sample_average_precision"] = float(average_precision_score(y, rows["risk"])) if y.any() else float("nan")
    if "remap_alone" in rows.columns and rows["remap_alone"].any():
        report["remap_hold"] = remap_hold_whatif(rows, th, judging, (per_system["model"], per_failure["model"]))
    if downtime is not None:
        inputs = downtime_inputs(rows, judged, failures, window, lead, begin, scored.every, t1)
        report["downtime"] = downtime_report(*inputs, downtime)
        skills = {n: skill_of(a, _warned_a_day(a.per_failure), inputs[1], downtime.maintenance_window)
                  for n, a in inputs[0].items() if n != "react"}  # fmt: skip
        report["downtime"]["field"] = field_downtime(skills, downtime, remediation or RemediationParams())
    report["floors"] = check_floors(report)
    report["_curve"] = curve
    report["_per_failure"] = per_failure
    return report


@dataclass
class Judging:
    """What a system's alerts are judged against: the failures the span can judge (`judged`), all
    failures, the window and lead, the span's end and its judged GPU-days."""

    judged: pd.DataFrame
    failures: pd.DataFrame
    window: pd.Timedelta
    lead: pd.Timedelta
    until: pd.Timestamp
    judged_days: float

    def measure(self, rows: pd.DataFrame, flag: str) -> tuple[dict[str, Any], pd.DataFrame]:
        """One system's measures (its alerts are `rows[flag]`) and `caught`'s per-failure frame."""
        c = caught(rows, flag, self.judged, self.window, self.lead)
        prec, tp, n_eps = precision(episodes(rows, flag), self.failures, self.window, self.until)
        res: dict[str, Any] = {
            "precision": prec,
            "true_episodes": tp,
            "episodes": n_eps,
            "false_episodes_per_1000_gpu_days": per_1000_gpu_days(n_eps - tp, self.judged_days),
        }
        res |= _recalls(c, self.lead)
        res["field_precision"] = field_precision(tp, n_eps - tp, res["precursor_failures"], self.judged_days)
        leads = c.loc[c["caught_1h"], "first_alert_lead"] / HOUR
        res["median_lead_hours"] = float(leads.median()) if len(leads) else float("nan")
        return res, c

    def by_cause(self, rows: pd.DataFrame) -> dict[str, dict[str, Any]]:
        """Model + rules' judged alert episodes (`rows["alert"]`, as `apply_waits` decides them) by
        what raised each (`alert_causes` at its first row): how many, how many false, and the false
        ones per 1,000 judged GPU-days: where an operator's false alarms come from."""
        eps = episodes(rows.assign(_cause=alert_causes(rows)), "alert", first="_cause")
        eps, true = judge(eps, self.failures, self.window, self.until)
        out: dict[str, dict[str, Any]] = {}
        for cause in ALERT_CAUSES:
            mine = (eps["_cause"] == cause).to_numpy()
            if not mine.any():
                continue
            false = int((mine & ~true).sum())
            per_days = per_1000_gpu_days(false, self.judged_days)
            out[cause] = {"episodes": int(mine.sum()), "false": false, "false_per_1000_gpu_days": per_days}
        return out


ALERT_CAUSES = (
    "pending remap alone",
    "other drain or RMA rule",
    "probation",
    "heat alone",
    "model: ECC",
    "model: thermal",
    "model: PCIe",
    "model",
)
"""What can raise model + rules' alert, in the order `alert_causes` asks: NVIDIA's drain for a pending
row remap with no other drain or RMA rule, any other such rule, the probation after one, the thermal
demote on the core's heat alone, and the model's demote by its riskiest head."""


def alert_causes(rows: pd.DataFrame) -> np.ndarray:
    """Per row of `apply_waits`: what raised its alert (an ALERT_CAUSES entry), "" where none."""
    act = rows["out_of_service"].to_numpy(dtype=bool)
    alone = rows["remap_alone"].to_numpy(dtype=bool) if "remap_alone" in rows.columns else np.zeros(len(rows), bool)
    head, _ = top_heads(rows)
    # The riskiest head's cause; "model" where no head is known (the heads are HEADS' names).
    model = pd.Series(head).map({c.removeprefix("model: "): c for c in ALERT_CAUSES[4:-1]}).fillna("model").to_numpy()
    conditions = [
        act & alone,
        act,
        rows["probation"].to_numpy(dtype=bool),
        rows["on_heat"].to_numpy(dtype=bool),
        rows["demote"].to_numpy(dtype=bool),
    ]
    choices = np.asarray(ALERT_CAUSES[:4], dtype=object)
    out = np.select(conditions, [*choices, model], default="")
    return np.asarray(out, dtype=object)


REMAP_HOLD_WHATIF = 0.3
"""The hold of a pending remap's drain the evaluation weighs against NVIDIA's drain at once where the
run had it off (`remap_hold_whatif`): the level docs/model.md measures."""


def remap_hold_whatif(
    rows: pd.DataFrame, th: Thresholds, judging: Judging, run: tuple[dict[str, Any], pd.DataFrame]
) -> dict[str, Any]:
    """The pending remap's drain decided the other way (NVIDIA's at once where `th` holds it, held at
    REMAP_HOLD_WHATIF where it does not; `Thresholds.remap_hold_risk`), judged as model + rules is,
    and how many of the GPUs a pending remap alone would drain failed of ECC within the window after
    it: what tells an operator which world their fleet is in (a remap on a healthy GPU, or wear).
    `run`: model + rules' measures of `rows` as run (`judging.measure(rows, "alert")`)."""
    other = replace(th, remap_hold_risk=0.0 if th.remap_hold_risk > 0 else REMAP_HOLD_WHATIF)
    measured, c_run = run
    measures, c_other = judging.measure(apply_waits(rows, other), "alert")
    was, now = c_run["caught"].to_numpy(dtype=bool), c_other["caught"].to_numpy(dtype=bool)
    alone = rows.loc[rows["remap_alone"].to_numpy(dtype=bool), ["gpu_uuid", "cutoff"]]
    span = alone.groupby("gpu_uuid")["cutoff"].agg(["min", "max"])
    ecc = judging.judged[judging.judged["mode"] == "ecc"][["gpu_uuid", "failed_at"]].astype({"gpu_uuid": str})
    m = span.reset_index().merge(ecc, on="gpu_uuid")
    wore = m[(m["failed_at"] >= m["min"]) & (m["failed_at"] <= m["max"] + judging.window)]["gpu_uuid"].nunique()
    keep = ("precision", "field_precision", "false_episodes_per_1000_gpu_days", "episodes", "true_episodes",
            "recall_ecc_warned", "recall_thermal_warned", "recall_pcie_warned", "precursor_caught")  # fmt: skip
    return {
        "hold_risk_run": th.remap_hold_risk,
        "hold_risk_other": other.remap_hold_risk,
        "pending_remap_gpus": len(span),
        "pending_remap_gpus_failed_ecc": int(wore),
        "false_episodes_run": measured["episodes"] - measured["true_episodes"],
        "false_episodes_other": measures["episodes"] - measures["true_episodes"],
        # Per failure the span judges, at its mode's lead: caught as run and not the other way, and back.
        "catches_lost": failure_counts(c_run[was & ~now]),
        "catches_gained": failure_counts(c_run[now & ~was]),
        "other": {k: measures[k] for k in keep},
    }


def _recalls(c: pd.DataFrame, lead: pd.Timedelta) -> dict[str, Any]:
    """Recall per mode (all failures, and those that gave warning at its lead, with their count),
    over the precursor modes (with the failures and catches it counts), and at 1 h and 24 h;
    `c` is `caught`'s."""
    res: dict[str, Any] = {}
    for mode in MODES:
        sub = c[c["mode"] == mode]
        res[f"recall_{mode}"] = float(sub["caught"].mean()) if len(sub) else float("nan")
        warned = sub[warned_at_lead(sub, lead)]
        res[f"recall_{mode}_warned"] = float(warned["caught"].mean()) if len(warned) else float("nan")
        res[f"failures_{mode}_warned"] = len(warned)
    precursor = c[c["mode"].isin(MODES)]
    res["recall_precursor_modes"] = float(precursor["caught"].mean()) if len(c) else float("nan")
    res["precursor_failures"], res["precursor_caught"] = len(precursor), int(precursor["caught"].sum())
    res["recall_all_1h"] = float(c["caught_1h"].mean()) if len(c) else float("nan")
    res["recall_all_24h"] = float(c["caught_24h"].mean()) if len(c) else float("nan")
    return res


def downtime_inputs(
    rows: pd.DataFrame,
    judged: pd.DataFrame,
    failures: pd.DataFrame,
    window: pd.Timedelta,
    lead: pd.Timedelta,
    begin: pd.Timestamp,
    every: pd.Timedelta,
    until: pd.Timestamp | None = None,
) -> tuple[dict[str, Alerts], Span]:
    """What react, the drain/RMA rules and the model + rules did to each failure, their false
    episodes (those the history can judge, over the GPU-days they come from)."""
    policies = {}
    for name, flag in (("rules", "rule_act"), ("model", "alert")):
        eps, true = judge(episodes(rows, flag), failures, window, until)
        policies[name] = Alerts(caught(rows, flag, judged, window, lead), eps[~true])
    per_row = every / DAY
    span = Span(
        judged_gpu_days(rows, every, window, until), float((rows["cutoff"] >= begin + window).sum() * per_row), every
    )
    return {"react": react(policies["model"].per_failure), **policies}, span


def pr_curve(
    rows: pd.DataFrame,
    judged: pd.DataFrame,
    failures: pd.DataFrame,
    window: pd.Timedelta,
    lead: pd.Timedelta = DAY,
    until: pd.Timestamp | None = None,
) -> pd.DataFrame:
    """Per-incident recall (precursor modes) and episode precision as the risk threshold moves
    (episodes whose outcome lies past `until`, the end of the history, left out).

    `recall` is over the failures that gave warning at their mode's lead, as the recall floors
    are (`warned_at_lead`; a failure whose precursor began too late for its lead caps the curve
    of any model alike); `recall_all` over all failures of those modes. attrs: `auc` and
    `auc_all`, the areas under each."""
    precursor = judged[judged["mode"].isin(MODES)]
    warned = warned_at_lead(precursor, lead)
    points = []
    for t in np.round(np.arange(0.05, 1.0, 0.05), 2):
        r = rows.assign(_a=rows["risk"] >= t)
        c = caught(r, "_a", precursor, window, lead)["caught"].to_numpy(dtype=bool)
        prec, _, n = precision(episodes(r, "_a"), failures, window, until)
        points.append({"threshold": t, "recall": float(c[warned].mean()) if warned.any() else 0.0,
                       "recall_all": float(c.mean()) if len(c) else 0.0, "precision": prec if n else 1.0})  # fmt: skip
    curve = pd.DataFrame(points)
    curve.attrs["auc"] = _area(curve, "recall")
    curve.attrs["auc_all"] = _area(curve, "recall_all")
    return curve.sort_values("recall")


def _area(curve: pd.DataFrame, recall: str) -> float:
    """Area under the step curve of precision over `recall`, precision held from the right (as
    average precision does)."""
    c = curve.sort_values(recall, kind="stable")
    rec = np.concatenate([[0.0], c[recall].to_numpy()])
    held = np.maximum.accumulate(c["precision"].to_numpy()[::-1])[::-1]
    return float(np.sum(np.diff(rec) * held))


def check_floors(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each quality floor of issue 4 with the measured value and whether it holds."""
    m = report["model"]
    measured = {
        "recall_ecc": m["recall_ecc_warned"],
        "recall_thermal": m["recall_thermal_warned"],
        "recall_pcie": m["recall_pcie_warned"],
        "precision": m["precision"],
        "false_demotions_per_1000_gpu_days": m["false_demotions_per_1000_gpu_days"],
        "false_episodes_per_1000_gpu_days": m["false_episodes_per_1000_gpu_days"],
        "field_precision": m["field_precision"],
        "pr_auc": report["pr_auc"],
    }
    out = {}
    for k, floor in FLOORS.items():
        v = measured[k]
        ok = v <= floor if k.startswith("false") else v >= floor
        out[k] = {"value": v, "floor": floor, "ok": bool(ok)}
    beats = (m["recall_precursor_modes"] > report["rules"]["recall_precursor_modes"]) and (
        m["precision"] >= report["rules"]["precision"] or np.isnan(report["rules"]["precision"])
    )
    out["beats_rule_baseline"] = {
        "value": f"recall {m['recall_precursor_modes']:.2f} vs {report['rules']['recall_precursor_modes']:.2f}, "
        f"precision {m['precision']:.2f} vs {report['rules']['precision']:.2f}",
        "floor": "higher recall at equal or better precision",
        "ok": bool(beats),
    }
    return out
