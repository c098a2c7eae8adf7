"""`kubectl kustomize` builds deploy/kubernetes/ and the overlay of docs/deploy.md, offline.

kubectl (skipped locally without it, a failure under CI=true) is looked up as $KUBECTL, then on
PATH; e.g. `KUBECTL=kubectl.1.27 pytest tests/manifests`
checks the kustomize that ships with the oldest kubectl we support (v5.0.1).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.conftest import require_tool
from tests.manifests.files import OUT, ROOT, all_objects


@pytest.fixture(scope="module")
def kubectl() -> str:
    """$KUBECTL, else kubectl from PATH: skipped locally without it, a failure under CI=true (as every tool)."""
    return os.environ.get("KUBECTL") or require_tool("kubectl")


def _kustomize(kubectl: str, directory: Path) -> list[dict[str, Any]]:
    res = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d is not None]


def _key(o: dict[str, Any]) -> tuple[str, str, str | None]:
    return o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")


def test_kustomize_builds_every_object_unchanged(kubectl: str) -> None:
    built = _kustomize(kubectl, OUT)
    assert sorted(map(_key, built)) == sorted(map(_key, all_objects()))
    mine = {_key(o): o for o in all_objects()}
    for o in built:
        assert o == mine[_key(o)], _key(o)


def test_the_deploy_pages_overlay_builds(kubectl: str, tmp_path: Path) -> None:
    page = (ROOT / "docs" / "deploy.md").read_text()
    text = page.split("# my-cluster/kustomization.yaml\n", 1)[1].split("```", 1)[0]
    overlay = yaml.safe_load(text)
    overlay["resources"] = [os.path.relpath(OUT, tmp_path)]  # the page's ../gpuhealth is the checkout
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    (dep,) = [o for o in _kustomize(kubectl, tmp_path) if o["kind"] == "Deployment"]
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert ctr["args"][ctr["args"].index("--actuate") + 1] == "on"
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["GPUHEALTH_PROMETHEUS_URL"] == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
