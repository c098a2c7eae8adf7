"""The overlays of docs/deploy.md build with `kubectl kustomize`: each names base/ and the Components it
wants, and gets exactly base/'s objects with those Components, as generated. Leaving out the Prometheus
Operator or NFD is leaving out its Component; a Component whose patch no longer applies fails here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from core import __version__
from tests.integration.conftest import require_tool
from tests.manifests.files import OUT, ROOT, all_objects, base_objects, with_components

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def kubectl() -> str:
    """$KUBECTL, else kubectl from PATH: skipped locally without it, a failure under CI=true (as every tool)."""
    return os.environ.get("KUBECTL") or require_tool("kubectl")


def _page_overlay(name: str, tmp_path: Path) -> Path:
    """The page's `# <name>/kustomization.yaml` block, with its ../gpuhealth pointing at this checkout."""
    page = (ROOT / "docs" / "deploy.md").read_text()
    overlay = yaml.safe_load(page.split(f"# {name}/kustomization.yaml\n", 1)[1].split("```", 1)[0])
    here = os.path.relpath(OUT, tmp_path)
    for field in ("resources", "components"):
        paths = overlay.get(field, [])
        assert all(p.startswith("../gpuhealth/deploy/kubernetes") for p in paths), paths
        if paths:
            overlay[field] = [p.replace("../gpuhealth/deploy/kubernetes", here, 1) for p in paths]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return tmp_path


def _build(kubectl: str, directory: Path) -> dict[tuple[str, str], Obj]:
    res = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(res.stdout) if d is not None}


def _keyed(objects: list[Obj]) -> dict[tuple[str, str], Obj]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def _collector(built: dict[tuple[str, str], Obj]) -> Obj:
    (ctr,) = built[("DaemonSet", "gpuhealth-collector")]["spec"]["template"]["spec"]["containers"]
    return ctr


def test_everything_is_base_and_both_components(kubectl: str, tmp_path: Path) -> None:
    built = _build(kubectl, _page_overlay("everything", tmp_path))
    assert built == _keyed(all_objects())
    assert {k[0] for k in built} >= {"ServiceMonitor", "PrometheusRule", "NodeFeatureRule"}


def test_without_the_operator_only_its_objects_go(kubectl: str, tmp_path: Path) -> None:
    built = _build(kubectl, _page_overlay("without-operator", tmp_path))
    mine = _keyed(all_objects())
    gone = {k for k in mine if k[0] in ("ServiceMonitor", "PrometheusRule")}
    assert len(gone) == 3
    assert built == {k: o for k, o in mine.items() if k not in gone}
    assert built == _keyed(with_components(base_objects(), ("nfd",)))


def test_without_nfd_the_collector_writes_no_labels_and_still_reports(kubectl: str, tmp_path: Path) -> None:
    built = _build(kubectl, _page_overlay("without-nfd", tmp_path))
    assert built == _keyed(with_components(base_objects(), ("prometheus-operator",)))
    assert "NodeFeatureRule" not in {k[0] for k in built}
    ctr = _collector(built)
    assert "--nfd-features-dir" not in ctr["args"]
    assert ctr["args"][ctr["args"].index("--service-url") + 1] == "http://gpuhealth.gpuhealth.svc:8080"  # remedies
    pod = built[("DaemonSet", "gpuhealth-collector")]["spec"]["template"]["spec"]
    assert "nfd-features" not in {m["name"] for m in ctr["volumeMounts"]} | {v["name"] for v in pod["volumes"]}
    # With the Component, the collector gets exactly the flag, the mount and the host folder.
    full = _collector(_keyed(all_objects()))
    assert full["args"] == [*ctr["args"], "--nfd-features-dir", "/etc/kubernetes/node-feature-discovery/features.d"]


def test_neither_is_the_base(kubectl: str, tmp_path: Path) -> None:
    built = _build(kubectl, _page_overlay("neither", tmp_path))
    assert built == _keyed(base_objects())
    assert not {"ServiceMonitor", "PrometheusRule", "NodeFeatureRule"} & {k[0] for k in built}


def test_my_registry_renames_both_images_and_keeps_their_tag(kubectl: str, tmp_path: Path) -> None:
    built = _build(kubectl, _page_overlay("my-registry", tmp_path))
    images = {
        key: [c["image"] for c in obj["spec"]["template"]["spec"]["containers"]]
        for key, obj in built.items()
        if key[0] in ("DaemonSet", "Deployment")
    }
    assert images == {
        ("DaemonSet", "gpuhealth-collector"): [f"registry.example.com/gpu/gpuhealth-collector:{__version__}"],
        ("Deployment", "gpuhealth"): [f"registry.example.com/gpu/gpuhealth:{__version__}"],
    }
