"""What prediction is worth: GPU-hours lost per 1,000 GPU-days when failures are met or foreseen.

A what-if over an evaluation (predictor/evaluate.py), under three policies:

- *react*: every failure is unplanned. The job on the GPU loses the work since its last
  checkpoint (GPUs per job x half a checkpoint interval on average) and waits for its
  restart (GPUs per job x restart time); the node is down until repaired (GPUs per node
  x unplanned repair time).
- *rules* and *model*: the same, except for failures an alert foresaw. A failure the
  evaluation counts as caught (alert at least its mode's lead before it), whose first
  alert came before the next maintenance window, is drained in that window: no work
  lost; its job's move off the node (GPUs per job x restart time) and its repair are
  planned. The window's phase is unknown, so the time to it is
  uniform over the interval and a failure with lead L is drained with probability
  min(1, L / interval). Each false alert episode moves its node's capacity to
  interruptible work for the episode: duration x GPUs per node x efficiency loss.

The model of cost, its parameters and their sources: docs/downtime.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.history import FAILURE_MODES
from core.units import parse_duration

HOUR = pd.Timedelta(hours=1)
DAY = pd.Timedelta(days=1)
QUARTER_HOUR = pd.Timedelta(minutes=15)
UNIT = "GPU-hours per 1,000 GPU-days"
UNPLANNED_CAUSES = ("lost_work", "restart", "unplanned_repair")
"""What an unplanned failure costs: work since the last checkpoint, the job's restart, the node's repair."""
PLANNED_CAUSES = ("planned_restart", "planned_repair")
"""What a failure drained in a window costs: moving its job off the node, the node's repair."""
CAUSES = (*UNPLANNED_CAUSES, *PLANNED_CAUSES, "false_demotions")
CAUSE_LABELS = {
    "lost_work": "work since last checkpoint",
    "restart": "job restart",
    "unplanned_repair": "unplanned repair",
    "planned_restart": "job moved at the window",
    "planned_repair": "planned repair",
    "false_demotions": "false demotions",
}
REPAIR_DEFAULT: Mapping[str, pd.Timedelta] = {
    "ecc": pd.Timedelta(hours=3),  # InfiniteHBD trace: DBE over threshold, median time to repair 3 h
    "thermal": pd.Timedelta(hours=3),  # no public figure: DBE's 3 h (an assumption)
    "pcie": pd.Timedelta(days=3),  # InfiniteHBD trace: PCIe link width low, median 3 days
    "other": pd.Timedelta(hours=3),  # no public figure: DBE's 3 h (an assumption)
}
"""Median repair time per failure mode (REFERENCE.md "Field statistics"); medians, so costs are a floor."""


