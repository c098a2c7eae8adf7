"""Render the rules that alerts/rules.py lists: rule file, promtool tests, docs/alerts.md, runbooks.

`outputs()` maps each generated file (relative to the repository root) to its text; the CLI
writes them or checks that the committed ones are current. Output is stable: same rules, same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alerts import config
from alerts.model import ACTIONS, Alert
from alerts.rules import ALERTS, GROUPS, RECORDS
from core import generated

RULES_PATH = Path("alerts/generated/gpuhealth-rules.yml")
TESTS_PATH = Path("alerts/generated/gpuhealth-rules.test.yml")
DOC_PATH = Path("docs/alerts.md")
RUNBOOK_DIR = Path("docs/runbooks")
RECORDS_GROUP = "gpuhealth.records"
HEADER = "# Generated from alerts/ by `gpuhealth alerts build`; do not edit by hand.\n"


def runbook_url(alert: Alert) -> str:
    """Where the alert's runbook is published."""
    return f"{config.RUNBOOK_BASE_URL}/{alert.name}.md"


def runbook_path(alert: Alert) -> Path:
    """The alert's runbook, relative to the repository root."""
    return RUNBOOK_DIR / f"{alert.name}.md"


def alert_annotations(alert: Alert) -> dict[str, str]:
    """The annotations of an alerting rule (templates unrendered)."""
    return {"summary": alert.summary, "description": alert.description, "runbook_url": runbook_url(alert)}


def rule_groups() -> list[dict[str, Any]]:
    """The rule file's groups, as Prometheus reads them."""
    groups: list[dict[str, Any]] = [
        {"name": RECORDS_GROUP, "rules": [{"record": r.record, "expr": r.expr} for r in RECORDS]}
    ]
    for name in GROUPS:
        rules = []
        for a in ALERTS:
            if a.group != name:
                continue
            rule: dict[str, Any] = {"alert": a.name, "expr": a.expr}
            if a.for_ not in ("0m", "0s", "0"):
                rule["for"] = a.for_
            rule["labels"] = a.labels
            rule["annotations"] = alert_annotations(a)
            rules.append(rule)
        groups.append({"name": name, "rules": rules})
    return groups


def rules_yaml() -> str:
    """alerts/generated/gpuhealth-rules.yml."""
    return HEADER + generated.to_yaml({"groups": rule_groups()})


_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_PRINTF = re.compile(r'^\$value \| printf "(%\.\d+f)"$')


def render_template(text: str, labels: Mapping[str, str], value: float) -> str:
    """Render the subset of Prometheus's template language our annotations use.

    `{{ $labels.NAME }}` and `{{ $value | printf "%.Nf" }}` only: anything else raises, so the
    expected annotations of the promtool tests are computed, not copied from promtool's output.
    """

    def one(match: re.Match[str]) -> str:
        inner = match.group(1)
        if inner.startswith("$labels."):
            return labels.get(inner.removeprefix("$labels."), "")
        fmt = _PRINTF.match(inner)
        if fmt:
            return fmt.group(1) % value
        raise ValueError(f"template {{{{ {inner} }}}} is outside the supported subset")

    return _TEMPLATE.sub(one, text)


def _test(alert: Alert) -> dict[str, Any]:
    case = alert.case
    fired = []
    for lbls in case.labels:
        all_labels = {**lbls, **alert.labels}
        fired.append(
            {
                "exp_labels": dict(sorted(all_labels.items())),
                "exp_annotations": {
                    k: render_template(v, all_labels, case.value) for k, v in alert_annotations(alert).items()
                },
            }
        )
    return {
        "name": alert.name,
        "interval": case.interval,
        "input_series": [{"series": s, "values": v} for s, v in case.series],
        "alert_rule_test": [
            {"eval_time": case.quiet_at, "alertname": alert.name, "exp_alerts": []},
            {"eval_time": case.fire_at, "alertname": alert.name, "exp_alerts": fired},
        ],
    }


