"""Grafana dashboards generated from the catalogue with grafanalib.

`dashboards.build` renders `dashboards/generated/*.json` and docs/dashboards.md;
`all_expressions()` hands every panel and variable query to tests (`resolve()` fills Grafana's variables).
"""

from __future__ import annotations

from dashboards.build import all_expressions, resolve

__all__ = ["all_expressions", "resolve"]