class DowntimeParamError(ValueError):
    """A downtime parameter out of range; `name` is the parameter, `detail` what is wrong with it."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"{name}: {detail}")
        self.name = name
        self.detail = detail


@dataclass(frozen=True)
class DowntimeParams:
    """The cost model's parameters; each default's source is in its docstring (docs/downtime.md)."""

    checkpoint_interval: pd.Timedelta = HOUR
    """Time between a job's checkpoints; a failure loses half of it on average. Policy choice."""
    gpus_per_job: int = 1024
    """GPUs of the job a failure interrupts (all of them lose the work). Policy choice: a mid-size
    pretraining job; Llama 3 ran 16,384 H100 (REFERENCE.md), InfiniteHBD's cluster holds 3,200."""
    gpus_per_node: int = 8
    """GPUs a node takes down while repaired or demoted: 8-GPU servers (InfiniteHBD trace: 400 of them)."""
    restart_time: pd.Timedelta = QUARTER_HOUR
    """Time until an interrupted job runs again (reschedule, load checkpoint). Policy choice."""
    repair_unplanned: Mapping[str, pd.Timedelta] = field(default_factory=lambda: dict(REPAIR_DEFAULT))
    """Node down time after an unplanned failure, per mode: InfiniteHBD medians (DBE 3 h, PCIe 3 days;
    DBE's p90 is 22 days, so the mean is far above the median and these costs are a floor)."""
    repair_planned: Mapping[str, pd.Timedelta] = field(default_factory=lambda: dict(REPAIR_DEFAULT))
    """Node down time for a repair done in a maintenance window, per mode. Policy choice: the same as
    unplanned, so prediction earns no credit for faster repairs, only for planning them."""
    maintenance_window: pd.Timedelta = DAY
    """Interval between maintenance windows (a drained node leaves in the next one). Policy choice:
    daily, as the evaluation's 24 h lead to schedule an RMA (REFERENCE.md "How to evaluate")."""
    interruptible_loss: float = 0.5
    """Share of a demoted node's capacity lost while it runs only interruptible work. Policy choice."""
    field_failure_rate: float = 0.14
    """GPU failures per 1,000 GPU-days in the field, to rescale a simulated fleet's failure costs:
    InfiniteHBD trace 158 GPU faults / (3,200 GPUs x 348 days) = 0.14; Llama 3's run ~0.30."""

    def __post_init__(self) -> None:
        for name in ("gpus_per_job", "gpus_per_node"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise DowntimeParamError(name, f"must be a whole number of GPUs >= 1, got {v!r}")
        for name in ("checkpoint_interval", "restart_time", "maintenance_window"):
            _check_duration(name, getattr(self, name))
        if self.maintenance_window <= pd.Timedelta(0):
            raise DowntimeParamError("maintenance_window", f"must be positive, got {self.maintenance_window}")
        for name in ("repair_unplanned", "repair_planned"):
            times = getattr(self, name)
            missing = [m for m in FAILURE_MODES if m not in times]
            unknown = [m for m in times if m not in FAILURE_MODES]
            if missing or unknown:
                raise DowntimeParamError(
                    name, f"needs a time for each of {', '.join(FAILURE_MODES)} (missing {missing}, unknown {unknown})"
                )
            for mode, t in times.items():
                _check_duration(f"{name}[{mode}]", t)
        if not 0.0 <= self.interruptible_loss <= 1.0:  # NaN fails too
            raise DowntimeParamError("interruptible_loss", f"must be a share in 0..1, got {self.interruptible_loss}")
        if not 0.0 <= self.field_failure_rate < float("inf"):
            raise DowntimeParamError("field_failure_rate", f"must be >= 0, got {self.field_failure_rate}")

    def as_dict(self) -> dict[str, Any]:
        """The parameters as plain numbers (durations in hours), for report.json."""
        return {
            "checkpoint_interval_hours": self.checkpoint_interval / HOUR,
            "gpus_per_job": int(self.gpus_per_job),
            "gpus_per_node": int(self.gpus_per_node),
            "restart_time_hours": self.restart_time / HOUR,
            "repair_unplanned_hours": {m: t / HOUR for m, t in self.repair_unplanned.items()},
            "repair_planned_hours": {m: t / HOUR for m, t in self.repair_planned.items()},
            "maintenance_window_hours": self.maintenance_window / HOUR,
            "interruptible_loss": self.interruptible_loss,
            "field_failure_rate": self.field_failure_rate,
        }


def _check_duration(name: str, t: object) -> None:
    if not isinstance(t, pd.Timedelta) or pd.isna(t):
        raise DowntimeParamError(name, f"must be a duration (pandas Timedelta), got {t!r}")
    if t < pd.Timedelta(0):
        raise DowntimeParamError(name, f"must not be negative, got {t}")


def parse_span(text: str) -> pd.Timedelta:
    """A duration such as "15m", "24h", "3d", or "0"; a negative one is refused as such."""
    t = text.strip()
    if t.startswith("-"):
        raise ValueError(f"must not be negative, got {text!r}")
    return pd.Timedelta(seconds=parse_duration(t, allow_zero=True))


def parse_repair_times(text: str, base: Mapping[str, pd.Timedelta] = REPAIR_DEFAULT) -> dict[str, pd.Timedelta]:
    """Repair times from "6h" (every mode) or "ecc=3h,pcie=3d" (those modes; the rest from base)."""
    if "=" not in text:
        t = parse_span(text)
        return {m: t for m in FAILURE_MODES}
    out = dict(base)
    for part in text.split(","):
        mode, sep, value = part.partition("=")
        mode = mode.strip().lower()
        if not sep or mode not in FAILURE_MODES:
            raise ValueError(f"{part.strip()!r}: use MODE=DURATION with MODE one of {', '.join(FAILURE_MODES)}")
        out[mode] = parse_span(value)
    return out


@dataclass(frozen=True)
class Alerts:
    """What one policy's alerts did over the evaluated span."""

    per_failure: pd.DataFrame
    """One row per judged failure: mode, caught (bool) and first_alert_lead (NaT if none), as caught() gives."""
    false_episodes: pd.DataFrame
    """Alert episodes no failure followed: start, end (the first and last alerting cutoff)."""


@dataclass(frozen=True)
class Span:
    """How much was watched: the denominators of the rates."""

    gpu_days: float
    """GPU-days scored: the exposure of false alert episodes."""
    judged_gpu_days: float
    """GPU-days over which failures were judged (the span after its first window): their exposure."""
    every: pd.Timedelta
    """Scoring interval: an episode's last alert holds until the next cutoff."""


def react(per_failure: pd.DataFrame) -> Alerts:
    """The react policy: the same failures, none of them foreseen, and no alerts."""
    f = per_failure[["mode"]].copy()
    f["caught"] = False
    f["first_alert_lead"] = pd.Series(pd.NaT, index=f.index, dtype="timedelta64[ns]")
    empty = pd.DataFrame({"start": pd.to_datetime([], utc=True), "end": pd.to_datetime([], utc=True)})
    return Alerts(f, empty)


def drained_share(per_failure: pd.DataFrame, window_interval: pd.Timedelta) -> np.ndarray:
    """Per failure, the probability it is drained in a maintenance window before it happens.

    Caught failures only (their first alert at least the mode's lead ahead); the time from
    the first alert to the next window is uniform over the interval, so it comes before the
    failure with probability min(1, lead / interval).
    """
    lead = pd.to_timedelta(per_failure["first_alert_lead"]) / window_interval
    caught = per_failure["caught"].eq(True).to_numpy(dtype=bool)  # NaN (unknown) is not caught
    return np.where(caught, np.clip(lead.fillna(0.0).to_numpy(dtype=float), 0.0, 1.0), 0.0)


def failure_costs(per_failure: pd.DataFrame, params: DowntimeParams) -> pd.DataFrame:
    """Per failure: mode, drained share and expected GPU-hours by cause (lost work, restart, repairs)."""
    mode = per_failure["mode"].astype(str)
    unknown = sorted(set(mode) - set(FAILURE_MODES))
    if unknown:
        raise ValueError(f"failure mode(s) {', '.join(unknown)} have no repair time; known: {', '.join(FAILURE_MODES)}")
    p = drained_share(per_failure, params.maintenance_window)
    job = params.gpus_per_job
    node = params.gpus_per_node
    hours_u = mode.map({m: t / HOUR for m, t in params.repair_unplanned.items()}).to_numpy(dtype=float)
    hours_p = mode.map({m: t / HOUR for m, t in params.repair_planned.items()}).to_numpy(dtype=float)
    return pd.DataFrame(
        {
            "mode": mode.to_numpy(),
            "drained": p,
            "lost_work": (1 - p) * job * (params.checkpoint_interval / HOUR) / 2,
            "restart": (1 - p) * job * (params.restart_time / HOUR),
            "unplanned_repair": (1 - p) * node * hours_u,
            "planned_restart": p * job * (params.restart_time / HOUR),
            "planned_repair": p * node * hours_p,
        }
    )


def false_demotion_hours(false_episodes: pd.DataFrame, every: pd.Timedelta, params: DowntimeParams) -> pd.Series:
    """Per false episode: GPU-hours lost to interruptible work (duration x GPUs per node x loss)."""
    duration = (false_episodes["end"] - false_episodes["start"] + every) / HOUR
    return duration.astype(float) * params.gpus_per_node * params.interruptible_loss


def per_1000_gpu_days(total: float, gpu_days: float) -> float:
    """A count or a sum of hours per 1,000 GPU-days (NaN over none)."""
    return total / gpu_days * 1000 if gpu_days > 0 else float("nan")


def _policy(alerts: Alerts, span: Span, params: DowntimeParams) -> dict[str, Any]:
    """One policy's GPU-hours per 1,000 GPU-days by cause, unplanned per mode, and its counts."""
    costs = failure_costs(alerts.per_failure, params)
    demotions = false_demotion_hours(alerts.false_episodes, span.every, params)
    out: dict[str, Any] = {c: per_1000_gpu_days(float(costs[c].sum()), span.judged_gpu_days) for c in CAUSES[:-1]}
    out["false_demotions"] = per_1000_gpu_days(float(demotions.sum()), span.gpu_days)
    out["unplanned"] = sum(out[c] for c in UNPLANNED_CAUSES)
    out["planned"] = sum(out[c] for c in PLANNED_CAUSES)
    out["total"] = out["unplanned"] + out["planned"] + out["false_demotions"]
    unplanned = costs[list(UNPLANNED_CAUSES)].sum(axis=1)
    out["unplanned_by_mode"] = {
        m: per_1000_gpu_days(float(unplanned[costs["mode"] == m].sum()), span.judged_gpu_days) for m in FAILURE_MODES
    }
    out["drained"] = float(costs["drained"].sum())
    out["false_episodes"] = len(alerts.false_episodes)
    ep = alerts.false_episodes
    out["false_episode_days"] = float(((ep["end"] - ep["start"] + span.every) / DAY).sum()) if len(ep) else 0.0
    return out


def _reduction(base: float, other: float) -> float:
    """Percent less than base; NaN when base is zero or unknown (nothing to reduce)."""
    return (1 - other / base) * 100 if base > 0 else float("nan")


def downtime_report(
    policies: Mapping[str, Alerts], span: Span, params: DowntimeParams, baseline: str = "react"
) -> dict[str, Any]:
    """GPU-hours lost per 1,000 GPU-days per policy and cause, and each policy's reduction against baseline."""
    if baseline not in policies:
        raise ValueError(f"the baseline policy {baseline!r} is not among {', '.join(policies)}")
    if not span.gpu_days > 0 or span.judged_gpu_days < 0:
        raise ValueError(
            f"no GPU-days to measure downtime over (scored {span.gpu_days}, judged {span.judged_gpu_days})"
        )
    counts = {len(a.per_failure) for a in policies.values()}
    if len(counts) != 1:
        raise ValueError(f"every policy must judge the same failures; got counts {sorted(counts)}")
    n = counts.pop()
    per = {name: _policy(a, span, params) for name, a in policies.items()}
    base = per[baseline]
    reductions = {
        name: {"all": _reduction(base["unplanned"], p["unplanned"])}
        | {m: _reduction(base["unplanned_by_mode"][m], p["unplanned_by_mode"][m]) for m in FAILURE_MODES}
        for name, p in per.items()
        if name != baseline
    }
    rate = per_1000_gpu_days(n, span.judged_gpu_days)
    # Failure costs scale with the failure rate; false episodes come from healthy GPUs and do not.
    scale = params.field_failure_rate / rate if rate > 0 else float("nan")
    field_view = {}
    for name, p in per.items():
        v = {c: p[c] * scale for c in CAUSES[:-1]} | {"false_demotions": p["false_demotions"]}
        v["unplanned"] = sum(v[c] for c in UNPLANNED_CAUSES)
        v["planned"] = sum(v[c] for c in PLANNED_CAUSES)
        v["total"] = v["unplanned"] + v["planned"] + v["false_demotions"]
        field_view[name] = v
    return {
        "unit": UNIT,
        "baseline": baseline,
        "params": params.as_dict(),
        "gpu_days": span.gpu_days,
        "judged_gpu_days": span.judged_gpu_days,
        "failures": n,
        "failures_per_1000_gpu_days": rate,
        "policies": per,
        "unplanned_reduction_pct": reductions,
        "total_reduction_pct": {
            name: _reduction(base["total"], p["total"]) for name, p in per.items() if name != baseline
        },
        "at_field_rate": {
            "failures_per_1000_gpu_days": params.field_failure_rate,
            "scale": scale,
            "policies": field_view,
            "total_reduction_pct": {
                name: _reduction(field_view[baseline]["total"], v["total"])
                for name, v in field_view.items()
                if name != baseline
            },
        },
    }


def _num(v: float) -> str:
    return "n/a" if v != v else f"{v:,.1f}"


def _change(reduction_pct: float) -> str:
    """A reduction as a signed change: 25 (% less) is "−25 %", -40 is "+40 %"."""
    return "n/a" if reduction_pct != reduction_pct else f"{0.0 - reduction_pct:+,.0f} %".replace("-", "−")


def _row(label: str, cells: list[str]) -> str:
    return f"| {label} | " + " | ".join(cells) + " |"


def _mode_cell(p: dict[str, Any], red: dict[str, float] | None, mode: str) -> str:
    cell = _num(p["unplanned_by_mode"][mode])
    return cell if red is None or red[mode] != red[mode] else f"{cell} ({_change(red[mode])})"


def downtime_markdown(d: dict[str, Any], plot: str | None = "downtime.png") -> str:
    """The report's "What it is worth" section: costs by cause per policy, reductions, the field view."""
    names = list(d["policies"])
    per, red, field_view = d["policies"], d["unplanned_reduction_pct"], d["at_field_rate"]
    cut = d["total_reduction_pct"]
    prm = d["params"]
    head = [_row("", names), "|---|" + "---|" * len(names)]
    lines = [
        "",
        "## What it is worth: downtime",
        "",
        f"{d['unit']}, computed from this evaluation's alerts (docs/downtime.md). {d['failures']} failures judged "
        f"({_num(d['failures_per_1000_gpu_days'])} per 1,000 GPU-days); a job of {prm['gpus_per_job']} GPUs "
        f"checkpointing every {prm['checkpoint_interval_hours']:g} h, restart {prm['restart_time_hours']:g} h, "
        f"{prm['gpus_per_node']} GPUs per node, a maintenance window every {prm['maintenance_window_hours']:g} h, "
        f"interruptible work loses {prm['interruptible_loss']:.0%}. *react*: every failure unplanned; "
        "*rules*: drain/RMA rules alert; *model*: model + drain/RMA rules alert.",
        "",
        *head,
    ]
    labels = {**CAUSE_LABELS, "unplanned": "**unplanned**", "planned": "**planned**", "total": "**total**"}
    labels["false_demotions"] = "false demotions (interruptible work)"
    for key in (*UNPLANNED_CAUSES, "unplanned", *PLANNED_CAUSES, "planned", "false_demotions", "total"):
        lines.append(_row(labels[key], [_num(per[n][key]) for n in names]))
    lines += [
        _row("failures drained in a window (expected)", [f"{per[n]['drained']:.1f} of {d['failures']}" for n in names]),
        _row(
            "false alert episodes (days)",
            [f"{per[n]['false_episodes']} ({per[n]['false_episode_days']:.1f})" for n in names],
        ),
        _row("**unplanned, change against react**", [_change(red[n]["all"]) if n in red else "—" for n in names]),
        _row("total, change against react", [_change(cut[n]) if n in cut else "—" for n in names]),
        "",
        "Unplanned downtime per failure mode (change against react):",
        "",
        *head,
        *(_row(m, [_mode_cell(per[n], red.get(n), m) for n in names]) for m in FAILURE_MODES),
        "",
        f"At the field failure rate ({field_view['failures_per_1000_gpu_days']:g} per 1,000 GPU-days, "
        f"REFERENCE.md): failure costs x{field_view['scale']:.3g}, false demotions as measured.",
        "",
        *head,
    ]
    for key in ("unplanned", "planned", "false_demotions", "total"):
        lines.append(_row(labels[key], [_num(field_view["policies"][n][key]) for n in names]))
    cut = field_view["total_reduction_pct"]
    lines += [
        _row("**total, change against react**", [_change(cut[n]) if n in cut else "—" for n in names]),
        "",
        "These changes are computed from this evaluation's alerts, not assumed: the 67 % less unplanned downtime "
        "in the product brief is what its authors measured on their own fleet.",
    ]
    if plot:
        lines += ["", f"![downtime by cause]({plot})"]
    return "\n".join([*lines, ""])


def plot_downtime(d: dict[str, Any], path: Path) -> Path:
    """Bar chart, one bar per policy stacked by cause; as measured and at the field failure rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(d["policies"])
    views = [("this fleet", d["policies"]), ("at field failure rate", d["at_field_rate"]["policies"])]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2))
    colors = dict(zip(CAUSES, ("tab:red", "tab:orange", "tab:brown", "tab:cyan", "tab:blue", "tab:gray"), strict=True))
    for ax, (title, per) in zip(axes, views, strict=True):
        bottom = np.zeros(len(names))
        for c in CAUSES:
            v = np.nan_to_num(np.array([per[n][c] for n in names], dtype=float))
            ax.bar(names, v, 0.6, bottom=bottom, color=colors[c], label=CAUSE_LABELS[c])
            bottom += v
        ax.set(ylabel=UNIT, title=f"react vs predict, {title}")
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(CAUSES), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
