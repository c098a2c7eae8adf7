"""An optional kustomize Component: the collector reads DCGM from the GPU Operator's nv-hostengine.

With `dcgm.enabled=true` the GPU Operator runs nv-hostengine as its own DaemonSet, `nvidia-dcgm`, behind
a Service of that name on port 5555 (`dcgm`) with `internalTrafficPolicy: Local`: every node's clients
reach that node's engine (assets/state-dcgm/0500_service.yaml in NVIDIA/gpu-operator; its dcgm-exporter
is pointed at it as DCGM_REMOTE_HOSTENGINE_INFO=nvidia-dcgm:5555). The collector runs in its own
namespace, so it names the operator's: `gpu-operator` by default, as the operator's Helm install uses.
Not part of deploy/kubernetes/'s objects: nothing changes unless an overlay adds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core import generated
from manifests import config as c

OPERATOR_NAMESPACE = "gpu-operator"
DCGM_SERVICE = "nvidia-dcgm"
DCGM_PORT = 5555
ADDRESS = f"{DCGM_SERVICE}.{OPERATOR_NAMESPACE}.svc:{DCGM_PORT}"
BACKEND_ENV = "GPUHEALTH_BACKEND"
ADDRESS_ENV = "GPUHEALTH_DCGM_ADDRESS"
"""The settings `backend` and `dcgm_address` (core/settings.py)."""
OUT = c.OUT_DIR / "components" / "gpu-operator-dcgm" / "kustomization.yaml"

HEADER = f"""\
# Generated from manifests/gpu_operator.py by `gpuhealth deploy build`; do not edit by hand.
# Optional: the collector reads the GPU Operator's nv-hostengine (Helm value dcgm.enabled=true), for
# DCGM's profiling fields and health, instead of NVML on its own. deploy/kubernetes/ does not include
# it; an overlay does:
#
#   resources: [../gpuhealth/deploy/kubernetes]
#   components: [../gpuhealth/deploy/kubernetes/components/gpu-operator-dcgm]
#
# It sets {BACKEND_ENV}=dcgm and {ADDRESS_ENV}={ADDRESS}: the operator's Service
# {DCGM_SERVICE} (port {DCGM_PORT}, internalTrafficPolicy Local, so each collector reaches its own node's
# engine) in namespace {OPERATOR_NAMESPACE}. Installed elsewhere? Patch that env value in the overlay.
# The collector's image must then carry DCGM's client: libdcgm.so and its Python bindings (the
# datacenter-gpu-manager package, found under /usr/share/datacenter-gpu-manager-4 or $DCGM_HOME).
# Without them, or while the engine does not answer, the collector exits with one line saying so.
"""


def component() -> dict[str, Any]:
    """The Component: a JSON patch adding the two settings to the collector's first and only container."""
    env = "/spec/template/spec/containers/0/env/-"
    ops = [
        {"op": "add", "path": env, "value": {"name": BACKEND_ENV, "value": "dcgm"}},
        {"op": "add", "path": env, "value": {"name": ADDRESS_ENV, "value": ADDRESS}},
    ]
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "patches": [{"target": {"kind": "DaemonSet", "name": c.COLLECTOR}, "patch": generated.to_yaml(ops)}],
    }


def outputs() -> dict[Path, str]:
    """The component's file (relative to the repository root) and its text."""
    return {OUT: HEADER + generated.to_yaml(component())}
