"""The overlays of docs/deploy.md that leave out the Prometheus Operator's or NFD's objects build with
`kubectl kustomize`, remove what the page says, and leave everything else as generated. A base that moves
the collector's NFD arguments or its features.d mount fails here (the page's `test` operations), not for
a reader."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from core import __version__
from tests.integration.conftest import require_tool
from tests.manifests.files import OUT, ROOT, all_objects

Obj = dict[str, Any]


@pytest.fixture(scope="module")
def kubectl() -> str:
    """$KUBECTL, else kubectl from PATH: skipped locally without it, a failure under CI=true (as every tool)."""
    return os.environ.get("KUBECTL") or require_tool("kubectl")


def _page_overlay(name: str, tmp_path: Path) -> Path:
    """The page's `# <name>/kustomization.yaml` block, with its ../gpuhealth pointing at this checkout."""
    page = (ROOT / "docs" / "deploy.md").read_text()
    overlay = yaml.safe_load(page.split(f"# {name}/kustomization.yaml\n", 1)[1].split("```", 1)[0])
    assert overlay["resources"] == ["../gpuhealth/deploy/kubernetes"]
    overlay["resources"] = [os.path.relpath(OUT, tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return tmp_path


def _build(kubectl: str, directory: Path) -> dict[tuple[str, str], Obj]:
    res = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(res.stdout) if d is not None}


def _generated() -> dict[tuple[str, str], Obj]:
    return {(o["kind"], o["metadata"]["name"]): o for o in all_objects()}


def test_without_the_operator_only_its_objects_go(kubectl: str, tmp_path: Path) -> None:
    built = _build(kubectl, _page_overlay("without-operator", tmp_path))
    mine = _generated()
    gone = {k for k in mine if k[0] in ("ServiceMonitor", "PrometheusRule")}
    assert len(gone) == 3
    assert set(built) == set(mine) - gone
    assert all(built[k] == mine[k] for k in built)


def test_without_nfd_the_collector_writes_no_labels(kubectl: str, tmp_path: Path) -> None:
    built = _build(kubectl, _page_overlay("without-nfd", tmp_path))
    mine = _generated()
    assert set(built) == set(mine) - {k for k in mine if k[0] == "NodeFeatureRule"}
    ds = built[("DaemonSet", "gpuhealth-collector")]["spec"]["template"]["spec"]
    (ctr,) = ds["containers"]
    assert not {"--nfd-features-dir", "--service-url"} & set(ctr["args"])
    assert "nfd-features" not in {m["name"] for m in ctr["volumeMounts"]} | {v["name"] for v in ds["volumes"]}
    # Everything else of the collector is as generated.
    was = mine[("DaemonSet", "gpuhealth-collector")]["spec"]["template"]["spec"]
    (was_ctr,) = was["containers"]
    removed = [a for a in was_ctr["args"] if a not in ctr["args"]]
    assert removed == ["--nfd-features-dir", was_ctr["args"][4], "--service-url", was_ctr["args"][6]]
    assert [k for k in built if k[0] != "DaemonSet" and built[k] != mine[k]] == []


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
