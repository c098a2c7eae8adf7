"""The generated rules: current, complete (labels, annotations, runbooks, tests), and valid to promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from alerts import all_expressions, build, config
from alerts.model import ACTIONS
from alerts.rules import ALERTS, RECORDS
from tests.alerts.conftest import REPO_ROOT

RULES = REPO_ROOT / build.RULES_PATH
TESTS = REPO_ROOT / build.TESTS_PATH
BY_NAME = {a.name: a for a in ALERTS}


def _alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_generated_files_are_current() -> None:
    stale = build.stale(REPO_ROOT)
    assert stale == [], f"out of date: {stale}; run `gpuhealth alerts build`"


def test_output_is_stable() -> None:
    assert build.outputs() == build.outputs()


def test_no_stray_runbooks() -> None:
    names = {a.name for a in ALERTS}
    extra = [p.stem for p in (REPO_ROOT / build.RUNBOOK_DIR).glob("*.md") if p.stem not in names]
    assert extra == [], f"runbooks without an alert: {extra}"


def test_names_are_unique_and_well_formed() -> None:
    names = [a.name for a in ALERTS]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"Gpu[A-Z][A-Za-z0-9]+", n) for n in names), names
    records = [r.record for r in RECORDS]
    assert len(records) == len(set(records))
    # level:metric:operation
    assert all(re.fullmatch(r"[a-z_]+:[a-z_]+:[a-z0-9_]+", r) for r in records), records


def test_brief_alerts_exist() -> None:
    rules = {r["alert"]: r for r in _alert_rules()}
    assert rules["GpuMemoryAlmostFull"]["for"] == "5m"
    assert rules["GpuMemoryAlmostFull"]["labels"]["severity"] == "warning"
    assert "> 0.95" in rules["GpuMemoryAlmostFull"]["expr"]
    assert rules["GpuTemperatureHigh"]["for"] == "2m"
    assert rules["GpuTemperatureHigh"]["labels"]["severity"] == "critical"
    assert rules["GpuXidErrors"]["labels"]["severity"] == "critical"
    actions = {r["labels"]["action"] for r in rules.values()}
    assert actions == set(ACTIONS)


def test_every_alert_has_labels_annotations_and_a_runbook() -> None:
    rules = _alert_rules()
    assert {r["alert"] for r in rules} == {a.name for a in ALERTS}
    for r in rules:
        name = r["alert"]
        assert r["labels"]["severity"] in ("info", "warning", "critical"), name
        assert r["labels"]["action"] in ACTIONS, name
        ann = r["annotations"]
        assert ann["summary"].strip() and "{{" in ann["summary"], name
        assert "{{ $labels." in ann["description"] or "{{ $value" in ann["description"], name
        assert ann["runbook_url"] == f"{config.RUNBOOK_BASE_URL}/{name}.md", name
        runbook = REPO_ROOT / "docs" / "runbooks" / f"{name}.md"
        assert runbook.is_file(), f"{name}: no {runbook}"
        text = runbook.read_text()
        for section in ("## What it means", "## What to check", "## What to do"):
            assert section in text, f"{runbook}: missing {section}"
        # A GPU's alert says how to look at the GPU; a collector's, node's or the service's does not
        # tell the operator to query a GPU it has no UUID for.
        about_a_gpu = any("UUID" in lab for lab in BY_NAME[name].case.labels)
        assert ("/v1/gpus/<UUID>" in text) == about_a_gpu, name
        if about_a_gpu:
            assert "dcgmi diag" in text, name


def test_every_alert_has_a_quiet_and_a_firing_case() -> None:
    doc = yaml.safe_load(TESTS.read_text())
    assert doc["rule_files"] == [build.RULES_PATH.name]
    cases: dict[str, list[dict[str, Any]]] = {}
    for test in doc["tests"]:
        for art in test["alert_rule_test"]:
            cases.setdefault(art["alertname"], []).append(art)
    for a in ALERTS:
        arts = cases.get(a.name, [])
        assert any(art["exp_alerts"] == [] for art in arts), f"{a.name}: no case where it must not fire"
        fired = [e for art in arts for e in art["exp_alerts"]]
        assert fired, f"{a.name}: no case where it fires"
        for e in fired:
            assert e["exp_labels"]["severity"] == a.severity and e["exp_labels"]["action"] == a.action
            assert set(e["exp_annotations"]) == {"summary", "description", "runbook_url"}, a.name
            assert "{{" not in e["exp_annotations"]["description"], a.name


def test_render_template_subset() -> None:
    text = 'GPU {{ $labels.gpu }} at {{ $value | printf "%.1f" }} C'
    assert build.render_template(text, {"gpu": "3"}, 88.04) == "GPU 3 at 88.0 C"
    with pytest.raises(ValueError, match="outside the supported subset"):
        build.render_template("{{ $value | humanize }}", {}, 1.0)


def test_all_expressions_lists_every_rule() -> None:
    exprs = dict(all_expressions())
    assert len(exprs) == len(ALERTS) + len(RECORDS)
    assert exprs["alert:GpuLost"] == "gpuhealth_gpu_lost == 1"
    assert exprs["record:gpu:pcie_replays:rate5m"].startswith("rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER")


def test_promtool_check_rules(promtool: str) -> None:
    res = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(ALERTS) + len(RECORDS)} rules found" in res.stdout


def test_promtool_test_rules(promtool: str) -> None:
    res = subprocess.run(
        [promtool, "test", "rules", TESTS.name], capture_output=True, text=True, timeout=120, cwd=TESTS.parent
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_tests_catch_a_broken_rule(promtool: str, tmp_path: Path) -> None:
    """The unit tests must be able to fail: a wrong threshold, a wrong XID class and a demote alert that
    ignores the policy's decision (a GPU held at watch on a hot node) are caught."""
    shutil.copy(TESTS, tmp_path / TESTS.name)
    text = RULES.read_text()
    broken = text.replace("gpuhealth_gpu_lost == 1", "gpuhealth_gpu_lost == 2")
    broken = broken.replace(
        'modelName=~"NVIDIA H100.*|NVIDIA H200.*"} > 87', 'modelName=~"NVIDIA H100.*|NVIDIA H200.*"} > 85'
    )
    broken = broken.replace('gpuhealth_decision{decision=~"demote|drain|rma"} == 1', "gpuhealth_decision == 1")
    assert broken.count("== 2") >= 1 and broken.count('decision=~"demote|drain|rma"') == 0
    (tmp_path / RULES.name).write_text(broken)
    res = subprocess.run(
        [promtool, "test", "rules", TESTS.name], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode != 0
    assert "alertname: GpuLost" in res.stdout + res.stderr
    assert "alertname: GpuTemperatureHigh" in res.stdout + res.stderr
    assert "alertname: GpuRiskDemote" in res.stdout + res.stderr


def test_cli_build_and_check(tmp_path: Path) -> None:
    from gpuhealth.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["alerts", "build", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / build.RULES_PATH).read_text() == RULES.read_text()
    assert runner.invoke(app, ["alerts", "build", "--check", "--root", str(tmp_path)]).exit_code == 0
    (tmp_path / "docs" / "runbooks" / "GpuLost.md").write_text("edited by hand\n")
    res = runner.invoke(app, ["alerts", "build", "--check", "--root", str(tmp_path)])
    assert res.exit_code == 1
    assert "GpuLost.md" in res.output
