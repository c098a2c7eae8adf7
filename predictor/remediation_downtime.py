"""The honest downtime figure: react, rules, model and remediate at real precursor shares.

Expected GPU-hours lost per 1,000 GPU-days on a fleet where a share `p` of failures warns a
day ahead, at a field failure rate, per fault (analytic, no sampling):

- *react*: a human notices the fault (`detect_human`); the job stalls until then, loses the
  work since its last checkpoint and restarts; the node is out for a human repair drawn from
  the InfiniteHBD trace (a lognormal through its median 17 h and p90 479 h, capped at the
  trace's span).
- *rules*, *model*: the share `p x recall` is drained in a maintenance window before it fails
  (a planned job move and a planned human repair, as predictor/downtime.py counts it); their
  false alert episodes move nodes to interruptible work; the rest as react.
- *remediate*: the model, plus detection at the next scoring round (`detect_fast`), plus a
  remedy for each fault class that one can fix: wait for idle + reset or reboot + the
  verification probes; a failed remedy goes to the human repair after it, and a remedied
  GPU that faults again costs a whole further fault.

The saving of remediate against react is split in that order: prediction (react to model),
fast detection (model to model with fast detection), remediation (to remediate); the three
add up to the whole. Every parameter and its source: docs/downtime.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from predictor.downtime import HOUR, UNIT, Alerts, DowntimeParams, Span, drained_share

Z90 = NormalDist().inv_cdf(0.9)
TWO_MINUTES, FIVE_MINUTES = pd.Timedelta(minutes=2), pd.Timedelta(minutes=5)
QUARTER_HOUR, HALF_HOUR = pd.Timedelta(minutes=15), pd.Timedelta(minutes=30)
TRACE_MEDIAN, TRACE_P90 = pd.Timedelta(hours=17), pd.Timedelta(hours=479)
"""The InfiniteHBD trace's time to repair a GPU fault: median and 90th percentile (REFERENCE.md)."""
TRACE_SPAN = pd.Timedelta(days=348)
POLICIES = ("react", "rules", "model", "remediate")
STEPS = ("prediction", "fast_detection", "remediation")
SHARES = (0.02, 0.05, 0.10)
"""Shares of failures that warn a day ahead: Titan 2.2 %, the LLM cluster 9.5 % (REFERENCE.md)."""
RATES = (0.14, 0.30)
"""Failures per 1,000 GPU-days: InfiniteHBD trace and Titan 0.14, Llama 3's run 0.30 (REFERENCE.md)."""


@dataclass(frozen=True)
class FaultClass:
    """A class of GPU fault, its share of faults, the remedy tried and the share that remedy fixes."""

    name: str
    count: int
    """Faults of this class in the InfiniteHBD trace (REFERENCE.md names the classes of 156 of its 158)."""
    remedy: str
    """"reset", "reboot" or "replace" (a human's repair; no remedy tried)."""
    fixed: float
    """Share of its faults the remedy fixes (verified and returned)."""
    source: str


FAULT_CLASSES: tuple[FaultClass, ...] = (
    FaultClass("DBE over threshold", 60, "reset", 0.59, "NCSA Delta: about 59 % of H100 row remaps succeed"),
    FaultClass("device unknown error", 40, "reboot", 0.5, "assumption: no public figure"),
    FaultClass("PCIe link width low", 25, "replace", 0.0, "trace: median repair 3 days, a reseat or a part"),
    FaultClass("XID", 11, "reset", 0.5, "assumption: no public figure"),
    FaultClass("nvidia-smi timeout", 9, "reboot", 0.5, "assumption: a hung driver, no public figure"),
    FaultClass("GPU lost", 5, "reboot", 0.5, "XID 79: a reset cannot reach it; share an assumption"),
    FaultClass("P2P bandwidth low", 3, "replace", 0.0, "NVLink/PCIe hardware"),
    FaultClass("temperature", 2, "replace", 0.0, "cooling, a human's work"),
    FaultClass("SDC", 1, "replace", 0.0, "silent data corruption: the GPU is replaced"),
)
"""The InfiniteHBD trace's GPU fault classes (REFERENCE.md "Field statistics") and what a remedy does."""
REMEDIES = ("reset", "reboot", "replace")


