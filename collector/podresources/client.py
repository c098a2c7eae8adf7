"""Pods holding GPUs, from the kubelet's pod-resources API (gRPC v1 `PodResourcesLister.List`).

The kubelet serves it on a unix socket to node agents (dcgm-exporter, the device plugins' monitors);
each device the NVIDIA device plugin handed to a container is listed with its resource name
(`nvidia.com/gpu`, or `nvidia.com/mig-<profile>` under the plugin's "mixed" MIG strategy) and its
device ids: GPU UUIDs, or MIG device UUIDs ("MIG-..."); with time-slicing the plugin appends a replica
suffix ("GPU-...::3"). One `List` per sample over a fresh connection (a restarted kubelet makes a new
socket), with a short deadline: a slow kubelet costs one sample its labels, never a scrape.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import grpc

from collector.attribution import AttributionError, DeviceKey
from collector.backends.base import GpuReading
from collector.podresources import api_pb2, api_pb2_grpc

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
"""Where the kubelet serves the pod-resources API (dcgm-exporter's --pod-resources-kubelet-socket default)."""
TIMEOUT_S = 1.0
"""Deadline of one List: the kubelet answers from memory in milliseconds."""
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""The NVIDIA device plugin's resources (dcgm-exporter's appconfig.NvidiaResourceName and NvidiaMigResourcePrefix)."""
REPLICA_SEPARATOR = "::"
"""A time-sliced GPU's device id is "<UUID>::<replica>" (the device plugin's sharing)."""
OLD_MIG_UUID = re.compile(r"MIG-(GPU-[^/]+)/(\d+)/(\d+)")
"""A MIG device's UUID before driver R470: "MIG-<GPU UUID>/<GPU instance ID>/<compute instance ID>"."""


class PodResourcesAttributor:
    """`pod`, `namespace` and `container` of the containers each GPU or MIG instance was handed to."""

    name = "podresources"

    def __init__(self, socket: Path = DEFAULT_SOCKET, timeout_s: float = TIMEOUT_S) -> None:
        self.socket = Path(socket).absolute()
        self.source = str(self.socket)
        self.timeout_s = timeout_s

    def lookup(self, readings: Sequence[GpuReading]) -> dict[DeviceKey, list[dict[str, str]]]:
        """The containers on each device of `readings`; raises AttributionError when the kubelet does not answer."""
        devices = _device_keys(readings)
        out: dict[DeviceKey, list[dict[str, str]]] = {}
        for pod in self._list().pod_resources:
            for container in pod.containers:
                labels = {"pod": pod.name, "namespace": pod.namespace, "container": container.name}
                for dev in container.devices:
                    if dev.resource_name != GPU_RESOURCE and not dev.resource_name.startswith(MIG_RESOURCE_PREFIX):
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


def _device_keys(readings: Sequence[GpuReading]) -> dict[str, DeviceKey]:
    """Device id -> device: a GPU's UUID -> the GPU, a MIG device's UUID -> its GPU instance."""
    keys: dict[str, DeviceKey] = {}
    for r in readings:
        keys[r.info.uuid] = (r.info.uuid, None)
        for m in r.mig:
            if m.instance.uuid:
                keys[m.instance.uuid] = (r.info.uuid, m.instance.gpu_instance_id)
    return keys


def _device(device_id: str, keys: dict[str, DeviceKey]) -> DeviceKey | None:
    """The device a device plugin's id names, if it is one of ours."""
    device_id = device_id.split(REPLICA_SEPARATOR, 1)[0]
    key = keys.get(device_id)
    if key is None and (old := OLD_MIG_UUID.fullmatch(device_id)) is not None and old[1] in keys:
        key = (old[1], int(old[2]))
    return key
