"""The central service: `gpuhealth serve` in fleet mode (pulling from Prometheus), its Service and budget.

Two replicas on one PostgreSQL split the fleet by hostname (service/replicas.py); the actuator
starts in dry-run: it records what it would do to the nodes (GET /v1/actions) and touches none.
"""

from __future__ import annotations

from typing import Any

from manifests import config as c

COMPONENT = "service"
CONTAINER = "gpuhealth"
TMP = "/tmp"
TOKEN_MODE = 0o440  # the token file: readable by the pod's group (fsGroup), nobody else


def service_account() -> dict[str, Any]:
    """The identity the actuator acts with (rbac.py binds it); lightkube reads the mounted token."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": c.metadata(c.SERVICE, COMPONENT),
        "automountServiceAccountToken": True,
    }


def args() -> list[str]:
    """`gpuhealth serve`: fleet mode, the actuator in dry-run on Kubernetes, the write token from a file.

    `dry-run` is args[6]: docs/deploy.md's overlay that turns the actuator on replaces it by index.
    """
    return [
        "serve",
        "--source", "prometheus",
        "--listen", f"0.0.0.0:{c.SERVICE_PORT}",
        "--actuate", "dry-run",
        "--actuate-target", "kubernetes",
        "--token-file", f"{c.TOKEN_DIR}/{c.TOKEN_SECRET_KEY}",
    ]  # fmt: skip


def _probe(path: str, period_s: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period_s,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def container() -> dict[str, Any]:
    """The service container: database URL and token from Secrets, port, probes, mounts."""
    db = {"secretKeyRef": {"name": c.POSTGRES_SECRET, "key": c.POSTGRES_SECRET_KEY}}
    return {
        "name": CONTAINER,
        "image": c.IMAGE,
        "args": args(),
        "env": [
            {"name": "GPUHEALTH_DB", "valueFrom": db},
            # An environment variable, not a flag: an overlay patches it by name (docs/deploy.md).
            {"name": "GPUHEALTH_PROMETHEUS_URL", "value": c.PROMETHEUS_URL},
        ],
        "ports": [{"name": "http", "containerPort": c.SERVICE_PORT, "protocol": "TCP"}],
        # Start-up loads the model and migrates the database: up to 150 s before liveness counts.
        "startupProbe": _probe("/healthz", 5, 30),
        "livenessProbe": _probe("/healthz", 20, 3),
        # /readyz is 503 while the database does not answer: the Service then routes to the other replica.
        "readinessProbe": _probe("/readyz", 10, 3),
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "token", "mountPath": c.TOKEN_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": TMP},
        ],
    }


def pod_spec() -> dict[str, Any]:
    """Non-root, read-only, spread over nodes."""
    return {
        "serviceAccountName": c.SERVICE,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": c.RUN_AS_USER,
            "runAsGroup": c.RUN_AS_USER,
            "fsGroup": c.RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": c.selector(COMPONENT)},
            }
        ],
        "containers": [container()],
        "volumes": [
            {
                "name": "token",
                "secret": {
                    "secretName": c.TOKEN_SECRET,
                    "defaultMode": TOKEN_MODE,
                    "items": [{"key": c.TOKEN_SECRET_KEY, "path": c.TOKEN_SECRET_KEY}],
                },
            },
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        ],
    }


def deployment() -> dict[str, Any]:
    """`gpuhealth serve`, replicated."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": c.metadata(c.SERVICE, COMPONENT),
        "spec": {
            "replicas": c.SERVICE_REPLICAS,
            "selector": {"matchLabels": c.selector(COMPONENT)},
            "template": {"metadata": {"labels": c.labels(COMPONENT)}, "spec": pod_spec()},
        },
    }


def service() -> dict[str, Any]:
    """The API, /metrics and the Alertmanager webhook, at http://gpuhealth.gpuhealth.svc:8080."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": c.metadata(c.SERVICE, COMPONENT, extra_labels={c.SCRAPE_JOB_LABEL: c.SERVICE_JOB}),
        "spec": {
            "type": "ClusterIP",
            "selector": c.selector(COMPONENT),
            "ports": [{"name": "http", "port": c.SERVICE_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def disruption_budget() -> dict[str, Any]:
    """A node drain takes one replica at a time."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": c.metadata(c.SERVICE, COMPONENT),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": c.selector(COMPONENT)}},
    }


def objects() -> list[dict[str, Any]]:
    """deploy/kubernetes/base/service.yaml."""
    return [service_account(), deployment(), service(), disruption_budget()]
