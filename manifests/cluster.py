"""Cluster-wide objects: the namespace, and the actuator's least-privilege RBAC."""

from __future__ import annotations

from typing import Any

from manifests import config as c

RBAC = "rbac.authorization.k8s.io"

ACTUATOR_RULES: list[dict[str, Any]] = [
    # Read the nodes and our marks on them; patch labels, annotations, the taint and cordon.
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
    # Which pods use a GPU on a node that drains (all namespaces, by spec.nodeName).
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    # Evict them through the Eviction API, so PodDisruptionBudgets hold; never delete a pod.
    {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    # core/v1 Events on the node (`kubectl describe node`).
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]
"""Exactly what actuate/kubernetes.py calls, nothing more (tests/manifests/test_rbac.py)."""


def namespace() -> dict[str, Any]:
    """The namespace: Pod Security `privileged`, as the collector mounts host paths (baseline forbids any)."""
    meta = c.metadata(c.NAMESPACE, "namespace", namespaced=False)
    meta["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def cluster_role() -> dict[str, Any]:
    """What the actuator may do to the cluster."""
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRole",
        "metadata": c.metadata(f"{c.SERVICE}-actuator", "service", namespaced=False),
        "rules": [dict(rule) for rule in ACTUATOR_RULES],
    }


def cluster_role_binding() -> dict[str, Any]:
    """The service's ServiceAccount gets the actuator's role."""
    return {
        "apiVersion": f"{RBAC}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": c.metadata(f"{c.SERVICE}-actuator", "service", namespaced=False),
        "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": f"{c.SERVICE}-actuator"},
        "subjects": [{"kind": "ServiceAccount", "name": c.SERVICE, "namespace": c.NAMESPACE}],
    }


def rbac() -> list[dict[str, Any]]:
    """deploy/kubernetes/base/rbac.yaml."""
    return [cluster_role(), cluster_role_binding()]
