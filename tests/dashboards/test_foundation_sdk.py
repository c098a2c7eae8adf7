"""Generated dashboards load into Grafana's Foundation SDK models and carry no `null` anywhere.

The SDK (`grafana-foundation-sdk`) is the typed schema Grafana publishes for its dashboard JSON;
its decoders reject what Grafana's own schema rejects, such as `"color": null` in a field config.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard, RowPanel

from dashboards import build

REPO_ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((REPO_ROOT / build.GENERATED_DIR).glob("*.json"))

register_default_plugins()  # panel options and Prometheus queries decode into their own models


def _nulls(value: Any, path: str = "$") -> Iterator[str]:
    """The JSON path of every `null` inside `value`."""
    if value is None:
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _nulls(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nulls(v, f"{path}[{i}]")


def _panel_queries(model: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(type, title, query expressions) of every panel, rows' nested panels included."""
    return [(p["type"], p["title"], [t.get("expr", "") for t in p.get("targets", [])]) for p in build.panels(model)]


def test_every_dashboard_is_checked() -> None:
    assert [f.stem for f in FILES] == sorted(build.DASHBOARDS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_no_null_anywhere(path: Path) -> None:
    assert list(_nulls(json.loads(path.read_text()))) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_loads_into_the_sdk_models(path: Path) -> None:
    model = json.loads(path.read_text())
    dash = Dashboard.from_json(model)  # raises on a value its schema does not allow
    # What the SDK read back is what we wrote: every panel, in order, with its queries.
    again = json.loads(json.dumps(dash, cls=JSONEncoder))
    assert _panel_queries(again) == _panel_queries(model)
    assert again["uid"] == model["uid"] and again["schemaVersion"] == model["schemaVersion"]
    assert [v["name"] for v in again["templating"]["list"]] == [v["name"] for v in model["templating"]["list"]]
    assert all(isinstance(p, RowPanel) or p.field_config is not None for p in dash.panels or [])
