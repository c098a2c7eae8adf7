"""The alerts of what only a sampler exports (the NVLink fabric and links, NVSwitches, InfiniBand ports, the
kernel log) fire for `gpuhealth serve` with its in-process collector (the small install) as for a collector."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from alerts import build, config
from alerts.model import TEST_JOB, TEST_SERVICE_JOB
from tests.alerts.conftest import REPO_ROOT

SAMPLED_ONLY = (
    "GpuFabricNotReady",
    "GpuNvlinkLinkDown",
    "GpuNvswitchFatalDcgm",
    "GpuInfinibandPortDown",
    "GpuInfinibandLinkFlapping",
    "GpuInfinibandPortErrorsHigh",
    "GpuKernelXidResetRequired",
    "GpuKernelXidContainedEcc",
    "GpuNvswitchFatalSxid",
)


def _as_served(text: str) -> str:
    return text.replace(f'job="{TEST_JOB}"', f'job="{TEST_SERVICE_JOB}"')


def test_each_is_a_sampler_alert() -> None:
    rules = yaml.safe_load((REPO_ROOT / build.RULES_PATH).read_text())
    exprs = {r["alert"]: str(r["expr"]) for g in rules["groups"] for r in g["rules"] if "alert" in r}
    for name in SAMPLED_ONLY:
        assert config.SAMPLER_SELECTOR in exprs[name], name
        assert config.COLLECTOR_SELECTOR not in exprs[name], name


@pytest.mark.parametrize("name", SAMPLED_ONLY)
def test_fires_on_the_services_own_samples(promtool: str, tmp_path: Path, name: str) -> None:
    """Each alert's own promtool case, its series scraped from the service's job instead."""
    doc = yaml.safe_load((REPO_ROOT / build.TESTS_PATH).read_text())
    case = next(t for t in doc["tests"] if t["name"] == name)
    for s in case["input_series"]:
        s["series"] = _as_served(s["series"])
    for t in case["alert_rule_test"]:
        for a in t["exp_alerts"]:
            a["exp_labels"] = {k: TEST_SERVICE_JOB if k == "job" else v for k, v in a["exp_labels"].items()}
    doc["tests"] = [case]
    (tmp_path / "rules.yml").write_text((REPO_ROOT / build.RULES_PATH).read_text())
    doc["rule_files"] = ["rules.yml"]
    (tmp_path / "t.yml").write_text(yaml.safe_dump(doc))
    res = subprocess.run(
        [promtool, "test", "rules", "t.yml"], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert res.returncode == 0, res.stdout + res.stderr
