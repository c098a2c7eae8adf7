"""Prometheus alert rules generated from the catalogue, with promtool unit tests.

`alerts.rules` lists every rule once; `alerts.build` renders the rule file, its promtool tests,
docs/alerts.md and the runbooks; `all_expressions()` hands every PromQL expression to tests.
"""

from __future__ import annotations


def all_expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every recording and alerting rule, e.g. ("alert:GpuLost", "gpuhealth_gpu_lost == 1")."""
    from alerts.build import all_expressions as _all

    return _all()