def tests_yaml() -> str:
    """alerts/generated/gpuhealth-rules.test.yml: `promtool test rules` input, one test per alert."""
    doc = {
        "rule_files": [RULES_PATH.name],
        "evaluation_interval": "1m",
        "tests": [_test(a) for a in ALERTS],
    }
    return HEADER + generated.to_yaml(doc)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _install_markdown() -> list[str]:
    """docs/alerts.md's opening: where the rules come from, how to install and route them."""
    return [
        "# Alerts",
        "",
        "Generated from `alerts/` by `gpuhealth alerts build`; do not edit by hand. Thresholds and their",
        "sources live in `alerts/config.py`; the rules in `alerts/rulesets/` (one module per thing they",
        "watch, listed in order by `alerts/rules.py`).",
        "",
        "## Install",
        "",
        "1. Copy `alerts/generated/gpuhealth-rules.yml` next to your Prometheus configuration and list it",
        "   under `rule_files:` (e.g. `rule_files: [gpuhealth-rules.yml]`), then reload Prometheus",
        "   (`curl -X POST http://prometheus:9090/-/reload` or SIGHUP). `promtool check rules` validates it.",
        "2. Scrape the per-node collectors (`gpuhealth collect`, port 9400) as job "
        f"`{_unquote(config.COLLECTOR_SELECTOR)}`",
        f"   and the service (`gpuhealth serve`) as job `{_unquote(config.SERVICE_SELECTOR)}`; other job names",
        "   need the selectors in `alerts/config.py` changed and the rules rebuilt.",
        "3. Route the alerts with `alerts/alertmanager.example.yml`: by the `action` label (watch, demote,",
        "   drain, rma) to gpuhealth's `/v1/alertmanager` webhook, grouped by host, with a drain or RMA alert",
        "   silencing the lesser alerts of the same GPU. Check your copy with `amtool check-config`.",
        "",
        "Every alert carries `severity` (info, warning, critical), `action` (what to do with the GPU:",
        "watch, demote, drain, rma), a summary, a description with the values, and a `runbook_url`",
        "to its page in [runbooks/](runbooks/). The GPU's labels (`Hostname`, `gpu`, `UUID`, `modelName`)",
        "come from the series. `alerts/generated/gpuhealth-rules.test.yml` is the promtool unit test",
        "(`promtool test rules`): for every alert a moment it must not fire yet and one it fires.",
        "",
    ]


def _alerts_table() -> list[str]:
    """One row per alerting rule, then the alerts grouped by action (mildest first)."""
    lines = [
        "## Alerting rules",
        "",
        "| alert | severity | action | expression | for | summary | runbook |",
        "|---|---|---|---|---|---|---|",
    ]
    for a in ALERTS:
        lines.append(
            f"| `{a.name}` | {a.severity} | {a.action} | `{_cell(a.expr)}` | {a.for_} | {_cell(a.summary)} | "
            f"[{a.name}](runbooks/{a.name}.md) |"
        )
    lines += ["", "## By action", ""]
    order = {a: i for i, a in enumerate(ACTIONS)}
    for action in sorted({a.action for a in ALERTS}, key=order.__getitem__):
        names = ", ".join(f"`{a.name}`" for a in ALERTS if a.action == action)
        lines.append(f"- **{action}**: {names}")
    return lines


def _records_table() -> list[str]:
    """One row per recording rule."""
    lines = [
        "",
        "## Recording rules",
        "",
        "Shared by the alerts and the dashboards (names follow `level:metric:operation`; level `gpu`",
        "keeps every per-GPU label).",
        "",
        "| record | expression | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{r.record}` | `{_cell(r.expr)}` | {r.help} |" for r in RECORDS]
    return lines


def alerts_markdown() -> str:
    """docs/alerts.md: every alert and recording rule in one table each."""
    return "\n".join([*_install_markdown(), *_alerts_table(), *_records_table(), ""])


def _unquote(selector: str) -> str:
    return selector.split("=", 1)[1].strip('"~')


PLACEHOLDERS = (
    "`<Hostname>`, `<gpu>`, `<UUID>` and `<pci_bus_id>` stand for the alert's labels of the same name; "
    'gpuhealth\'s API listens on `127.0.0.1:8080` by default (add `-H "Authorization: Bearer $GPUHEALTH_TOKEN"` '
    "when reads need the token)."
)

