"""Names, labels, ports and paths every manifest shares, in one place (the kubernetes-mixin `_config`).

Ports and intervals come from the settings' defaults (never the environment: the output is the same
on every machine); the image tag is the package version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core import __version__
from core.settings import Settings
from core.units import parse_listen

NAMESPACE = "gpuhealth"
APP = "gpuhealth"
IMAGE_REGISTRY = "ghcr.io/gpuhealth"
"""Where the images are published; an overlay's `images:` replaces it with your own (docs/deploy.md)."""
IMAGE = f"{IMAGE_REGISTRY}/gpuhealth:{__version__}"
"""The service: Containerfile's target `service`, the whole product."""
COLLECTOR_IMAGE = f"{IMAGE_REGISTRY}/gpuhealth-collector:{__version__}"
"""The node agent: Containerfile's target `collector`, the light install set."""

COLLECTOR = "gpuhealth-collector"
"""The DaemonSet, its ServiceAccount, its headless Service and ServiceMonitor."""
SERVICE = "gpuhealth"
"""The Deployment, its ServiceAccount, Service, PodDisruptionBudget, ClusterRole and ServiceMonitor.
The Service is `gpuhealth`, so the collectors reach it as http://gpuhealth.gpuhealth.svc:8080."""

SCRAPE_JOB_LABEL = "gpuhealth.io/scrape-job"
"""A Service label the ServiceMonitors name as `jobLabel`: Prometheus's job is its value, so the
rules' selectors (alerts/config.py: job="gpuhealth" for the collectors, job="gpuhealth-service"
for the service) hold whatever the Services are called."""
COLLECTOR_JOB = "gpuhealth"
SERVICE_JOB = "gpuhealth-service"


def _default(name: str) -> str:
    """A setting's default, as the code declares it (not as this machine's environment overrides it)."""
    return str(Settings.model_fields[name].default)


COLLECTOR_PORT = parse_listen(_default("listen"))[1]  # 9400, dcgm-exporter's port
SERVICE_PORT = parse_listen(_default("api_listen"))[1]  # 8080
COLLECTOR_SCRAPE_INTERVAL = _default("interval")  # scrape as often as the collector samples (10s)
SERVICE_SCRAPE_INTERVAL = "30s"  # policy: risks change every score interval (5m); 30s keeps `up` alerts prompt
SERVICE_URL = f"http://{SERVICE}.{NAMESPACE}.svc:{SERVICE_PORT}"

PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"
"""Where `serve --source prometheus` pulls from: the Service the Prometheus Operator creates for a
Prometheus in namespace `monitoring` (kube-prometheus). Other installs patch GPUHEALTH_PROMETHEUS_URL."""

SERVICE_REPLICAS = 2  # they split the fleet by hostname on PostgreSQL (service/replicas.py)
RUN_AS_USER = 65532  # the service: any non-root uid works, the image needs no home directory

POSTGRES_SECRET = "gpuhealth-postgres"  # key `url`: postgresql+psycopg://user:password@host/db
POSTGRES_SECRET_KEY = "url"
TOKEN_SECRET = "gpuhealth-token"  # key `token`: the bearer token for the API's writes
TOKEN_SECRET_KEY = "token"
TOKEN_DIR = "/etc/gpuhealth/token"

POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"  # the kubelet's pod-resources socket (REFERENCE.md)
NFD_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"  # NFD's local feature source
GPU_NODE_SELECTOR = {"nvidia.com/gpu.present": "true"}  # set by GPU Feature Discovery (GPU Operator)
RUNTIME_CLASS = "nvidia"  # the NVIDIA container runtime: the GPUs without asking the scheduler for one

OUT_DIR = Path("deploy/kubernetes")
"""Everything: the base and the Components an install without them leaves out."""
BASE_DIR = OUT_DIR / "base"
"""What every install needs: no CRD of another project's."""
COMPONENTS_DIR = OUT_DIR / "components"
RULES_FILE = Path("alerts/generated/gpuhealth-rules.yml")
DASHBOARDS_DIR = Path("dashboards/generated")
NFD_RULE_FILE = Path("deploy/examples/nfd-gpuhealth-rule.yaml")


def labels(component: str) -> dict[str, str]:
    """The recommended labels of every object of a component."""
    return {
        "app.kubernetes.io/name": APP,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": APP,
        "app.kubernetes.io/version": __version__,
    }


def selector(component: str) -> dict[str, str]:
    """The labels a selector matches: stable across versions (a selector is immutable)."""
    return {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": component}


def metadata(
    name: str, component: str, *, namespaced: bool = True, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """An object's metadata: name, namespace (unless cluster-scoped) and the component's labels."""
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = NAMESPACE
    meta["labels"] = {**labels(component), **(extra_labels or {})}
    return meta
