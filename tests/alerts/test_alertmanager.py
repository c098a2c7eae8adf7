"""alerts/alertmanager.example.yml: valid to amtool, routes by action, inhibits lesser alerts of one GPU."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml

from alerts.model import ACTIONS
from alerts.rules import ALERTS
from tests.alerts.conftest import REPO_ROOT

CONFIG = REPO_ROOT / "alerts" / "alertmanager.example.yml"
WEBHOOK = "http://127.0.0.1:8080/v1/alertmanager"


def _config() -> dict[str, Any]:
    return dict(yaml.safe_load(CONFIG.read_text()))


def test_amtool_check_config(amtool: str) -> None:
    res = subprocess.run([amtool, "check-config", str(CONFIG)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (["action=drain", "severity=critical"], "oncall,gpuhealth-drain"),
        (["action=rma", "severity=critical"], "oncall,gpuhealth-rma"),
        (["action=demote", "severity=warning"], "gpuhealth-demote"),
        (["action=demote", "severity=critical"], "oncall,gpuhealth-demote"),
        (["action=watch", "severity=info"], "gpuhealth-watch"),
        (["alertname=SomethingElse", "severity=warning"], "gpuhealth-default"),
    ],
)
def test_amtool_routes(amtool: str, labels: list[str], receivers: str) -> None:
    res = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={CONFIG}", f"--verify.receivers={receivers}", *labels],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, f"{labels}: expected {receivers}, got {res.stdout.strip()} {res.stderr.strip()}"


def test_amtool_routes_can_fail(amtool: str) -> None:
    res = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={CONFIG}", "--verify.receivers=gpuhealth-drain",
         "action=watch"],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert res.returncode != 0


def test_every_action_reaches_the_gpuhealth_webhook() -> None:
    cfg = _config()
    receivers = {r["name"]: r for r in cfg["receivers"]}
    routed = {}
    for route in cfg["route"]["routes"]:
        for matcher in route.get("matchers", []):
            m = re.fullmatch(r'action="(\w+)"', matcher)
            if m:
                routed[m.group(1)] = route["receiver"]
    assert set(routed) == set(ACTIONS) >= {a.action for a in ALERTS}
    for action, name in routed.items():
        hooks = receivers[name]["webhook_configs"]
        assert [h["url"] for h in hooks] == [WEBHOOK], action
        auth = hooks[0]["http_config"]["authorization"]
        assert auth["type"] == "Bearer" and auth.get("credentials_file")
        assert hooks[0]["send_resolved"] is True
    assert "Hostname" in cfg["route"]["group_by"]


def _matches(matchers: list[str], labels: dict[str, str]) -> bool:
    for text in matchers:
        m = re.fullmatch(r'(\w+)(=~|!~|!=|=)"(.*)"', text)
        assert m, f"unparsed matcher {text!r}"
        name, op, value = m.groups()
        have = labels.get(name, "")
        ok = {
            "=": have == value,
            "!=": have != value,
            "=~": re.fullmatch(value, have) is not None,
            "!~": re.fullmatch(value, have) is None,
        }[op]
        if not ok:
            return False
    return True


def _inhibited(source: dict[str, str], target: dict[str, str]) -> bool:
    """Alertmanager's inhibition semantics for the example's rules (matchers and `equal`)."""
    for rule in _config()["inhibit_rules"]:
        if (
            _matches(rule["source_matchers"], source)
            and _matches(rule["target_matchers"], target)
            and all(source.get(k, "") == target.get(k, "") for k in rule.get("equal", []))
        ):
            return True
    return False


GPU_A = {"UUID": "GPU-a", "Hostname": "node-a"}
GPU_B = {"UUID": "GPU-b", "Hostname": "node-a"}


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        ("drain", "demote", True),
        ("drain", "watch", True),
        ("rma", "drain", True),
        ("rma", "demote", True),
        ("rma", "watch", True),
        ("demote", "watch", True),
        ("watch", "drain", False),
        ("drain", "rma", False),
        ("demote", "drain", False),
    ],
)
def test_inhibitions_same_gpu(source: str, target: str, expected: bool) -> None:
    assert _inhibited({**GPU_A, "action": source}, {**GPU_A, "action": target}) is expected


def test_inhibitions_stay_within_one_gpu() -> None:
    assert not _inhibited({**GPU_A, "action": "drain"}, {**GPU_B, "action": "watch"})
    # Node-level alerts have no UUID: they must not silence each other.
    assert not _inhibited({"instance": "n:9400", "action": "drain"}, {"instance": "m:9400", "action": "watch"})
