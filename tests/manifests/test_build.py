"""`gpuhealth deploy build`: the committed files are current, complete, and carry the rules and dashboards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from alerts.rules import ALERTS, RECORDS
from manifests import build
from manifests import config as c
from tests.manifests.files import BASE, EVERYTHING, OUT, ROOT, generated_files, load

SOURCES = (c.RULES_FILE, c.NFD_RULE_FILE, *(p.relative_to(ROOT) for p in (ROOT / c.DASHBOARDS_DIR).glob("*.json")))


def test_committed_files_are_current() -> None:
    """What `make test` runs as `gpuhealth deploy build --check`."""
    stale = build.stale(ROOT)
    assert stale == [], f"out of date: {stale}; run `gpuhealth deploy build`"


def test_build_is_stable() -> None:
    assert build.outputs(ROOT) == build.outputs(ROOT)


def _copy_sources(root: Path) -> None:
    for rel in SOURCES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, root / rel)


def test_cli_build_and_check(tmp_path: Path) -> None:
    from gpuhealth.cli import app

    runner = CliRunner()
    _copy_sources(tmp_path)
    assert runner.invoke(app, ["deploy", "build", "--check", "--root", str(tmp_path)]).exit_code == 1
    res = runner.invoke(app, ["deploy", "build", "--root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    for name in generated_files():
        assert (tmp_path / c.OUT_DIR / name).read_text() == (OUT / name).read_text(), name
    assert runner.invoke(app, ["deploy", "build", "--check", "--root", str(tmp_path)]).exit_code == 0
    # A rule changed by `gpuhealth alerts build` makes the PrometheusRule stale.
    rules = tmp_path / c.RULES_FILE
    rules.write_text(rules.read_text().replace("GpuLost", "GpuGone"))
    res = runner.invoke(app, ["deploy", "build", "--check", "--root", str(tmp_path)])
    assert res.exit_code == 1
    assert "prometheusrule.yaml" in res.output and "gpuhealth deploy build" in res.output


def test_cli_says_which_source_is_missing(tmp_path: Path) -> None:
    from gpuhealth.cli import app

    _copy_sources(tmp_path)
    (tmp_path / c.RULES_FILE).unlink()
    res = CliRunner().invoke(app, ["deploy", "build", "--root", str(tmp_path)])
    assert res.exit_code == 1
    assert "gpuhealth-rules.yml is missing" in res.output and "gpuhealth alerts build" in res.output
    assert "Traceback" not in res.output


def test_kustomizations_list_every_file() -> None:
    (base,) = load("base/kustomization.yaml")
    assert (base["apiVersion"], base["kind"]) == ("kustomize.config.k8s.io/v1beta1", "Kustomization")
    files = sorted(p.name for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(base["resources"]) == files and len(files) == 5
    assert base["resources"][0] == "namespace.yaml"
    # No namespace transformer: it would put a namespace on the cluster-scoped NodeFeatureRule too.
    assert set(base) == {"apiVersion", "kind", "resources"}
    for name in EVERYTHING:
        (component,) = load(f"components/{name}/kustomization.yaml")
        assert (component["apiVersion"], component["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
        own = sorted(p.name for p in (OUT / "components" / name).glob("*.yaml") if p.name != "kustomization.yaml")
        assert sorted(component["resources"]) == own
        assert "namespace" not in component
    (everything,) = load("kustomization.yaml")
    assert everything == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["base"],
        "components": [f"components/{name}" for name in EVERYTHING],
    }


def test_every_generated_file_is_in_the_directory_and_nothing_else() -> None:
    made = {p.relative_to(c.OUT_DIR) for p in build.outputs(ROOT)}
    assert made == {p.relative_to(OUT) for p in OUT.rglob("*") if p.is_file()}


def test_prometheus_rule_carries_every_rule_of_the_rule_file() -> None:
    rule_file = yaml.safe_load((ROOT / c.RULES_FILE).read_text())
    (prule,) = load("components/prometheus-operator/prometheusrule.yaml")
    assert prule["spec"]["groups"] == rule_file["groups"]
    alerts = {r["alert"] for g in rule_file["groups"] for r in g["rules"] if "alert" in r}
    carried = {r["alert"] for g in prule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert len(alerts) >= 30 and carried == alerts
    assert carried == {a.name for a in ALERTS}
    records = {r["record"] for g in prule["spec"]["groups"] for r in g["rules"] if "record" in r}
    assert records == {r.record for r in RECORDS}


def test_dashboards_are_configmaps_for_grafanas_sidecar() -> None:
    maps = load("base/dashboards.yaml")
    stems = sorted(p.stem for p in (ROOT / c.DASHBOARDS_DIR).glob("*.json"))
    assert len(maps) == len(stems) == 3
    for cm, stem in zip(maps, stems, strict=True):
        assert cm["kind"] == "ConfigMap" and cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        text = (ROOT / c.DASHBOARDS_DIR / f"{stem}.json").read_text()
        assert cm["data"] == {f"{stem}.json": text}  # byte for byte
        assert json.loads(cm["data"][f"{stem}.json"])["uid"] == stem
        # kubectl's client-side apply keeps the object in a 256 KiB annotation.
        assert len(json.dumps(cm)) < 256 * 1024


def test_node_feature_rule_is_the_example() -> None:
    assert load("components/nfd/nfd-gpuhealth-rule.yaml") == [yaml.safe_load((ROOT / c.NFD_RULE_FILE).read_text())]
    assert (OUT / "components/nfd/nfd-gpuhealth-rule.yaml").read_text().endswith((ROOT / c.NFD_RULE_FILE).read_text())


def test_every_file_says_it_is_generated() -> None:
    for p in (p for p in OUT.rglob("*") if p.is_file()):
        assert p.read_text().startswith("# Generated"), p.name