@dataclass(frozen=True)
class RemediationParams:
    """Detection, remedy and human repair times; each default's source is in its docstring."""

    detect_human: pd.Timedelta = HOUR
    """Fault to a human taking the node out (react). Policy assumption: the job's NCCL watchdog
    fires after 10 min (PyTorch's default), then an on-call operator finds the node."""
    detect_fast: pd.Timedelta = FIVE_MINUTES
    """Fault to drain with gpuhealth: an XID or a lost GPU is read within seconds, decided at
    the next scoring round, every 5 min by default."""
    wait_idle: pd.Timedelta = HALF_HOUR
    """Drain to idle before an unplanned remedy (the failed job's processes gone, other work on the
    node finished). Policy choice: the remediation loop's deadline bounds it."""
    reset_time: pd.Timedelta = TWO_MINUTES
    """`nvidia-smi --gpu-reset`: seconds to a minute; 2 min with the agent's round trip."""
    reboot_time: pd.Timedelta = QUARTER_HOUR
    """An 8-GPU server's reboot (firmware, POST, driver load): 10-20 min."""
    verify_time: pd.Timedelta = FIVE_MINUTES
    """The verified probes: 60 s budget + 30 s start-up (docs/probes.md), `dcgmi diag -r 2` about
    2 min where DCGM is used, and the service's check; rounded up."""
    repair_median: pd.Timedelta = TRACE_MEDIAN
    """Human repair, median: InfiniteHBD trace (REFERENCE.md "What real fleets show")."""
    repair_p90: pd.Timedelta = TRACE_P90
    """Human repair, 90th percentile: the same trace."""
    repair_cap: pd.Timedelta = TRACE_SPAN
    """No repair counts longer than the trace's span (348 days): the lognormal's tail is cut there."""
    refault: float = 0.34
    """Share of remedied GPUs that fault again, each a whole further fault (then replaced): the
    trace's 33 of 97 nodes with a GPU fault that had another. Pessimistic: those repeats happened
    under human repair and are in the field rate already."""
    classes: tuple[FaultClass, ...] = field(default=FAULT_CLASSES)

    def __post_init__(self) -> None:
        for name in ("detect_human", "detect_fast", "wait_idle", "reset_time", "reboot_time", "verify_time"):
            t = getattr(self, name)
            if not isinstance(t, pd.Timedelta) or pd.isna(t) or t < pd.Timedelta(0):
                raise ValueError(f"{name}: must be a duration >= 0, got {t!r}")
        if not pd.Timedelta(0) < self.repair_median < self.repair_p90:
            raise ValueError(f"repair: need 0 < median < p90, got {self.repair_median} and {self.repair_p90}")
        if not self.repair_cap > self.repair_median:
            raise ValueError(f"repair_cap: must exceed the median, got {self.repair_cap}")
        if not 0.0 <= self.refault <= 1.0:
            raise ValueError(f"refault: must be a share in 0..1, got {self.refault}")
        if not self.classes or sum(c.count for c in self.classes) <= 0:
            raise ValueError("classes: need at least one fault class with a count")
        for c in self.classes:
            if c.remedy not in REMEDIES or not 0.0 <= c.fixed <= 1.0 or c.count < 0:
                raise ValueError(f"fault class {c.name!r}: remedy one of {REMEDIES}, fixed in 0..1, count >= 0")
            if c.remedy == "replace" and c.fixed:
                raise ValueError(f"fault class {c.name!r}: a replacement is a human's repair, fixed must be 0")

    def as_dict(self) -> dict[str, Any]:
        """The parameters as plain numbers (durations in hours), for report.json."""
        mu, sigma = lognormal_from_quantiles(self.repair_median / HOUR, self.repair_p90 / HOUR)
        hours = ("detect_human", "detect_fast", "wait_idle", "reset_time", "reboot_time", "verify_time")
        return {f"{n}_hours": getattr(self, n) / HOUR for n in hours} | {
            "repair_median_hours": self.repair_median / HOUR,
            "repair_p90_hours": self.repair_p90 / HOUR,
            "repair_cap_hours": self.repair_cap / HOUR,
            "repair_lognormal": {"mu": mu, "sigma": sigma},
            "repair_mean_hours": human_repair_hours(self),
            "refault": self.refault,
            "fixed_share": fixed_share(self),
            "classes": [{"name": c.name, "count": c.count, "remedy": c.remedy, "fixed": c.fixed} for c in self.classes],
        }