ACTION_STEPS: dict[str, tuple[str, ...]] = {
    "watch": (
        "Nothing changes for the workloads. gpuhealth records the alert (`curl -s "
        "http://127.0.0.1:8080/v1/gpus/<UUID>`); look at the GPU again in the next maintenance window. "
        "A worse signal raises a demote, drain or rma alert, which silences this one.",
    ),
    "demote": (
        "Keep only interruptible, checkpointed work on the node. Kubernetes: "
        "`kubectl label node <Hostname> gpuhealth.io/decision=demote --overwrite` and "
        "`kubectl taint node <Hostname> gpuhealth.io/demoted=true:NoSchedule` (interruptible training "
        "tolerates the taint; running pods stay).",
        "Slurm: take the node out of the latency-critical partition and keep it in the preemptible one, "
        "e.g. `scontrol update PartitionName=<inference> Nodes=<the partition's nodes without <Hostname>>`.",
        "Undo after repair: `kubectl taint node <Hostname> gpuhealth.io/demoted-` and the label with `-`.",
    ),
    "drain": (
        "Kubernetes: `kubectl cordon <Hostname>` then "
        "`kubectl drain <Hostname> --ignore-daemonsets --delete-emptydir-data --timeout=30m`.",
        'Slurm: `scontrol update NodeName=<Hostname> State=DRAIN Reason="gpuhealth <alert> GPU <gpu>"` '
        "(running jobs finish, no new ones start).",
        "After the repair and a passing `dcgmi diag -r 3 -i <gpu>`: `kubectl uncordon <Hostname>` or "
        "`scontrol update NodeName=<Hostname> State=RESUME`.",
    ),
    "rma": (
        "Drain the node as above (Kubernetes `kubectl cordon <Hostname> && kubectl drain <Hostname> "
        "--ignore-daemonsets --delete-emptydir-data`; Slurm `scontrol update NodeName=<Hostname> "
        'State=DRAIN Reason="gpuhealth RMA GPU <gpu>"`).',
        "Collect what NVIDIA's RMA process asks for: `nvidia-smi --query-gpu=serial,uuid,pci.bus_id "
        "--format=csv -i <gpu>`, `sudo nvidia-bug-report.sh` and the output of `dcgmi diag -r 3 -i <gpu>`.",
        "Replace the GPU (or the board); the new GPU gets a new UUID and starts with a clean history.",
    ),
}


def _about_a_gpu(alert: Alert) -> bool:
    """Whether the alert names a GPU (a UUID label), not a collector, a node or the service."""
    return any("UUID" in labels for labels in alert.case.labels)


def _check_lines(alert: Alert) -> list[str]:
    """The alert's own checks, then (for a GPU) gpuhealth's view and the field diagnostic unless already named."""
    lines = list(alert.check)
    if not _about_a_gpu(alert):
        return lines
    text = " ".join(lines)
    if "/v1/gpus/<UUID>" not in text:
        lines.append(
            "Everything gpuhealth knows about the GPU (risk per mode, decision, reasons, recent alerts): "
            "`curl -s http://127.0.0.1:8080/v1/gpus/<UUID>`."
        )
    if "dcgmi diag" not in text:
        lines.append("A full field diagnostic when the GPU is free: `dcgmi diag -r 3 -i <gpu>`.")
    return lines


def _action_steps(alert: Alert) -> tuple[str, ...]:
    """What the action means for the fleet; "watch" is about a GPU, so a service alert has its own steps only."""
    if alert.action == "watch" and not _about_a_gpu(alert):
        return ()
    return ACTION_STEPS[alert.action]


def runbook_markdown(alert: Alert) -> str:
    """docs/runbooks/<alert>.md: what it means, what to check, what to do."""
    lines = [
        f"# {alert.name}",
        "",
        "<!-- Generated from alerts/rulesets/ by `gpuhealth alerts build`; edit the rule's text there. -->",
        "",
        f"**Severity:** {alert.severity} · **Action:** `{alert.action}` · **Group:** `{alert.group}`",
        "",
        f"> {alert.summary}",
        "",
        "## What it means",
        "",
        alert.meaning,
        "",
        "```promql",
        alert.expr,
        "```",
        "",
        f"Fires after the condition holds for {alert.for_}."
        if alert.for_ not in ("0m", "0s", "0")
        else "Fires at the first evaluation where the condition holds.",
        "",
        "## What to check",
        "",
        *(f"- {line}" for line in _check_lines(alert)),
        "",
        "## What to do",
        "",
        *(f"- {line}" for line in alert.act),
        *(f"- {line.replace('<alert>', alert.name)}" for line in _action_steps(alert)),
        "",
        PLACEHOLDERS,
        "",
    ]
    return "\n".join(lines)


def outputs() -> dict[Path, str]:
    """Every generated file (relative to the repository root) and its text."""
    out = {RULES_PATH: rules_yaml(), TESTS_PATH: tests_yaml(), DOC_PATH: alerts_markdown()}
    for a in ALERTS:
        out[runbook_path(a)] = runbook_markdown(a)
    return out


def write(root: Path) -> list[Path]:
    """Write every generated file under `root`; return the paths written."""
    return generated.write(outputs(), root)


def stale(root: Path) -> list[Path]:
    """Generated files under `root` that are missing or differ from what the rules produce."""
    return generated.stale(outputs(), root)


def all_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) for every rule: `record:<name>` and `alert:<name>`."""
    return [(f"record:{r.record}", r.expr) for r in RECORDS] + [(f"alert:{a.name}", a.expr) for a in ALERTS]
