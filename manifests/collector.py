"""The per-node collector: a DaemonSet of `gpuhealth collect` on the GPU nodes, and the Service Prometheus scrapes.

Like dcgm-exporter, the collector sees every GPU of its node through the NVIDIA runtime
(`runtimeClassName: nvidia`, NVIDIA_VISIBLE_DEVICES=all) without asking the scheduler for one,
so it never competes with workloads for a GPU and its probes touch only idle GPUs.
"""

from __future__ import annotations

from typing import Any

from manifests import config as c

RESET_NOTE = """\
# GPU reset by the collector (`gpuhealth collect --allow-reset`) is off here, and stays off
# unless you add it: without it every reset request is refused with its reason. To allow it:
#   - add "--allow-reset" to the container's args (or GPUHEALTH_ALLOW_RESET=true);
#   - give the container root with CAP_SYS_ADMIN: nvidia-smi(1) says --gpu-reset "Requires
#     root"; NVIDIA's own reset Job (NVSentinel's janitor) runs privileged. Here: securityContext
#     capabilities add ["SYS_ADMIN"] (untested on hardware) or privileged: true;
#   - nvidia-smi in the container: the NVIDIA runtime mounts the host's with the "utility"
#     driver capability (NVIDIA_DRIVER_CAPABILITIES below); /dev/nvidia* of every GPU come
#     with NVIDIA_VISIBLE_DEVICES=all;
#   - no other process on the GPU: the collector refuses while NVML lists one; the driver
#     refuses ("In use by another client") while the device plugin, DCGM, dcgm-exporter or
#     nvidia-persistenced hold it, and the reset then reports "failed", touching nothing.
# Why, and NVIDIA's NVLink rule for resetting one GPU: docs/decisions/0070-gpu-reset-by-the-node-agent.md.
"""
"""Comment lines at the top of deploy/kubernetes/base/collector.yaml: what a GPU reset needs."""

REMEDIES_NOTE = """\
# Remedies from the service (reset, reboot, verify; docs/collector.md#remedies-from-the-service) are off
# here: reports are writes and the collector has no token. To turn them on, give it the service's write
# token (its GPUHEALTH_TOKEN) from a Secret: env GPUHEALTH_SERVICE_TOKEN with valueFrom secretKeyRef.
# Verifications then run the probes (nothing more is needed); resets need the above; node reboots need
# the Component components/kured-sentinel (GPUHEALTH_REBOOT_SENTINEL and the host folder kured reads).
"""
"""Comment lines at the top of deploy/kubernetes/base/collector.yaml: what the service's remedies need."""

KMSG_NOTE = """\
# XIDs and NVSwitch SXIDs from the kernel log (GPUHEALTH_KERNEL_LOG=/dev/kmsg, on by default) are not
# read here: the container has no /dev/kmsg, and the collector says so once and counts XIDs from
# NVML's events instead. To read the log (untested on a cluster here):
#   - mount the host's /dev/kmsg: a hostPath volume of type CharDevice at /dev/kmsg;
#   - let the container open it: a hostPath does not add the device to the container's device
#     cgroup, so in practice securityContext privileged: true;
#   - CAP_SYSLOG where the host has kernel.dmesg_restrict=1 (sysctl kernel.dmesg_restrict):
#     securityContext capabilities add ["SYSLOG"] (privileged: true includes it);
#   - the cursor across pod restarts: a hostPath directory (DirectoryOrCreate) at /var/lib/gpuhealth;
#     without it a restarted pod counts this boot's XIDs again.
# Or through the host's journal (GPUHEALTH_KERNEL_LOG_SOURCE=auto takes it when /dev/kmsg cannot be
# opened), with no privilege: a read-only hostPath of /var/log/journal (and /run/log/journal where
# journald keeps it in memory) with GPUHEALTH_JOURNAL_DIRECTORY naming it, an image with journalctl,
# and the journal files readable by the container's user (runAsGroup or supplementalGroups: the
# host's systemd-journal group id); the cursor in the same /var/lib/gpuhealth hostPath.
# Why: docs/decisions/0073-xids-from-the-kernel-log.md, docs/decisions/0081-the-kernel-log-through-the-journal.md.
"""
"""Comment lines at the top of deploy/kubernetes/base/collector.yaml: what reading the kernel log needs."""

COMPONENT = "collector"
CONTAINER = "collector"
TMP = "/tmp"  # the probes' child processes write their output there (tempfile), CuPy its kernel cache