@dataclass(frozen=True)
class Skill:
    """What a predicting policy does in the field."""

    recall: float
    """Share of the failures that warn a day ahead which are drained in a window before they fail."""
    false_per_1000: float = 0.0
    """False alert episodes per 1,000 GPU-days (healthy GPUs: not scaled with the failure rate)."""
    false_days: float = 0.0
    """Mean length of a false episode, days."""


DOCS_SKILLS = {"rules": Skill(28 / 34), "model": Skill(1.0)}
"""The skills docs/downtime.md's table is computed with: docs/model.md, seed 7 (the rules catch 28
of the 34 failures with precursors, the model all 34; no false episode on 57,658 GPU-days)."""


def lognormal_from_quantiles(median: float, p90: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal whose median and 90th percentile are these."""
    if not 0 < median < p90:
        raise ValueError(f"a lognormal needs 0 < median < p90, got {median} and {p90}")
    return math.log(median), math.log(p90 / median) / Z90


def capped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X lognormal(mu, sigma)."""
    n = NormalDist()
    lc = math.log(cap)
    below = math.exp(mu + sigma**2 / 2) * n.cdf((lc - mu - sigma**2) / sigma)
    return below + cap * (1 - n.cdf((lc - mu) / sigma))


def human_repair_hours(rp: RemediationParams) -> float:
    """Mean hours a node is out for a human's repair: the trace's lognormal, capped."""
    mu, sigma = lognormal_from_quantiles(rp.repair_median / HOUR, rp.repair_p90 / HOUR)
    return capped_mean(mu, sigma, rp.repair_cap / HOUR)


def fixed_share(rp: RemediationParams) -> float:
    """Share of all faults that a reset or reboot fixes."""
    total = sum(c.count for c in rp.classes)
    return sum(c.count * c.fixed for c in rp.classes) / total


def _costs(p: DowntimeParams, rp: RemediationParams, detect: pd.Timedelta, remedy: bool) -> tuple[float, float]:
    """(unplanned, planned) GPU-hours of one fault: undrained, and drained in a window."""
    job, node = p.gpus_per_job, p.gpus_per_node
    human = human_repair_hours(rp)
    restart = job * (p.restart_time / HOUR)
    interrupted = job * (p.checkpoint_interval / HOUR / 2 + detect / HOUR) + restart
    if not remedy:
        return interrupted + node * human, restart + node * human
    times = {"reset": rp.reset_time / HOUR, "reboot": rp.reboot_time / HOUR, "replace": 0.0}
    total = sum(c.count for c in rp.classes)
    # A further fault of a remedied GPU: detected fast, repaired by a human (the repeat-offender rule).
    again = job * (p.checkpoint_interval / HOUR / 2 + rp.detect_fast / HOUR) + restart + node * human
    out_u = out_p = 0.0
    for c in rp.classes:
        w = c.count / total
        tried = c.remedy != "replace"
        t = times[c.remedy] + (rp.verify_time / HOUR if tried else 0.0)
        wait = rp.wait_idle / HOUR if tried else 0.0
        fail_cost = (1 - c.fixed) * human + c.fixed * rp.refault * again / node
        out_u += w * (wait + t + fail_cost)
        out_p += w * (t + fail_cost)  # drained in a window: already idle
    return interrupted + node * out_u, restart + node * out_p


def field_cell(
    p: DowntimeParams, rp: RemediationParams, skills: Mapping[str, Skill], share: float, rate: float
) -> dict[str, float]:
    """GPU-hours per 1,000 GPU-days of each policy (and model with fast detection) at one share and rate."""
    human = _costs(p, rp, rp.detect_human, remedy=False)
    fast = _costs(p, rp, rp.detect_fast, remedy=False)
    fixed = _costs(p, rp, rp.detect_fast, remedy=True)
    react_skill = Skill(0.0)

    def total(costs: tuple[float, float], s: Skill) -> float:
        d = share * min(max(s.recall, 0.0), 1.0) if s.recall == s.recall else 0.0
        false = s.false_per_1000 * s.false_days * 24 * p.gpus_per_node * p.interruptible_loss
        return rate * ((1 - d) * costs[0] + d * costs[1]) + false

    model = skills.get("model", react_skill)
    return {
        "react": total(human, react_skill),
        "rules": total(human, skills.get("rules", react_skill)),
        "model": total(human, model),
        "model_fast_detection": total(fast, model),
        "remediate": total(fixed, model),
    }


def _reduction(base: float, other: float) -> float:
    return (1 - other / base) * 100 if base > 0 else float("nan")


def field_downtime(
    skills: Mapping[str, Skill],
    params: DowntimeParams,
    rp: RemediationParams,
    shares: Sequence[float] = SHARES,
    rates: Sequence[float] = RATES,
) -> dict[str, Any]:
    """The table at real precursor shares and failure rates, with the saving split by step."""
    rows: list[dict[str, Any]] = []
    for rate in rates:
        for share in shares:
            c = field_cell(params, rp, skills, share, rate)
            r = c["react"]
            steps = {
                "prediction": _reduction(r, c["model"]),
                "fast_detection": _reduction(r, c["model_fast_detection"]) - _reduction(r, c["model"]),
                "remediation": _reduction(r, c["remediate"]) - _reduction(r, c["model_fast_detection"]),
            }
            rows.append(
                {"failures_per_1000_gpu_days": rate, "precursor_share": share, "policies": c}
                | {"reduction_pct": {n: _reduction(r, c[n]) for n in POLICIES[1:]}, "saving_pct_points": steps}
            )
    cuts = [row["reduction_pct"]["remediate"] for row in rows]
    return {
        "unit": UNIT,
        "remediation": rp.as_dict(),
        "skills": {n: vars(s) for n, s in skills.items()},
        "rows": rows,
        "remediate_reduction_pct_range": [min(cuts), max(cuts)] if cuts else [],
    }


def skill_of(alerts: Alerts, warned: np.ndarray, span: Span, window: pd.Timedelta) -> Skill:
    """A policy's field skill from its evaluated alerts: the drained share of the failures that
    warned a day ahead (`warned`, one per failure), its false episodes' rate and mean length."""
    drained = drained_share(alerts.per_failure, window)[np.asarray(warned, dtype=bool)]
    eps = alerts.false_episodes
    days = ((eps["end"] - eps["start"] + span.every) / pd.Timedelta(days=1)).astype(float)
    return Skill(
        recall=float(drained.mean()) if len(drained) else float("nan"),
        false_per_1000=len(eps) / span.gpu_days * 1000 if span.gpu_days > 0 else 0.0,
        false_days=float(days.mean()) if len(eps) else 0.0,
    )


def _pct(v: float) -> str:
    return "n/a" if v != v else f"{v:.1f}"


def field_markdown(f: dict[str, Any]) -> str:
    """The table: GPU-hours per 1,000 GPU-days per policy, the cut against react and its three parts."""
    head = (
        "| failures per 1,000 GPU-days | warn a day ahead | react | rules | model | remediate "
        "| remediate vs react | of it, points: prediction | fast detection | remediation |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for row in f["rows"]:
        c, s = row["policies"], row["saving_pct_points"]
        cells = [
            f"{row['failures_per_1000_gpu_days']:g}",
            f"{row['precursor_share'] * 100:g} %",
            *(f"{c[n]:,.0f}" for n in POLICIES),
            f"**−{row['reduction_pct']['remediate']:.0f} %**",
            *(_pct(s[k]) for k in STEPS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def field_section(f: dict[str, Any]) -> str:
    """The evaluation report's section: the table and what it assumes."""
    rp = f["remediation"]
    lo, hi = f["remediate_reduction_pct_range"]
    return "\n".join(
        [
            "",
            "## At real precursor shares: react, rules, model, remediate",
            "",
            f'{UNIT}, expected per fault (docs/downtime.md "The honest figure"). Human repair: a lognormal '
            f"through the InfiniteHBD trace's median {rp['repair_median_hours']:g} h and p90 "
            f"{rp['repair_p90_hours']:g} h (mean {rp['repair_mean_hours']:.0f} h, capped at the trace's span); "
            f"detection {rp['detect_human_hours']:g} h by a human, {rp['detect_fast_hours'] * 60:.0f} min by "
            f"gpuhealth; a reset or reboot fixes {rp['fixed_share']:.0%} of faults, {rp['refault']:.0%} of "
            "those fault again. Prediction at this evaluation's recall on failures that warned a day ahead "
            f"(rules {_skill(f, 'rules')}, model {_skill(f, 'model')}).",
            "",
            field_markdown(f),
            "",
            f"remediate cuts downtime by {lo:.0f}–{hi:.0f} % against react here; the product brief "
            f"promises 67 %{' (this is below it)' if hi < 67 else ''}.",
            "",
        ]
    )


def _skill(f: dict[str, Any], name: str) -> str:
    s = f["skills"].get(name)
    return "n/a" if s is None or s["recall"] != s["recall"] else f"{s['recall']:.2f}"


DOCS_BEGIN = "<!-- generated by `gpuhealth docs downtime`: begin -->"
DOCS_END = "<!-- generated by `gpuhealth docs downtime`: end -->"


def docs_block(params: DowntimeParams | None = None, rp: RemediationParams | None = None) -> str:
    """docs/downtime.md's generated block: the table at the defaults and DOCS_SKILLS."""
    f = field_downtime(DOCS_SKILLS, params or DowntimeParams(), rp or RemediationParams())
    lo, hi = f["remediate_reduction_pct_range"]
    r = f["remediation"]
    return "\n".join(
        [
            field_markdown(f),
            "",
            f"Human repair mean {r['repair_mean_hours']:.0f} h (lognormal μ = {r['repair_lognormal']['mu']:.3f}, "
            f"σ = {r['repair_lognormal']['sigma']:.3f}, capped at {r['repair_cap_hours'] / 24:.0f} days); "
            f"a remedy fixes {r['fixed_share'] * 100:.1f} % of faults. **remediate: −{lo:.0f} % to −{hi:.0f} % "
            "against react.**",
            "",
        ]
    )


def fill_docs(page: str, block: str) -> str:
    """`page` with the text between the generated block's markers replaced by `block`."""
    head, sep, rest = page.partition(DOCS_BEGIN + "\n")
    _, sep2, tail = rest.partition(DOCS_END)
    if not sep or not sep2:
        raise ValueError(f"no generated block ({DOCS_BEGIN} … {DOCS_END}) in the page")
    return f"{head}{DOCS_BEGIN}\n{block}{DOCS_END}{tail}"


def plot_field(f: dict[str, Any], path: Path, rate: float = 0.14) -> Path:
    """Bars per precursor share at one failure rate: react, then each step's saving taken off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in f["rows"] if r["failures_per_1000_gpu_days"] == rate]
    names = ("react", "model", "model_fast_detection", "remediate")
    labels = ("react", "+ prediction", "+ fast detection", "+ remediation")
    colors = ("tab:red", "tab:orange", "tab:cyan", "tab:blue")
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(names)
    for i, (name, label, color) in enumerate(zip(names, labels, colors, strict=True)):
        x = np.arange(len(rows)) + (i - (len(names) - 1) / 2) * width
        ax.bar(x, [r["policies"][name] for r in rows], width, label=label, color=color)
    ax.set_xticks(np.arange(len(rows)), [f"{r['precursor_share']:.0%} warn a day ahead" for r in rows])
    ax.set(ylabel=UNIT, title=f"Downtime at {rate:g} failures per 1,000 GPU-days, one step added at a time")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def docs_plot(path: Path) -> Path:
    """docs/downtime.md's plot, from the same table as docs_block."""
    return plot_field(field_downtime(DOCS_SKILLS, DowntimeParams(), RemediationParams()), path)
