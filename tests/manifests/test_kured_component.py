"""The optional kured Component (deploy/kubernetes/components/kured-sentinel, from manifests/kured.py): an overlay
that adds it gives the collector the sentinel's folder and the setting, and changes nothing else; without it the
collector has neither."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.settings import Settings
from manifests import kured
from tests.integration.conftest import require_tool
from tests.manifests.files import OUT, ROOT, all_objects, load, one

COMPONENT = ROOT / kured.OUT


def _collector(objects: list[dict[str, Any]]) -> dict[str, Any]:
    return one(objects, "DaemonSet", "gpuhealth-collector")


def test_the_setting_and_the_header_say_the_same_paths() -> None:
    assert Settings.model_config.get("env_prefix", "") + "REBOOT_SENTINEL" == kured.ENV
    assert f"{kured.SENTINEL_DIR}/reboot-required" == kured.SENTINEL
    text = COMPONENT.read_text()
    assert f"--reboot-sentinel-command={kured.KURED_SENTINEL_COMMAND}" in text
    assert text.startswith("# Generated from manifests/kured.py")


def test_the_default_collector_has_no_sentinel() -> None:
    (k,) = load("kustomization.yaml")
    assert not any("kured" in r for r in [*k["resources"], *k.get("components", [])])
    ds = _collector(all_objects())
    spec = ds["spec"]["template"]["spec"]
    assert kured.VOLUME not in {v["name"] for v in spec["volumes"]}
    assert kured.ENV not in {e["name"] for e in spec["containers"][0]["env"]}


def test_an_overlay_with_the_component_mounts_the_sentinels_folder(tmp_path: Path) -> None:
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
    spec, base_spec = ds["spec"]["template"]["spec"], base["spec"]["template"]["spec"]
    (ctr,), (base_ctr,) = spec["containers"], base_spec["containers"]
    assert spec["volumes"] == [
        *base_spec["volumes"],
        {"name": kured.VOLUME, "hostPath": {"path": "/run/gpuhealth", "type": "DirectoryOrCreate"}},
    ]
    assert ctr["volumeMounts"] == [*base_ctr["volumeMounts"], {"name": kured.VOLUME, "mountPath": "/run/gpuhealth"}]
    assert ctr["env"] == [
        *base_ctr["env"],
        {"name": "GPUHEALTH_REBOOT_SENTINEL", "value": "/run/gpuhealth/reboot-required"},
    ]
    # nothing else of the DaemonSet changes, and no other object does
    for d in (ds, base):
        d["spec"]["template"]["spec"]["volumes"] = d["spec"]["template"]["spec"]["volumes"][: len(base_spec["volumes"])]
        c0 = d["spec"]["template"]["spec"]["containers"][0]
        c0["volumeMounts"], c0["env"] = (
            c0["volumeMounts"][: len(base_ctr["volumeMounts"])],
            c0["env"][: len(base_ctr["env"])],
        )
    assert ds == base
    assert len(built) == len(all_objects())


def test_the_setting_reads_the_components_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kured.ENV, kured.SENTINEL)
    assert Settings().reboot_sentinel == kured.SENTINEL
