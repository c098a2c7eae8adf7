"""The optional GPU Operator DCGM Component (deploy/kubernetes/components/gpu-operator-dcgm, from
manifests/gpu_operator.py): an overlay that adds it points the collector's dcgm backend at the operator's
nvidia-dcgm Service and changes nothing else; without it the collector keeps its defaults."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.backends.dcgm import DCGM_PORT, parse_address
from core.settings import Settings
from manifests import gpu_operator
from tests.integration.conftest import require_module, require_tool
from tests.manifests.files import OUT, ROOT, all_objects, one

COMPONENT = ROOT / gpu_operator.OUT
SETTINGS = {"GPUHEALTH_BACKEND": "dcgm", "GPUHEALTH_DCGM_ADDRESS": "nvidia-dcgm.gpu-operator.svc:5555"}


def _collector(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "DaemonSet", "gpuhealth-collector")


def _env(ds: dict[str, Any]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = ds["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


def test_the_address_is_the_operators_service_and_a_valid_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gpu_operator.DCGM_PORT == DCGM_PORT
    assert parse_address(gpu_operator.ADDRESS) == gpu_operator.ADDRESS
    for name, value in SETTINGS.items():
        monkeypatch.setenv(name, value)
    s = Settings()
    assert (s.backend, s.dcgm_address) == ("dcgm", gpu_operator.ADDRESS)
    text = COMPONENT.read_text()
    assert text.startswith("# Generated from manifests/gpu_operator.py")
    assert "components: [../gpuhealth/deploy/kubernetes/components/gpu-operator-dcgm]" in text


def test_the_default_collector_keeps_its_backend_and_address() -> None:
    names = {e["name"] for e in _env(_collector(all_objects()))}
    assert not names & set(SETTINGS)


def test_an_overlay_with_the_component_selects_the_operators_dcgm(tmp_path: Path) -> None:
    kubectl = os.environ.get("KUBECTL") or require_tool("kubectl")
    overlay = {
        "resources": [os.path.relpath(OUT, tmp_path)],
        "components": [os.path.relpath(COMPONENT.parent, tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    res = subprocess.run([kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    built = [d for d in yaml.safe_load_all(res.stdout) if d is not None]
    ds, base = _collector(built), _collector(all_objects())
    added = [{"name": k, "value": v} for k, v in SETTINGS.items()]
    assert _env(ds) == [*_env(base), *added]
    validator = require_module("kubernetes_validate")
    assert validator.validate(ds, "1.27", strict=True) == "1.27"  # the oldest minor tests/manifests supports
    # nothing else of the DaemonSet changes, and no other object does
    ds["spec"]["template"]["spec"]["containers"][0]["env"] = _env(base)
    assert ds == base
    assert len(built) == len(all_objects())
