"""GPU nodes for the API server of tests/kube_api.py: the labels and status a kubelet, NFD and GPU Feature Discovery
write on one."""

from __future__ import annotations

import secrets
import uuid

from tests.kube_semantics import Obj, _now


def _gfd_labels(name: str, gpus: int) -> dict[str, str]:
    """What kubelet, NFD and GPU Feature Discovery put on a GPU node (their label names, typical values)."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "dgx-h100",
        "topology.kubernetes.io/zone": "zone-a",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "DGX-H100",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "90",
        "nvidia.com/cuda.driver.rev": "07",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": "1764547200",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.deploy.driver": "true",
        "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
        "nvidia.com/gpu.deploy.container-toolkit": "true",
        "nvidia.com/gpu.deploy.operator-validator": "true",
        "nvidia.com/gpu.deploy.node-status-exporter": "true",
        "nvidia.com/gpu.deploy.dcgm": "true",
        "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
        "feature.node.kubernetes.io/kernel-version.full": "5.15.0-1042-nvidia",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/pci-15b3.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        "feature.node.kubernetes.io/rdma.available": "true",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
    }
    return labels


def node_info(boot_id: str | None = None) -> Obj:
    """A kubelet's `status.nodeInfo` (every field of NodeSystemInfo it fills in; lightkube requires them all).
    `bootID` is the kernel's /proc/sys/kernel/random/boot_id, a fresh UUID at every boot."""
    return {
        "machineID": secrets.token_hex(16),
        "systemUUID": str(uuid.uuid4()),
        "bootID": boot_id or str(uuid.uuid4()),
        "kernelVersion": "5.15.0-1042-nvidia",
        "osImage": "Ubuntu 22.04.4 LTS",
        "containerRuntimeVersion": "containerd://1.7.13",
        "kubeletVersion": "v1.30.2",
        "kubeProxyVersion": "v1.30.2",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def _full_status(name: str, gpus: int, ready: Obj) -> Obj:
    """A kubelet's node status of a GPU node: capacity, conditions, addresses, nodeInfo and cached images
    (about 8 kB in all; `kubectl get node -o json` on GPU Operator nodes is commonly 10-30 kB)."""
    res = {
        "cpu": "224",
        "memory": "2113459828Ki",
        "pods": "110",
        "ephemeral-storage": "1844284980Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "nvidia.com/gpu": str(gpus),
        "rdma/rdma_shared_device_a": "63",
    }
    now = _now()
    conditions = [
        {
            "type": t,
            "status": "False",
            "reason": f"KubeletHas{r}",
            "message": f"kubelet has {m}",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for t, r, m in (
            ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "no disk pressure"),
            ("PIDPressure", "SufficientPID", "sufficient PID available"),
        )
    ] + [{**ready, "message": "kubelet is posting ready status", "lastHeartbeatTime": now}]
    images = [
        {
            "names": [f"nvcr.io/nvidia/{img}@sha256:{secrets.token_hex(32)}", f"nvcr.io/nvidia/{img}:v{k}.0"],
            "sizeBytes": 100_000_000 + 7_919 * k,
        }
        for k, img in enumerate(
            [
                "pytorch",
                "tritonserver",
                "k8s/dcgm-exporter",
                "gpu-operator",
                "k8s-device-plugin",
                "gpu-feature-discovery",
                "driver",
                "cuda",
                "nemo",
                "tensorrt",
            ]
            * 3
        )
    ]
    return {
        "capacity": res,
        "allocatable": dict(res),
        "conditions": conditions,
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": node_info(),
        "images": images,
    }


_READY = {
    "True": ("KubeletReady", "kubelet is posting ready status"),
    "False": ("KubeletNotReady", "container runtime network not ready: NetworkReady=false"),
    "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status."),
}
"""The Ready condition's reason and message per status: the kubelet's own (True, False), and the node lifecycle
controller's once the kubelet has been silent for its grace period (Unknown)."""


def with_ready(status: Obj, ready: str, *, restarted: bool = False) -> Obj:
    """`status` with its Ready condition set to `ready` ("True", "False", "Unknown"); the transition time moves
    when the status changes, as the kubelet and the node lifecycle controller keep it, or the kubelet `restarted`."""
    reason, message = _READY[ready]
    now = _now()
    conditions = []
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            moved = restarted or cond.get("status") != ready
            cond = {**cond, "status": ready, "reason": reason, "message": message, "lastHeartbeatTime": now}
            if moved:
                cond["lastTransitionTime"] = now
        conditions.append(cond)
    return {**status, "conditions": conditions}


def rebooted(status: Obj, ready: str = "True") -> Obj:
    """The status a kubelet posts when it starts after a reboot: a new `nodeInfo.bootID` (the kernel's
    /proc/sys/kernel/random/boot_id, a fresh UUID at every boot) and its Ready condition."""
    info = {**(status.get("nodeInfo") or {}), "bootID": str(uuid.uuid4())}
    return with_ready({**status, "nodeInfo": info}, ready, restarted=True)
