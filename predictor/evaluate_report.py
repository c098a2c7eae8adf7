"""The evaluation's report as files: report.json, report.md and its plots (`predictor.evaluate`
measures, this writes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from predictor.downtime import downtime_markdown, plot_downtime
from predictor.evaluate import FIELD_RATE, HOUR
from predictor.model import MODES
from predictor.remediation_downtime import field_section


def write_report(report: dict[str, Any], out_dir: Path, title: str = "gpuhealth evaluation") -> list[Path]:
    """report.json, report.md and the plots (PR curve, lead times, recall per mode)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    curve: pd.DataFrame = report["_curve"]
    per_failure: dict[str, pd.DataFrame] = report["_per_failure"]
    plain = {k: v for k, v in report.items() if not k.startswith("_")}
    plain["pr_curve"] = curve.to_dict(orient="records")
    paths = [out_dir / "report.json"]
    paths[0].write_text(json.dumps(_no_nan(plain), indent=2, sort_keys=True, default=_json_default) + "\n")

    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(curve["recall"], curve["precision"], marker=".",
            label=f"model, failures that gave warning (AUC {report['pr_auc']:.2f})")  # fmt: skip
    ax.plot(curve["recall_all"], curve["precision"], marker=".", linestyle="--", alpha=0.6,
            label=f"model, all failures (AUC {report['pr_auc_all']:.2f})")  # fmt: skip
    r = report["rules"]
    ax.scatter([r["recall_precursor_modes"]], [r["precision"]], color="red", zorder=3, label="rule baseline")
    ax.set(xlabel="recall per incident (ECC/thermal 24 h lead, PCIe 1 h)", ylabel="precision over alert episodes",
           xlim=(0, 1.02), ylim=(0, 1.02), title="precision-recall")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    fig.tight_layout()
    paths.append(out_dir / "pr_curve.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    leads = per_failure["model"]["first_alert_lead"].dropna() / HOUR
    ax.hist(leads, bins=list(range(0, 24 * 7 + 12, 12)), color="tab:blue")
    ax.set(xlabel="hours from first alert to failure", ylabel="failures", title="lead time of caught failures")
    fig.tight_layout()
    paths.append(out_dir / "lead_times.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    labels = [*MODES, "all (1 h)"]
    vals = {s: [report[s][f"recall_{m}"] for m in MODES] + [report[s]["recall_all_1h"]] for s in ("model", "rules")}
    x = np.arange(len(labels))
    ax.bar(x - 0.2, vals["model"], 0.4, label="model + rules")
    ax.bar(x + 0.2, vals["rules"], 0.4, label="rule baseline")
    ax.set_xticks(x, labels)
    ax.set(ylim=(0, 1.05), ylabel="recall per incident", title="recall per mode")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "recall_by_mode.png")
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    if "downtime" in report:
        paths.append(plot_downtime(report["downtime"], out_dir / "downtime.png"))
    paths.append(out_dir / "report.md")
    body = report_markdown(report, title) + causes_markdown(report) + remap_hold_markdown(report)
    paths[-1].write_text(body + _downtime_markdown(report))
    return paths


def _downtime_markdown(report: dict[str, Any]) -> str:
    """The downtime sections: as evaluated (downtime.png) and at real precursor shares."""
    d = report.get("downtime")
    if d is None:
        return ""
    return downtime_markdown(d, "downtime.png") + (field_section(d["field"]) if "field" in d else "")


def causes_markdown(report: dict[str, Any]) -> str:
    """Model + rules' alert episodes by what raised them (`Judging.by_cause`), where the span had any."""
    causes = report["model"].get("episodes_by_cause")
    if not causes:
        return ""
    lines = [
        "",
        "## What raised the alerts",
        "",
        "Model + rules' judged alert episodes by what raised each at its first hour: NVIDIA's drain for a "
        "pending row remap with no other drain or RMA rule, any other such rule, the probation after one, "
        "the thermal demote on the core's heat alone, or the model's demote by its riskiest head.",
        "",
        "| raised by | episodes | false | false per 1,000 GPU-days |",
        "|---|---|---|---|",
    ]
    for cause, c in causes.items():
        lines.append(f"| {cause} | {c['episodes']} | {c['false']} | {_pct(c['false_per_1000_gpu_days'])} |")
    return "\n".join(lines) + "\n"


def hold_said(level: float) -> str:
    """A hold level in words: "held while the ECC risk is under 0.3", or "NVIDIA's drain at once" (0)."""
    return "NVIDIA's drain at once" if level <= 0 else f"held while the ECC risk is under {level:g}"


def modes_said(by_mode: dict[str, int]) -> str:
    """Counts per failure mode in words ("1 ecc, 2 pcie"); "none" where there are none."""
    return ", ".join(f"{n} {mode}" for mode, n in sorted(by_mode.items())) or "none"


def remap_hold_markdown(report: dict[str, Any]) -> str:
    """The pending remap's drain the other way (`evaluate.remap_hold_whatif`), where the span had one."""
    w = report.get("remap_hold")
    if not w:
        return ""
    m, o = report["model"], w["other"]
    lines = [
        "",
        "## A pending remap's drain, the other way",
        "",
        f"{w['pending_remap_gpus']} GPUs had a pending row remap as their only drain or RMA rule; "
        f"{w['pending_remap_gpus_failed_ecc']} of them failed of ECC within {report['window_days']:g} days after "
        "it. Such a GPU is a watch and a reset at idle (NVIDIA's guide), drained once its ECC risk reaches "
        "GPUHEALTH_REMAP_HOLD_RISK (0.3 by default; 0: drained at once). Where most of them did not fail, "
        "healthy GPUs' weak rows are remapped and a higher level leaves more false alarms out; where most "
        "failed, a remap is wear (docs/decisions/0082). Model + rules:",
        "",
        f"| | as run: {hold_said(w['hold_risk_run'])} | the other way: {hold_said(w['hold_risk_other'])} |",
        "|---|---|---|",
    ]
    for key, label in [
        ("precision", "precision over alert episodes"),
        ("field_precision", f"field precision ({FIELD_RATE} failures / 1,000 GPU-days)"),
        ("false_episodes_per_1000_gpu_days", "false episodes / 1,000 GPU-days"),
        ("recall_ecc_warned", "recall ECC (24 h lead), failures that gave warning"),
        ("recall_thermal_warned", "recall thermal (24 h lead), failures that gave warning"),
        ("recall_pcie_warned", "recall PCIe (1 h lead), failures that gave warning"),
    ]:
        lines.append(f"| {label} | {_pct(m[key])} | {_pct(o[key])} |")
    lines.append(f"| failures caught (precursor modes) | {m['precursor_caught']} | {o['precursor_caught']} |")
    lines.append(f"| false alert episodes | {w['false_episodes_run']} | {w['false_episodes_other']} |")
    for key, label in (("catches_lost", "caught as run, missed"), ("catches_gained", "missed as run, caught")):
        lines.append(f"| failures {label} the other way (at their lead) | | {modes_said(w[key])} |")
    return "\n".join(lines) + "\n"


def _no_nan(o: Any) -> Any:
    """NaN (a measure with nothing to measure) as null: JSON has no NaN."""
    if isinstance(o, dict):
        return {k: _no_nan(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_no_nan(v) for v in o]
    if isinstance(o, float | np.floating) and np.isnan(o):
        return None
    return o


def _json_default(o: object) -> object:
    if isinstance(o, float | np.floating) and np.isnan(o):
        return None
    if isinstance(o, np.generic):
        return o.item()
    return str(o)


def _pct(v: float) -> str:
    return "n/a" if v != v else f"{v:.2f}"


def report_markdown(report: dict[str, Any], title: str) -> str:
    """The report as Markdown: floors, per-mode recall, precision, baseline side by side."""
    m, r = report["model"], report["rules"]
    fails = ", ".join(f"{k} {v}" for k, v in sorted(report["failures"].items()))
    lines = [
        f"# {title}",
        "",
        f"Span {report['span'][0]} .. {report['span'][1]}, scored every {report['every']}; "
        f"{report['gpus']} GPUs, {report['gpu_days']:,.0f} GPU-days; failures judged: {fails}. "
        f"Left out: {report.get('gpu_days_after_failure', 0.0):,.0f} GPU-days of GPUs scored on their last "
        "samples after their failure (no prediction: the outcome is on record).",
        f"An alert is a decision of demote or worse (risk >= {report['thresholds']['demote']}, or a drain/RMA rule); "
        f"caught = alert within {report['window_days']:g} days before the failure and at least the mode's lead "
        "before it (ECC, thermal 24 h; PCIe, other 1 h). Precision is over alert episodes per GPU.",
        "",
        "## Quality floors",
        "",
        "| measure | value | floor | holds |",
        "|---|---|---|---|",
    ]
    for k, v in report["floors"].items():
        val = v["value"] if isinstance(v["value"], str) else _pct(v["value"])
        lines.append(f"| {k} | {val} | {v['floor']} | {'yes' if v['ok'] else 'NO'} |")
    lines += [
        "",
        "## Model and rule baseline",
        "",
        "| | model + rules | rule baseline (NVIDIA/DCGM thresholds) |",
        "|---|---|---|",
    ]
    for key, label in [
        ("recall_ecc_warned", "recall ECC (24 h lead), failures that gave warning"),
        ("recall_thermal_warned", "recall thermal (24 h lead), failures that gave warning"),
        ("recall_pcie_warned", "recall PCIe (1 h lead), failures that gave warning"),
        ("recall_ecc", "recall ECC (24 h lead), all"),
        ("recall_thermal", "recall thermal (24 h lead), all"),
        ("recall_pcie", "recall PCIe (1 h lead), all"),
        ("recall_precursor_modes", "recall, failures with precursors"),
        ("recall_all_1h", "recall, all failures incl. no precursor (1 h)"),
        ("recall_all_24h", "recall, all failures (24 h)"),
        ("precision", "precision over alert episodes"),
        ("field_precision", f"field precision ({FIELD_RATE} predictable failures / 1,000 GPU-days)"),
        ("episodes", "alert episodes"),
        ("false_episodes_per_1000_gpu_days", "false alert episodes per 1,000 GPU-days"),
        ("median_lead_hours", "median lead of caught failures (h)"),
    ]:
        fmt = (lambda v: f"{v:.0f}") if key == "episodes" else _pct
        lines.append(f"| {label} | {fmt(m[key])} | {fmt(r[key])} |")
    lines += [
        f"| false demotions per 1,000 GPU-days | {_pct(m['false_demotions_per_1000_gpu_days'])} | — |",
        "",
        f"PR-AUC (per incident, over risk thresholds, failures that gave warning as the recall floors): "
        f"{_pct(report['pr_auc'])}; over all failures of those modes: {_pct(report['pr_auc_all'])}; "
        f"sample-level average precision: {_pct(report['sample_average_precision'])}.",
        "",
        "![precision-recall](pr_curve.png) ![lead times](lead_times.png) ![recall per mode](recall_by_mode.png)",
        "",
    ]
    return "\n".join(lines)
