"""The remediation alerts: their promtool cases catch a rule that fires too early or on too few escalations."""

from __future__ import annotations

from pathlib import Path

import yaml

from alerts import build, config
from alerts.rules import ALERTS
from core import remediation_metrics as rm
from tests.alerts.conftest import REPO_ROOT, promtool_fails_on

RULES = REPO_ROOT / build.RULES_PATH
TESTS = REPO_ROOT / build.TESTS_PATH
BY_NAME = {a.name: a for a in ALERTS}


def _rule(name: str) -> dict[str, object]:
    doc = yaml.safe_load(RULES.read_text())
    return next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name)


def test_stuck_reads_the_stuck_gauge_of_the_service_and_waits() -> None:
    rule = _rule("GpuRemediationStuck")
    assert f"{rm.STUCK}{{{config.SERVICE_SELECTOR}}}" in str(rule["expr"])
    assert rule["for"] == config.REMEDIATION_STUCK_FOR
    runbook = (REPO_ROOT / "docs" / "runbooks" / "GpuRemediationStuck.md").read_text()
    assert "/v1/remediations?open=true" in runbook
    for stage in rm.STAGES:
        assert f"Stage `{stage}`" in runbook, stage


def test_a_stuck_alert_without_its_for_is_caught(promtool: str, tmp_path: Path) -> None:
    stuck = f"{rm.STUCK}{{{config.SERVICE_SELECTOR}}}) > 0\n    for: "
    out = promtool_fails_on(promtool, tmp_path, stuck + config.REMEDIATION_STUCK_FOR, stuck + "1m")
    assert "alertname: GpuRemediationStuck" in out


def test_an_rma_share_too_low_is_caught(promtool: str, tmp_path: Path) -> None:
    share = f"> {config.REMEDIATION_RMA_SHARE:g}"
    out = promtool_fails_on(promtool, tmp_path, f'result=~"returned|rma"}}) {share}', 'result=~"returned|rma"}) > 0.3')
    assert "alertname: GpuRemediationRmaRateHigh" in out


def test_too_few_escalations_do_not_fire(promtool: str, tmp_path: Path) -> None:
    at_least = f'result="rma"}}) >= {config.REMEDIATION_RMA_MIN}'
    out = promtool_fails_on(promtool, tmp_path, at_least, 'result="rma"}) >= 2')
    assert "alertname: GpuRemediationRmaRateHigh" in out
