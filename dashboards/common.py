"""Building blocks shared by the dashboards: data source, variables, targets, panels, layout."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from grafanalib.core import (
    Dashboard,
    GridPos,
    Heatmap,
    HeatmapColor,
    Stat,
    Table,
    Target,
    Template,
    Templating,
    Time,
    TimeSeries,
)

from core.catalog import BY_NAME

SCHEMA_VERSION = 39
"""Grafana 10.3+ (older Grafanas migrate newer JSON poorly; newer ones migrate this forward)."""
DS = {"type": "prometheus", "uid": "${datasource}"}
"""Every panel and query reads from the `datasource` variable: import once, pick your Prometheus."""
COLLECTOR_SELECTOR = 'job="gpuhealth"'
"""Scrape job of the collectors; the same as alerts/config.py (a test keeps them equal)."""
TAGS = ["gpuhealth", "gpu"]


def m(short: str) -> str:
    """The /metrics name of a catalogue field (a typo is a KeyError at import)."""
    return BY_NAME[short].metric_name


def datasource_var() -> Template:
    """The Prometheus data source picker."""
    return Template(name="datasource", label="Data source", query="prometheus", type="datasource", default="")


def query_var(name: str, metric_selector: str, label: str, *, multi: bool = False, hidden: bool = False) -> Template:
    """A variable listing the values of `label` on `metric_selector` (label_values)."""
    return Template(
        name=name,
        label=name,
        query=f"label_values({metric_selector}, {label})",
        dataSource=DS,
        type="query",
        refresh=2,  # on time-range change: GPUs come and go
        multi=multi,
        includeAll=multi,
        allValue=".*" if multi else None,
        hide=2 if hidden else 0,
        sort=3,  # numerical ascending: GPU 2 before GPU 10
    )


def by(label: str) -> str:
    """A legend that names each series by the value of its `label` (`{{label}}`)."""
    return f"{{{{{label}}}}}"


def t(expr: str, legend: str = "", *, instant: bool = False, table: bool = False, ref: str = "A") -> Target:
    """A PromQL query."""
    return Target(
        expr=expr,
        legendFormat=legend,
        refId=ref,
        datasource=DS,
        instant=instant,
        format="table" if table else "time_series",
        intervalFactor=1,
    )


def steps(*pairs: tuple[str, float | None]) -> list[dict[str, Any]]:
    """Threshold steps: ("green", None) first, then (colour, from value)."""
    return [{"color": col, "value": v} for col, v in pairs]


GREEN = steps(("green", None))


@dataclass
class P:
    """A panel and its size; `layout` places panels left to right, wrapping at 24 columns."""

    panel: Any
    w: int = 12
    h: int = 8


def timeseries(
    title: str,
    description: str,
    targets: Sequence[Target],
    *,
    unit: str = "short",
    thresholds: list[dict[str, Any]] | None = None,
    bars: bool = False,
    stacked: bool = False,
    min0: bool = False,
) -> TimeSeries:
    """A time series panel; thresholds are drawn as dashed lines."""
    return TimeSeries(
        title=title,
        description=description,
        dataSource=DS,
        targets=_refs(targets),
        unit=unit,
        thresholds=thresholds or GREEN,
        thresholdsStyleMode="dashed" if thresholds else "off",
        drawStyle="bars" if bars else "line",
        fillOpacity=60 if bars else 10,
        stacking={"mode": "normal", "group": "A"} if stacked else {},
        lineInterpolation="stepAfter" if bars else "linear",
        legendDisplayMode="table",
        legendPlacement="right",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        valueMin=0 if min0 else None,
    )


def stat(
    title: str,
    description: str,
    targets: Sequence[Target],
    *,
    unit: str = "none",
    thresholds: list[dict[str, Any]] | None = None,
    text_mode: str = "value_and_name",
    decimals: int | None = None,
) -> Stat:
    """A big-number panel (last value)."""
    return Stat(
        title=title,
        description=description,
        dataSource=DS,
        targets=_refs(targets),
        format=unit,
        thresholds=thresholds or GREEN,
        reduceCalc="lastNotNull",
        textMode=text_mode,
        colorMode="background",
        graphMode="none",
        decimals=decimals,
        noValue="0",
    )


def table(
    title: str,
    description: str,
    targets: Sequence[Target],
    *,
    hide: Sequence[str] = (),
    rename: dict[str, str] | None = None,
    sort_by: str | None = None,
) -> Table:
    """A table of instant queries, merged on their common labels."""
    exclude = {k: True for k in ("Time", "__name__", "job", "instance", "device", "pci_bus_id", *hide)}
    transformations: list[dict[str, Any]] = [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": exclude, "renameByName": rename or {}}},
    ]
    if sort_by:
        transformations.append({"id": "sortBy", "options": {"sort": [{"field": sort_by, "desc": True}]}})
    return Table(
        title=title,
        description=description,
        dataSource=DS,
        targets=_refs(targets),
        transformations=transformations,
        filterable=True,
    )


def heatmap(title: str, description: str, targets: Sequence[Target]) -> Heatmap:
    """A heatmap whose rows are the series (legend) and colour the value: no bucketing."""
    return Heatmap(
        title=title,
        description=description,
        dataSource=DS,
        targets=_refs(targets),
        dataFormat="tsbuckets",
        hideZeroBuckets=False,
        color=HeatmapColor(mode="spectrum", colorScheme="interpolateRdYlGn", exponent=0.5, min=0, max=1),
        legend={"show": True},
        yBucketBound="middle",
        extraJson={
            "options": {
                "calculate": False,
                "color": {"mode": "scheme", "scheme": "RdYlGn", "reverse": True, "min": 0, "max": 1, "steps": 64},
                "yAxis": {"axisPlacement": "left"},
                "cellGap": 1,
                "legend": {"show": True},
                "tooltip": {"show": True, "yHistogram": False},
            }
        },
    )


def _refs(targets: Sequence[Target]) -> list[Target]:
    """Give targets refIds A, B, C, ... in order."""
    out = []
    for i, tg in enumerate(targets):
        tg.refId = chr(ord("A") + i)
        out.append(tg)
    return out


def layout(items: Sequence[P]) -> list[Any]:
    """Set each panel's gridPos, left to right, a new row when 24 columns are full."""
    x = y = row_h = 0
    panels = []
    for it in items:
        if x + it.w > 24:
            x, y, row_h = 0, y + row_h, 0
        it.panel.gridPos = GridPos(h=it.h, w=it.w, x=x, y=y)
        x += it.w
        row_h = max(row_h, it.h)
        panels.append(it.panel)
    return panels


def dashboard(uid: str, title: str, description: str, variables: Sequence[Template], items: Sequence[P]) -> Dashboard:
    """A dashboard with our defaults: UTC, last 24 h, refresh every minute, the datasource variable first."""
    return Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=TAGS,
        timezone="utc",
        time=Time("now-24h", "now"),
        refresh="1m",
        schemaVersion=SCHEMA_VERSION,
        templating=Templating(list=[datasource_var(), *variables]),
        panels=layout(items),
        editable=True,
        graphTooltip=1,
    ).auto_panel_ids()
