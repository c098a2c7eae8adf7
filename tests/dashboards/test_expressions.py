"""Every PromQL expression in the generated rules and dashboards: parses, and names only metrics we export.

This catches a typo in a metric name before the end-to-end test, which runs each expression
against a live Prometheus.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

import alerts
import dashboards
from alerts.rules import RECORDS
from core import infiniband, kernel_log, nvlink, remediation_metrics
from core.catalog import FIELDS
from tests.integration.conftest import require_tool

COLLECTOR = {
    "gpuhealth_xid_errors_total", "gpuhealth_gpu_lost", "gpuhealth_gpus", "gpuhealth_collector_success",
    "gpuhealth_collector_duration_seconds", "gpuhealth_sample_age_seconds",
}  # fmt: skip
SERVICE = {
    "gpuhealth_risk", "gpuhealth_decision", "gpuhealth_decision_reasons_info", "gpuhealth_failures_recorded_total",
    "gpuhealth_score_last_run_timestamp_seconds", "gpuhealth_store_up", "gpuhealth_buffer_dropped_samples_total",
    "gpuhealth_node_cooling_suspected",
}  # fmt: skip
PROBES = {
    "gpuhealth_probe_value", "gpuhealth_probe_ratio", "gpuhealth_probe_passed", "gpuhealth_probe_duration_seconds",
    "gpuhealth_probe_last_run_timestamp_seconds", "gpuhealth_probe_errors", "gpuhealth_probe_slow",
    "gpuhealth_probe_runs_total",
}  # fmt: skip
PULLER = {  # serve --source prometheus
    "gpuhealth_pull_runs_total", "gpuhealth_pull_failures_total", "gpuhealth_pull_samples_total",
    "gpuhealth_pull_lost_gpus_total", "gpuhealth_pull_watermark_timestamp_seconds",
    "gpuhealth_pull_store_ahead_seconds", "gpuhealth_pull_series_skipped_total",
}  # fmt: skip
ACTUATOR = {  # serve --actuate dry-run|on
    "gpuhealth_actuator_breaker_open", "gpuhealth_actuator_mode", "gpuhealth_actions_total", "gpuhealth_actuator_nodes",
    "gpuhealth_actuator_passes_total", "gpuhealth_actuator_failures_total",
    "gpuhealth_actuator_last_pass_timestamp_seconds",
}  # fmt: skip
PROMETHEUS = {"up", "ALERTS"}
INFINIBAND = {infiniband.metric(s) for s in infiniband.SUFFIXES}  # collector.infiniband
KNOWN = (
    {f.metric_name for f in FIELDS}
    | COLLECTOR
    | INFINIBAND
    | nvlink.METRICS  # collector.nvlink
    | kernel_log.METRICS  # collector.kernel_log
    | SERVICE
    | PROBES
    | PULLER
    | ACTUATOR
    | remediation_metrics.METRICS  # serve's remediation loop (api/metrics.py)
    | PROMETHEUS
    | {r.record for r in RECORDS}
)

_KEYWORDS = {"and", "or", "unless", "bool", "inf", "nan", "offset"}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression reads (a small tokenizer, enough for our expressions)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values, printf formats)
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges
    s = re.sub(r"\boffset\s+\S+", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\b(group_left|group_right)\b", " ", s)
    s = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?\b", " ", s)  # numbers, 1e6
    names = set()
    for mt in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        if s[mt.end() :].lstrip().startswith("(") or mt.group(0).lower() in _KEYWORDS:
            continue  # a function or aggregation, or an operator
        names.add(mt.group(0))
    return names


EXPRESSIONS = alerts.all_expressions() + dashboards.all_expressions()


def test_tokenizer() -> None:
    expr = (
        'sum by (Hostname) (increase(gpuhealth_xid_errors_total{xid=~"48|79"}[5m])) > 1e6\n'
        "or on (UUID) (DCGM_FI_DEV_GPU_TEMPP unless gpu:x:rate5m offset 5m) * on (a) group_left (b) up\n"
        'and time() - topk(20, ALERTS{alertstate="firing"})'
    )
    assert metric_names(expr) == {
        "gpuhealth_xid_errors_total", "DCGM_FI_DEV_GPU_TEMPP", "gpu:x:rate5m", "up", "ALERTS",
    }  # fmt: skip


def test_expressions_are_collected() -> None:
    wheres = [w for w, _ in EXPRESSIONS]
    assert len(wheres) == len(set(wheres))
    assert any(w.startswith("alert:") for w in wheres) and any(w.startswith("gpuhealth-gpu/") for w in wheres)
    assert all(e.strip() for _, e in EXPRESSIONS)


def test_every_metric_name_is_exported() -> None:
    unknown = {(w, n) for w, e in EXPRESSIONS for n in metric_names(e) if n not in KNOWN}
    assert not unknown, f"metric names nobody exports (typos?): {sorted(unknown)}"


def test_every_expression_parses(tmp_path: Path) -> None:
    """promtool parses each expression (dashboards' with Grafana variables resolved) as a recording rule."""
    promtool = require_tool("promtool")
    rules = [{"record": f"expr_{i}", "expr": dashboards.resolve(e)} for i, (_, e) in enumerate(EXPRESSIONS)]
    path = tmp_path / "exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "all", "rules": rules}]}))
    res = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("bad", ["rate(x[5m]", 'x{a="b"} +'])
def test_parse_check_can_fail(tmp_path: Path, bad: str) -> None:
    promtool = require_tool("promtool")
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": [{"record": "r", "expr": bad}]}]}))
    res = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
