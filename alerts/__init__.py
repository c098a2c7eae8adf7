"""Prometheus alert rules generated from the catalogue, with promtool unit tests.

`alerts.rules` lists every rule once (their text lives in `alerts.rulesets`); `alerts.build` renders
the rule file, its promtool tests, docs/alerts.md and the runbooks; `all_expressions()` hands every
PromQL expression to tests.
"""

from __future__ import annotations

from alerts.build import all_expressions

__all__ = ["all_expressions"]
