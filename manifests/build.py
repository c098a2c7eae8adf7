"""Render deploy/kubernetes/: base/, the Components, and the kustomization of everything.

`outputs(root)` maps each generated file (relative to the repository root) to its text; it reads
the generated rules and dashboards and the example NodeFeatureRule under `root`. The CLI writes the
files or checks that the committed ones are current. Same sources, same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from core import generated
from manifests import cluster, collector, gpu_operator, kured, monitoring, nfd, service
from manifests import config as c

HEADER = "# Generated from manifests/ by `gpuhealth deploy build`; do not edit by hand.\n"
KUSTOMIZATION = "kustomization.yaml"
OPERATOR = c.COMPONENTS_DIR / "prometheus-operator"
OPERATOR_HEADER = (
    "# Generated from manifests/monitoring.py by `gpuhealth deploy build`; do not edit by hand.\n"
    "# The Prometheus Operator's objects (its ServiceMonitor and PrometheusRule CRDs): the two scrape jobs\n"
    "# the rules select, and the rules. deploy/kubernetes/ includes it; an overlay on deploy/kubernetes/base\n"
    "# leaves it out by not naming it, and scrapes and loads the rules itself (docs/deploy.md).\n"
)
EVERYTHING_HEADER = (
    "# `kubectl apply -k deploy/kubernetes`: the base and the Components for the Prometheus Operator and\n"
    "# Node Feature Discovery. Without one of them: an overlay of base/ naming only the others (docs/deploy.md).\n"
)


class SourceMissing(Exception):
    """A generated file the manifests are built from is missing (run its build first)."""


def to_yaml(docs: list[dict[str, Any]]) -> str:
    """Multi-document YAML in the generated files' one style (`core.generated.to_yaml`)."""
    return "---\n".join(generated.to_yaml(d) for d in docs)


def _read(root: Path, rel: Path, remedy: str) -> str:
    try:
        return (root / rel).read_text()
    except FileNotFoundError:
        raise SourceMissing(f"{rel} is missing under {root}: {remedy}") from None


def rules(root: Path) -> dict[str, Any]:
    """alerts/generated/gpuhealth-rules.yml, parsed."""
    parsed: dict[str, Any] = yaml.safe_load(_read(root, c.RULES_FILE, "run `gpuhealth alerts build` first"))
    return parsed


def dashboards(root: Path) -> dict[str, str]:
    """dashboards/generated/*.json by file stem, sorted."""
    files = sorted((root / c.DASHBOARDS_DIR).glob("*.json"))
    if not files:
        raise SourceMissing(
            f"{c.DASHBOARDS_DIR}/*.json is missing under {root}: run `gpuhealth dashboards build` first"
        )
    return {f.stem: f.read_text() for f in files}


def base_documents(root: Path) -> dict[str, Callable[[], list[dict[str, Any]]]]:
    """deploy/kubernetes/base/'s object files (in the order kustomize applies them) and their objects."""
    return {
        "namespace.yaml": lambda: [cluster.namespace()],
        "rbac.yaml": cluster.rbac,
        "service.yaml": service.objects,
        "collector.yaml": collector.objects,
        "dashboards.yaml": lambda: [monitoring.dashboard(stem, text) for stem, text in dashboards(root).items()],
    }


def operator_documents(root: Path) -> dict[str, Callable[[], list[dict[str, Any]]]]:
    """components/prometheus-operator/'s object files and their objects."""
    return {
        "servicemonitors.yaml": lambda: [monitoring.collector_monitor(), monitoring.service_monitor()],
        "prometheusrule.yaml": lambda: [monitoring.prometheus_rule(rules(root))],
    }


def kustomization(kind: str, header: str = HEADER, **fields: list[str]) -> str:
    """A kustomization.yaml (`kind`: Kustomization or Component) listing `fields` (resources, components).

    No `namespace:` transformer: every namespaced object names its namespace, and kustomize would
    put one on the cluster-scoped NodeFeatureRule too (it does not know that kind).
    """
    version = "v1beta1" if kind == "Kustomization" else "v1alpha1"
    doc = {"apiVersion": f"kustomize.config.k8s.io/{version}", "kind": kind, **fields}
    return header + to_yaml([doc])


def _rendered(documents: dict[str, Callable[[], list[dict[str, Any]]]]) -> dict[str, str]:
    notes = {"collector.yaml": collector.RESET_NOTE + collector.REMEDIES_NOTE + collector.KMSG_NOTE}
    return {name: HEADER + notes.get(name, "") + to_yaml(objects()) for name, objects in documents.items()}


def outputs(root: Path) -> dict[Path, str]:
    """Every generated file (relative to the repository root) and its text."""
    base = _rendered(base_documents(root))
    base[KUSTOMIZATION] = kustomization("Kustomization", resources=list(base))
    operator = _rendered(operator_documents(root))
    operator[KUSTOMIZATION] = kustomization("Component", OPERATOR_HEADER, resources=list(operator))
    rule = nfd.outputs(_read(root, c.NFD_RULE_FILE, "it is a source, restore it from git"))
    components = [p.relative_to(c.OUT_DIR).as_posix() for p in (OPERATOR, nfd.DIR)]
    everything = kustomization("Kustomization", HEADER + EVERYTHING_HEADER, resources=["base"], components=components)
    # kured-sentinel and gpu-operator-dcgm: Components an overlay may add, not in `everything`
    return {
        **{c.BASE_DIR / name: text for name, text in base.items()},
        **{OPERATOR / name: text for name, text in operator.items()},
        **rule,
        c.OUT_DIR / KUSTOMIZATION: everything,
        **kured.outputs(),
        **gpu_operator.outputs(),
    }


def write(root: Path) -> list[Path]:
    """Write every generated file under `root`; return the paths written."""
    return generated.write(outputs(root), root)


def stale(root: Path) -> list[Path]:
    """Generated files under `root` that are missing or differ from what the sources produce."""
    return generated.stale(outputs(root), root)