def service_account() -> dict[str, Any]:
    """The collector's own identity: it calls no Kubernetes API, so it gets no token."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": c.metadata(c.COLLECTOR, COMPONENT),
        "automountServiceAccountToken": False,
    }


def args() -> list[str]:
    """`gpuhealth collect`, reporting to the central service (its remedies; NFD's labels with components/nfd)."""
    return [
        "collect",
        "--listen", f"0.0.0.0:{c.COLLECTOR_PORT}",
        "--service-url", c.SERVICE_URL,
    ]  # fmt: skip


PRIORITY_CLASS = "system-node-critical"
"""Built into every cluster (no PriorityClass object of ours, no cluster-scoped RBAC to create one), allowed
in any namespace since Kubernetes 1.17, and what the GPU Operator gives its own node agents (nvidia-dcgm):
the kubelet evicts the collector last under memory or disk pressure, when the node's health matters most,
and a full node makes room for it (it asks 100m CPU and 256Mi). Why: docs/decisions/0075-*.md."""


def tolerations() -> list[dict[str, str]]:
    """Every NoSchedule and NoExecute taint, as node-exporter's DaemonSet does: the GPU Operator's
    (nvidia.com/gpu), ours (demoted, drain), a remediation controller's NoExecute drain, an unreachable node's.
    A tainted node is the one whose health the service must keep seeing."""
    return [{"operator": "Exists", "effect": effect} for effect in ("NoSchedule", "NoExecute")]


def _security_context() -> dict[str, Any]:
    # uid 0 without any capability: the kubelet's socket and NFD's features.d (components/nfd) are root's (0755) on the
    # host, and connecting to a socket or writing a file there needs its owner, not privilege.
    return {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsUser": 0,
        "runAsNonRoot": False,
        "capabilities": {"drop": ["ALL"]},
    }


def _probe(path: str, period_s: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "metrics"}, "periodSeconds": period_s, "timeoutSeconds": 5}


def container() -> dict[str, Any]:
    """The collector container: env, port, probes, mounts."""
    return {
        "name": CONTAINER,
        "image": c.COLLECTOR_IMAGE,
        "args": args(),
        "env": [
            # The host label is the node's name, as the actuator and NFD know the node.
            {"name": "GPUHEALTH_HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},  # NVML, and CUDA for probes
            {"name": "CUPY_CACHE_DIR", "value": f"{TMP}/cupy"},
        ],
        "ports": [{"name": "metrics", "containerPort": c.COLLECTOR_PORT, "protocol": "TCP"}],
        "livenessProbe": {**_probe("/healthz", 30), "initialDelaySeconds": 15, "failureThreshold": 3},
        "readinessProbe": _probe("/healthz", 10),
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": _security_context(),
        "volumeMounts": [
            {"name": "pod-resources", "mountPath": c.POD_RESOURCES_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": TMP},
        ],
    }


def daemonset() -> dict[str, Any]:
    """One collector per GPU node."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": c.metadata(c.COLLECTOR, COMPONENT),
        "spec": {
            "selector": {"matchLabels": c.selector(COMPONENT)},
            # A fleet updates 10% of its nodes at a time, not one by one.
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {"labels": c.labels(COMPONENT)},
                "spec": {
                    "serviceAccountName": c.COLLECTOR,
                    "automountServiceAccountToken": False,
                    "runtimeClassName": c.RUNTIME_CLASS,
                    "nodeSelector": dict(c.GPU_NODE_SELECTOR),
                    "tolerations": tolerations(),
                    "priorityClassName": PRIORITY_CLASS,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container()],
                    "volumes": [
                        {"name": "pod-resources", "hostPath": {"path": c.POD_RESOURCES_DIR, "type": "Directory"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                    ],
                },
            },
        },
    }


def service() -> dict[str, Any]:
    """A headless Service over the collectors, for the ServiceMonitor (each pod is a target)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": c.metadata(c.COLLECTOR, COMPONENT, extra_labels={c.SCRAPE_JOB_LABEL: c.COLLECTOR_JOB}),
        "spec": {
            "clusterIP": "None",
            "selector": c.selector(COMPONENT),
            "ports": [{"name": "metrics", "port": c.COLLECTOR_PORT, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }


def objects() -> list[dict[str, Any]]:
    """deploy/kubernetes/base/collector.yaml."""
    return [service_account(), daemonset(), service()]
