"""`kubectl kustomize` builds deploy/kubernetes/ and the README's overlay, offline (skipped without kubectl).

kubectl is looked up as $KUBECTL, then on PATH; e.g. `KUBECTL=kubectl.1.27 pytest tests/manifests`
checks the kustomize that ships with the oldest kubectl we support (v5.0.1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.manifests.files import OUT, ROOT, all_objects

KUBECTL = os.environ.get("KUBECTL") or shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl not found (set KUBECTL or put it on PATH)")


def _kustomize(directory: Path) -> list[dict[str, Any]]:
    assert KUBECTL is not None
    res = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d is not None]


def _key(o: dict[str, Any]) -> tuple[str, str, str | None]:
    return o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")


def test_kustomize_builds_every_object_unchanged() -> None:
    built = _kustomize(OUT)
    assert sorted(map(_key, built)) == sorted(map(_key, all_objects()))
    mine = {_key(o): o for o in all_objects()}
    for o in built:
        assert o == mine[_key(o)], _key(o)


def test_the_readmes_overlay_builds(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    text = readme.split("# my-cluster/kustomization.yaml\n", 1)[1].split("```", 1)[0]
    overlay = yaml.safe_load(text)
    overlay["resources"] = [os.path.relpath(OUT, tmp_path)]  # the README's ../gpuhealth is the checkout
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    (dep,) = [o for o in _kustomize(tmp_path) if o["kind"] == "Deployment"]
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert ctr["args"][ctr["args"].index("--actuate") + 1] == "on"
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert env["GPUHEALTH_PROMETHEUS_URL"] == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
