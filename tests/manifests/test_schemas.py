"""deploy/kubernetes/ against the schemas the API server would use, offline.

Built-in kinds: kubernetes-validate's bundled schemas (strict: an unknown field fails), for the
oldest Kubernetes minor we support, 1.27, and the newest the installed kubernetes-validate has
(1.37 with kubernetes-validate 1.37). Custom resources: the openAPIV3Schema of their CRDs, copied
into tests/data/ (Prometheus Operator v0.93.0: ServiceMonitor, PrometheusRule; NFD v0.19.0:
NodeFeatureRule), with jsonschema_rs, plus the fields a structural schema would prune.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from tests.crd import crd_schema, unknown_fields
from tests.integration.conftest import require_module
from tests.manifests.files import ROOT, all_objects, base_objects, one

kubernetes_validate = require_module("kubernetes_validate")

OLDEST = "1.27"
"""The oldest minor we support: PodDisruptionBudget policy/v1, runtimeClassName, seccompProfile and
Pod Security admission are all GA by then."""
NEWEST = kubernetes_validate.utils.major_minor(kubernetes_validate.utils.latest_version())
VERSIONS = (OLDEST, NEWEST)
CRDS = {
    ("monitoring.coreos.com", "ServiceMonitor"): ROOT / "tests/data/prometheus-operator-servicemonitors-crd.yaml",
    ("monitoring.coreos.com", "PrometheusRule"): ROOT / "tests/data/prometheus-operator-prometheusrules-crd.yaml",
    ("nfd.k8s-sigs.io", "NodeFeatureRule"): ROOT / "tests/data/nfd-nodefeaturerule-crd.yaml",
}
CUSTOM = [o for o in all_objects() if (o["apiVersion"].split("/")[0], o["kind"]) in CRDS]
BUILT_IN = [o for o in all_objects() if o not in CUSTOM]


def _id(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def test_versions_bundled() -> None:
    versions = kubernetes_validate.utils.all_versions()
    assert f"{OLDEST}.0" in versions
    assert Version(NEWEST) >= Version("1.37")


def test_every_object_is_checked() -> None:
    assert {o["kind"] for o in BUILT_IN} == {
        "Namespace", "ServiceAccount", "DaemonSet", "Deployment", "Service", "PodDisruptionBudget",
        "ClusterRole", "ClusterRoleBinding", "ConfigMap",
    }  # fmt: skip
    assert {(o["apiVersion"].split("/")[0], o["kind"]) for o in CUSTOM} == set(CRDS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("obj", BUILT_IN, ids=_id)
def test_built_in_kinds_validate(obj: dict[str, Any], version: str) -> None:
    assert kubernetes_validate.validate(obj, version, strict=True) == version


@pytest.mark.parametrize("version", VERSIONS)
def test_the_base_collector_validates(version: str) -> None:
    """Without components/nfd: the only object of base/ that differs from everything's."""
    base = {(o["kind"], o["metadata"]["name"]): o for o in base_objects()}
    changed = [k for k, o in base.items() if o != one(all_objects(), *k)]
    assert changed == [("DaemonSet", "gpuhealth-collector")]
    assert kubernetes_validate.validate(base[changed[0]], version, strict=True) == version


@pytest.mark.parametrize("version", VERSIONS)
def test_the_validator_has_teeth(version: str) -> None:
    objs = all_objects()
    typo = copy.deepcopy(one(objs, "DaemonSet", "gpuhealth-collector"))
    pod = typo["spec"]["template"]["spec"]
    pod["tolerations"][0]["efect"] = pod["tolerations"][0].pop("effect")
    with pytest.raises(kubernetes_validate.ValidationError, match="efect"):
        kubernetes_validate.validate(typo, version, strict=True)
    wrong = copy.deepcopy(one(objs, "Deployment", "gpuhealth"))
    wrong["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, version, strict=True)


def _schema(obj: dict[str, Any]) -> dict[str, Any]:
    group, version = obj["apiVersion"].split("/")
    return crd_schema(CRDS[(group, obj["kind"])], group, obj["kind"], version)


def _errors(obj: dict[str, Any]) -> list[str]:
    jsonschema_rs = require_module("jsonschema_rs")
    schema = _schema(obj)
    errors = [f"{e.instance_path}: {e.message}" for e in jsonschema_rs.validator_for(schema).iter_errors(obj)]
    return errors + [f"{f}: pruned (not in the schema)" for f in unknown_fields(obj, schema)]


@pytest.mark.parametrize("obj", CUSTOM, ids=_id)
def test_custom_resources_validate_against_their_crds(obj: dict[str, Any]) -> None:
    assert _errors(obj) == []


def test_the_crd_schemas_have_teeth() -> None:
    objs = all_objects()
    monitor = copy.deepcopy(one(objs, "ServiceMonitor", "gpuhealth-collector"))
    monitor["spec"]["endpoints"][0]["relabelings"][1]["action"] = "dropLabel"  # not an action
    monitor["spec"]["endpoints"][0]["honourLabels"] = True  # a typo the API server would prune
    assert len(_errors(monitor)) == 2
    rule = copy.deepcopy(one(objs, "PrometheusRule", "gpuhealth"))
    del rule["spec"]["groups"][1]["name"]
    rule["spec"]["groups"][1]["rules"][0]["for"] = "five minutes"  # not a Prometheus duration
    assert len(_errors(rule)) == 2


def test_crd_copies_name_their_source() -> None:
    for path in CRDS.values():
        head = Path(path).read_text().split("\n---\n")[0].split("apiVersion:")[0]
        assert "Source: https://github.com/" in head and "Apache License 2.0" in head, path
