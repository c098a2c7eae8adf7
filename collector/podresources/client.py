"""Pods holding GPUs, from the kubelet's pod-resources API (gRPC v1 `PodResourcesLister.List`).

The kubelet serves it on a unix socket to node agents (dcgm-exporter, the device plugins' monitors);
each device the NVIDIA device plugin handed to a container is listed with its resource name
(`nvidia.com/gpu`, or `nvidia.com/mig-<profile>` under the plugin's "mixed" MIG strategy) and its
device ids: GPU UUIDs, or MIG device UUIDs ("MIG-..."); with time-slicing the plugin appends a replica
suffix ("GPU-...::3"). Which resource names hold GPUs is a list of patterns (`DEFAULT_RESOURCES`; the setting
`pod_resources_resource_names`), for a plugin configured to rename or share them. GKE's device plugin names
devices by index instead: "nvidia0", "nvidia0/vgpu2" when shared, "nvidia0/gi3" for a MIG instance.
One `List` per sample over a fresh connection (a restarted kubelet makes a new
socket), with a short deadline: a slow kubelet costs one sample its labels, never a scrape.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path

import grpc

from collector.attribution import AttributionError, DeviceKey
from collector.backends.base import GpuReading
from collector.podresources import api_pb2, api_pb2_grpc

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
"""Where the kubelet serves the pod-resources API (dcgm-exporter's --pod-resources-kubelet-socket default)."""
TIMEOUT_S = 1.0
"""Deadline of one List: the kubelet answers from memory in milliseconds."""
DEFAULT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
"""Resource names whose devices are GPUs (shell patterns): the NVIDIA device plugin's whole GPUs, its time-sliced
or MPS-shared ones renamed by default (`nvidia.com/gpu.shared`), and MIG devices under the "mixed" strategy
(`nvidia.com/mig-1g.10gb`, shared: `nvidia.com/mig-1g.10gb.shared`). GKE's plugin uses `nvidia.com/gpu` too."""
REPLICA_SEPARATOR = "::"
"""A time-sliced GPU's device id is "<UUID>::<replica>" (the device plugin's sharing)."""
GKE_SHARED_SEPARATOR = "/vgpu"
"""GKE's shared GPU: "nvidia<index>/vgpu<n>" (dcgm-exporter's gkeVirtualGPUDeviceIDSeparator)."""
OLD_MIG_UUID = re.compile(r"MIG-(GPU-[^/]+)/(\d+)/(\d+)")
"""A MIG device's UUID before driver R470: "MIG-<GPU UUID>/<GPU instance ID>/<compute instance ID>"."""


class PodResourcesAttributor:
    """`pod`, `namespace` and `container` of the containers each GPU or MIG instance was handed to."""

    name = "podresources"

    def __init__(
        self, socket: Path = DEFAULT_SOCKET, timeout_s: float = TIMEOUT_S, resources: Sequence[str] = DEFAULT_RESOURCES
    ) -> None:
        self.socket = Path(socket).absolute()
        self.source = str(self.socket)
        self.timeout_s = timeout_s
        self.resources = tuple(resources)
        """Shell patterns of the resource names whose devices are GPUs."""

    def _is_gpu(self, resource_name: str) -> bool:
        return any(fnmatchcase(resource_name, pattern) for pattern in self.resources)

    def lookup(self, readings: Sequence[GpuReading]) -> dict[DeviceKey, list[dict[str, str]]]:
        """The containers on each device of `readings`; raises AttributionError when the kubelet does not answer."""
        devices = _device_keys(readings)
        out: dict[DeviceKey, list[dict[str, str]]] = {}
        for pod in self._list().pod_resources:
            for container in pod.containers:
                labels = {"pod": pod.name, "namespace": pod.namespace, "container": container.name}
                for dev in container.devices:
                    if not self._is_gpu(dev.resource_name):
                        continue
                    for device_id in dev.device_ids:
                        key = _device(device_id, devices)
                        if key is not None:
                            out.setdefault(key, []).append(labels)
        return out

    def _list(self) -> api_pb2.ListPodResourcesResponse:
        if not os.path.exists(self.socket):
            # Checked first, as dcgm-exporter does: gRPC would otherwise retry the connection until the deadline.
            raise AttributionError(f"kubelet pod-resources socket {self.socket} does not exist")
        try:
            with grpc.insecure_channel(f"unix://{self.socket}") as channel:
                stub = api_pb2_grpc.PodResourcesListerStub(channel)
                response: api_pb2.ListPodResourcesResponse = stub.List(
                    api_pb2.ListPodResourcesRequest(), timeout=self.timeout_s
                )
                return response
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            detail = err.details() if isinstance(err, grpc.Call) else str(err)
            name = code.name if code is not None else "error"
            raise AttributionError(f"kubelet pod-resources List on {self.socket}: {name}: {detail}") from None


def resource_patterns(text: str) -> tuple[str, ...]:
    """The setting's comma-separated resource-name patterns; ValueError (one line) for none or a blank inside one."""
    patterns = tuple(p.strip() for p in text.split(",") if p.strip())
    if not patterns or any(any(c.isspace() for c in p) for p in patterns):
        raise ValueError(
            f"pod-resources resource names must be comma-separated patterns such as {','.join(DEFAULT_RESOURCES)},"
            f" not {text!r}"
        )
    return patterns


def _device_keys(readings: Sequence[GpuReading]) -> dict[str, DeviceKey]:
    """Device id -> device: a GPU's UUID or GKE's "nvidia<index>" -> the GPU, a MIG device's UUID or GKE's
    "nvidia<index>/gi<GPU_I_ID>" -> its GPU instance."""
    keys: dict[str, DeviceKey] = {}
    for r in readings:
        keys[r.info.uuid] = keys[f"nvidia{r.info.index}"] = (r.info.uuid, None)
        for m in r.mig:
            gi = m.instance.gpu_instance_id
            keys[f"nvidia{r.info.index}/gi{gi}"] = (r.info.uuid, gi)
            if m.instance.uuid:
                keys[m.instance.uuid] = (r.info.uuid, gi)
    return keys


def _device(device_id: str, keys: dict[str, DeviceKey]) -> DeviceKey | None:
    """The device a device plugin's id names, if it is one of ours (a share's suffix dropped)."""
    device_id = device_id.split(REPLICA_SEPARATOR, 1)[0].split(GKE_SHARED_SEPARATOR, 1)[0]
    key = keys.get(device_id)
    if key is None and (old := OLD_MIG_UUID.fullmatch(device_id)) is not None and old[1] in keys:
        key = (old[1], int(old[2]))
    return key
