"""Grafana dashboards generated from the catalogue with grafanalib.

`dashboards.build` renders `dashboards/generated/*.json` and docs/dashboards.md;
`all_expressions()` hands every panel and variable query to tests (`resolve()` fills Grafana's variables).
"""

from __future__ import annotations


def all_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel and variable query, e.g. ("gpuhealth-gpu/Power/A", "DCGM_FI_DEV_POWER_USAGE…")."""
    from dashboards.build import all_expressions as _all

    return _all()


def resolve(expr: str, values: dict[str, str] | None = None) -> str:
    """`expr` with Grafana's variables substituted ($__rate_interval -> 5m, $Hostname -> values or ".*")."""
    from dashboards.build import resolve as _resolve

    return _resolve(expr, values)
