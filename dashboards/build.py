"""Render the dashboards to stable JSON, describe them in docs/dashboards.md, list their queries."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from grafanalib._gen import DashboardEncoder
from grafanalib.core import Dashboard

from core import generated
from dashboards import fleet, gpu, node

GENERATED_DIR = Path("dashboards/generated")
DOC_PATH = Path("docs/dashboards.md")
DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "gpuhealth-fleet": fleet.build,
    "gpuhealth-gpu": gpu.build,
    "gpuhealth-node": node.build,
}
"""File stem (and Grafana uid) -> builder."""


def _without_nulls(value: Any) -> Any:
    """`value` with every `null` member and item dropped, at any depth.

    grafanalib writes each unset attribute as `null` (`"color": null`, `"decimals": null`, ...);
    Grafana's schema (and its Foundation SDK's models) read an absent key as "unset" but reject some
    nulls, such as a field config's `color`. A threshold's base step needs no `value` either:
    Grafana's own exports omit it (the base step is -Infinity whatever it says).
    """
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value if v is not None]
    return value


def to_json(dash: Dashboard) -> str:
    """Stable JSON without nulls: sorted keys, 2-space indent, trailing newline."""
    data = _without_nulls(json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder)))
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def rendered() -> dict[str, dict[str, Any]]:
    """Each dashboard's JSON model, by file stem."""
    return {name: json.loads(to_json(build())) for name, build in DASHBOARDS.items()}


def panels(model: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard model, rows' nested panels included."""
    for p in model.get("panels", []):
        yield p
        yield from p.get("panels", [])


_LABEL_VALUES = re.compile(r"^label_values\((?P<sel>.+),\s*(?P<label>\w+)\)$", re.S)


def all_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel query and variable query of every dashboard.

    `where` is "<dashboard>/<panel title>/<refId>" or "<dashboard>/var:<name>" (a variable's
    `label_values(selector, label)` is given as its selector). Expressions keep Grafana's
    variables; `resolve()` substitutes them.
    """
    out: list[tuple[str, str]] = []
    for name, model in rendered().items():
        for var in model["templating"]["list"]:
            q = _LABEL_VALUES.match(str(var.get("query", "")))
            if var.get("type") == "query" and q:
                out.append((f"{name}/var:{var['name']}", q.group("sel")))
        for p in panels(model):
            for tg in p.get("targets", []):
                out.append((f"{name}/{p['title']}/{tg['refId']}", tg["expr"]))
    return out


GRAFANA_INTERVALS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1d"}


def resolve(expr: str, values: Mapping[str, str] | None = None) -> str:
    """Substitute Grafana's variables so Prometheus can run `expr`.

    `values` maps a variable name (without `$`) to its value; any other `$name` becomes ".*"
    (all selectors on variables are regex matches or exact matches the caller fills in).
    """
    values = values or {}
    for k, v in GRAFANA_INTERVALS.items():
        expr = expr.replace(k, v)
    return re.sub(r"\$\{?(\w+)\}?", lambda mt: values.get(mt.group(1), ".*"), expr)


def outputs() -> dict[Path, str]:
    """Every generated file (relative to the repository root) and its text."""
    out = {GENERATED_DIR / f"{name}.json": to_json(build()) for name, build in DASHBOARDS.items()}
    out[DOC_PATH] = dashboards_markdown()
    return out


def write(root: Path) -> list[Path]:
    """Write every generated file under `root`; return the paths written."""
    return generated.write(outputs(), root)


def stale(root: Path) -> list[Path]:
    """Generated files under `root` that are missing or differ from what the sources produce."""
    return generated.stale(outputs(), root)


def dashboards_markdown() -> str:
    """docs/dashboards.md: how to install, then every panel of every dashboard in words."""
    lines = [
        "# Dashboards",
        "",
        "Generated from `dashboards/` (grafanalib) by `gpuhealth dashboards build`; do not edit by hand.",
        "The panel texts below are the panels' own descriptions (the ⓘ in Grafana).",
        "",
        "## Install",
        "",
        "1. Install the alert rules first (see [alerts.md](alerts.md)): the dashboards use their recording",
        "   rules (`gpu:*`) and the `ALERTS` series.",
        "2. In Grafana, *Dashboards → New → Import*, upload each file of `dashboards/generated/`",
        "   (`gpuhealth-fleet.json`, `gpuhealth-gpu.json`, `gpuhealth-node.json`) and pick your Prometheus",
        "   for the `datasource` variable. Or provision them: point a file provider",
        "   (`/etc/grafana/provisioning/dashboards/gpuhealth.yaml`, `options.path`) at a copy of the folder.",
        "3. The dashboards need Grafana 10.3 or later (schemaVersion 39) and expect the collectors'",
        "   `Hostname` label (dcgm-exporter's default; `gpuhealth collect --hostname-label Hostname`).",
        "",
        "Dashboards link by uid: `gpuhealth-fleet`, `gpuhealth-gpu`, `gpuhealth-node`; open a GPU with",
        "`/d/gpuhealth-gpu?var-Hostname=<host>&var-gpu=<index>&var-UUID=<uuid>`.",
        "",
    ]
    for name, model in rendered().items():
        lines += [f"## {model['title']} (`{name}.json`)", "", model["description"], ""]
        variables = [v["name"] for v in model["templating"]["list"]]
        lines += [f"Variables: {', '.join(f'`{v}`' for v in variables)}.", ""]
        lines += ["| panel | what it shows |", "|---|---|"]
        for p in panels(model):
            lines.append(f"| {p['title']} | {' '.join(str(p.get('description') or '').split())} |")
        lines.append("")
    return "\n".join(lines)
