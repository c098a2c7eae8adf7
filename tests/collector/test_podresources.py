"""Pod attribution against a real gRPC server speaking the kubelet's pod-resources API on a unix socket.

The server is grpcio's, serving the generated `PodResourcesListerServicer` from the kubelet's own
api.proto, in this process: what the collector sends and parses is the real wire format.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from collector.attribution import AttributionError
from collector.backends.base import GpuReading, MigInstance, MigReading
from collector.podresources import api_pb2, api_pb2_grpc, generate
from collector.podresources.client import (
    DEFAULT_RESOURCES,
    DEFAULT_SOCKET,
    TIMEOUT_S,
    PodResourcesAttributor,
    resource_patterns,
)
from collector.sampler import Sampler
from tests.collector.helpers import FakeClock, ScriptedBackend, gpu_labels, info, registry
from tests.integration.conftest import require_module

MIG_UUID = "MIG-5c89c4a4-0d4f-5a71-a5c3-6bd25a6f7a1e"


class Kubelet(api_pb2_grpc.PodResourcesListerServicer):
    """The kubelet's side: answers List with `pods`; `delay_s` makes it slow."""

    def __init__(self) -> None:
        self.pods: list[api_pb2.PodResources] = []
        self.delay_s = 0.0
        self.calls = 0

    def List(self, request: api_pb2.ListPodResourcesRequest, context: Any) -> api_pb2.ListPodResourcesResponse:
        self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods)


class Server:
    """A grpcio server for `Kubelet` on a unix socket, stoppable and restartable like a kubelet."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.kubelet = Kubelet()
        self._server: Any = None

    def start(self) -> None:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self.kubelet, self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)  # as a stopped kubelet's socket goes away


@pytest.fixture
def server() -> Iterator[Server]:
    # Unix socket paths are limited to ~107 bytes: a short directory, not pytest's tmp_path.
    directory = Path(tempfile.mkdtemp(prefix="gh-kubelet-"))
    srv = Server(directory / "kubelet.sock")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(directory, ignore_errors=True)


def pod(name: str, namespace: str, *containers: tuple[str, str, list[str]]) -> api_pb2.PodResources:
    """A pod whose containers (name, resource name, device ids) hold devices."""
    return api_pb2.PodResources(
        name=name,
        namespace=namespace,
        containers=[
            api_pb2.ContainerResources(
                name=c, devices=[api_pb2.ContainerDevices(resource_name=resource, device_ids=ids)]
            )
            for c, resource, ids in containers
        ],
    )


def mig_backend() -> ScriptedBackend:
    """Two GPUs; GPU 1 is split, its GPU instance 5 (1g.10gb) is MIG device MIG_UUID."""
    b = ScriptedBackend(2)
    b.values[1] = {"gpu_temp_c": 41.0}
    b.mig[1] = [MigReading(MigInstance(5, "1g.10gb", MIG_UUID), {"fb_used_mib": 812.0})]
    return b


# --- the generated modules are the proto's ---------------------------------------------------------


def test_generated_modules_are_what_the_kubelets_proto_generates() -> None:
    require_module("grpc_tools")  # grpcio-tools (the dev extra) regenerates them
    import grpc_tools

    pinned = (Path(generate.ROOT) / "collector/podresources/api_pb2_grpc.py").read_text()
    version = getattr(grpc_tools, "__version__", None) or _installed("grpcio-tools")
    assert f"GRPC_GENERATED_VERSION = '{version}'" in pinned, (
        f"grpcio-tools {version} is not the pinned one: pip install -e '.[dev]'"
    )
    outputs = generate.generate()
    assert set(outputs) == {generate.PROTO.parent / n for n in generate.OUTPUTS}
    stale = [str(p) for p, text in outputs.items() if (generate.ROOT / p).read_text() != text]
    assert not stale, f"stale: {stale}; run python -m collector.podresources.generate"


def _installed(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def test_the_proto_is_the_kubelets_v1_api() -> None:
    text = (generate.ROOT / generate.PROTO).read_text()
    assert text.startswith("/*\nCopyright The Kubernetes Authors.\n\nLicensed under the Apache License, Version 2.0")
    assert "package v1;" in text and "service PodResourcesLister {" in text
    assert "rpc List(ListPodResourcesRequest) returns (ListPodResourcesResponse) {}" in text
    # The names and numbers the collector reads, as the kubelet puts them on the wire.
    fields = {
        (m.name, f.name): f.number
        for m in api_pb2.DESCRIPTOR.message_types_by_name.values()
        for f in m.fields
    }  # fmt: skip
    assert fields[("ListPodResourcesResponse", "pod_resources")] == 1
    assert (fields[("PodResources", "name")], fields[("PodResources", "namespace")]) == (1, 2)
    assert fields[("PodResources", "containers")] == 3
    assert (fields[("ContainerResources", "name")], fields[("ContainerResources", "devices")]) == (1, 2)
    assert (fields[("ContainerDevices", "resource_name")], fields[("ContainerDevices", "device_ids")]) == (1, 2)
    assert api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"].full_name == "v1.PodResourcesLister"


# --- which container holds which device ----------------------------------------------------------


def test_gpus_mig_devices_and_time_slices_map_to_their_containers(server: Server) -> None:
    b = mig_backend()
    u0 = b.infos[0].uuid
    server.kubelet.pods = [
        pod("train-0", "ml", ("trainer", "nvidia.com/gpu", [u0])),
        pod("infer-7", "serving", ("server", "nvidia.com/mig-1g.10gb", [MIG_UUID])),
        # Time-slicing: the device plugin hands out "<UUID>::<replica>".
        pod("notebook", "dev", ("jupyter", "nvidia.com/gpu", [f"{u0}::3"])),
        # Not a GPU resource, an unknown GPU, and a container without devices: nothing.
        pod("other", "x", ("c", "example.com/fpga", [u0]), ("d", "nvidia.com/gpu", ["GPU-not-on-this-node"])),
        api_pb2.PodResources(name="cpu-only", namespace="x", containers=[api_pb2.ContainerResources(name="c")]),
    ]
    found = PodResourcesAttributor(server.socket).lookup(b.read())
    assert found == {
        (u0, None): [
            {"pod": "train-0", "namespace": "ml", "container": "trainer"},
            {"pod": "notebook", "namespace": "dev", "container": "jupyter"},
        ],
        (b.infos[1].uuid, 5): [{"pod": "infer-7", "namespace": "serving", "container": "server"}],
    }


def test_pre_r470_mig_uuids_name_their_gpu_instance(server: Server) -> None:
    b = mig_backend()
    u1 = b.infos[1].uuid
    server.kubelet.pods = [pod("old", "ml", ("c", "nvidia.com/mig-1g.10gb", [f"MIG-{u1}/5/0"]))]
    found = PodResourcesAttributor(server.socket).lookup(b.read())
    assert found == {(u1, 5): [{"pod": "old", "namespace": "ml", "container": "c"}]}


def test_pod_labels_on_the_gpus_and_the_mig_instances_series(server: Server) -> None:
    b = mig_backend()
    u0 = b.infos[0].uuid
    server.kubelet.pods = [
        pod("train-0", "ml", ("trainer", "nvidia.com/gpu", [u0])),
        pod("infer-7", "serving", ("server", "nvidia.com/mig-1g.10gb", [MIG_UUID])),
    ]
    s = Sampler(b, 10.0, clock=FakeClock(), attributors=[PodResourcesAttributor(server.socket)])
    s.sample_once()
    reg = registry(s, health=True)
    trainer = gpu_labels(b, 0, pod="train-0", namespace="ml", container="trainer")
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", trainer) == 40.0
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0)) is None  # no unlabelled copy
    assert reg.get_sample_value("gpuhealth_gpu_lost", trainer) == 0.0
    # The MIG instance's pod is on the instance's series only; its GPU's own series carry no pod.
    server_labels = gpu_labels(
        b, 1, GPU_I_PROFILE="1g.10gb", GPU_I_ID="5", pod="infer-7", namespace="serving", container="server"
    )
    assert reg.get_sample_value("DCGM_FI_DEV_FB_USED", server_labels) == 812.0
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 1)) == 41.0
    assert reg.get_sample_value("gpuhealth_collector_success", {"collector": "podresources"}) == 1.0
    assert server.kubelet.calls == 1, "one List per sample"


# --- a kubelet that is gone or slow costs labels, never the sample --------------------------------


def test_socket_disappearing_drops_labels_logs_once_and_recovers(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    b = mig_backend()
    u0 = b.infos[0].uuid
    server.kubelet.pods = [pod("train-0", "ml", ("trainer", "nvidia.com/gpu", [u0]))]
    s = Sampler(b, 10.0, clock=FakeClock(), attributors=[PodResourcesAttributor(server.socket)])
    caplog.set_level(logging.INFO, logger="collector.sampler")
    trainer = gpu_labels(b, 0, pod="train-0", namespace="ml", container="trainer")
    assert registry(s, health=True).get_sample_value("DCGM_FI_DEV_GPU_TEMP", trainer) is None  # nothing sampled yet
    s.sample_once()
    assert registry(s, health=True).get_sample_value("DCGM_FI_DEV_GPU_TEMP", trainer) == 40.0

    server.stop()  # the kubelet goes away with its socket
    for _ in range(3):
        snap = s.sample_once()
        assert snap.status["sample"].success and not snap.status["podresources"].success
        assert "does not exist" in (snap.status["podresources"].error or "")
    reg = registry(s, health=True)
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", gpu_labels(b, 0)) == 40.0  # still there, unlabelled
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", trainer) is None
    assert reg.get_sample_value("gpuhealth_collector_success", {"collector": "podresources"}) == 0.0
    assert s.health()[0], "no labels is not an unhealthy collector"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("podresources: no workload labels until it answers")

    server.start()  # the kubelet is back, on a new socket
    s.sample_once()
    assert registry(s, health=True).get_sample_value("DCGM_FI_DEV_GPU_TEMP", trainer) == 40.0
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        "podresources answers again: workload labels are back"
    ]


def test_a_slow_kubelet_times_out_within_a_second(server: Server) -> None:
    server.kubelet.delay_s = 3.0
    b = mig_backend()
    attributor = PodResourcesAttributor(server.socket)
    assert attributor.timeout_s == TIMEOUT_S == 1.0
    t0 = time.monotonic()
    with pytest.raises(AttributionError, match="DEADLINE_EXCEEDED"):
        attributor.lookup(b.read())
    assert time.monotonic() - t0 < TIMEOUT_S + 0.5


def test_a_stale_socket_file_fails_fast() -> None:
    directory = Path(tempfile.mkdtemp(prefix="gh-kubelet-"))
    try:
        stale = directory / "kubelet.sock"
        stale.write_text("")  # the path exists, nothing listens there
        t0 = time.monotonic()
        with pytest.raises(AttributionError, match="UNAVAILABLE"):
            PodResourcesAttributor(stale).lookup([GpuReading(info(0))])
        assert time.monotonic() - t0 < TIMEOUT_S + 0.5
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_the_default_socket_is_the_kubelets() -> None:
    assert Path("/var/lib/kubelet/pod-resources/kubelet.sock") == DEFAULT_SOCKET


def test_lookups_from_the_sampling_thread_while_scrapes_read(server: Server) -> None:
    """The sampler asks on its own thread; scrapes only read the snapshot."""
    b = mig_backend()
    server.kubelet.pods = [pod("train-0", "ml", ("trainer", "nvidia.com/gpu", [b.infos[0].uuid]))]
    s = Sampler(b, 0.05, attributors=[PodResourcesAttributor(server.socket)])
    s.start()
    try:
        assert s.wait_first(5.0)
        done = threading.Event()
        deadline = time.monotonic() + 5.0
        while server.kubelet.calls < 3 and time.monotonic() < deadline:
            done.wait(0.02)
        snap = s.latest
        assert snap is not None and snap.workloads[(b.infos[0].uuid, None)] == (
            {"pod": "train-0", "namespace": "ml", "container": "trainer"},
        )
    finally:
        s.stop()


# --- renamed and shared GPU resources, GKE's device ids -------------------------------------------


def test_shared_and_renamed_resources_are_attributed_by_pattern(server: Server) -> None:
    b = mig_backend()
    u0, u1 = b.infos[0].uuid, b.infos[1].uuid
    server.kubelet.pods = [
        # time-slicing or MPS with renameByDefault: the plugin's ".shared" resources
        pod("slice", "dev", ("a", "nvidia.com/gpu.shared", [f"{u0}::2"])),
        pod("mig-slice", "dev", ("b", "nvidia.com/mig-1g.10gb.shared", [f"{MIG_UUID}::1"])),
        # a resource renamed in the device plugin's config: only with a pattern naming it
        pod("renamed", "dev", ("c", "nvidia.com/a100", [u1])),
    ]
    default = PodResourcesAttributor(server.socket).lookup(b.read())
    assert default == {
        (u0, None): [{"pod": "slice", "namespace": "dev", "container": "a"}],
        (u1, 5): [{"pod": "mig-slice", "namespace": "dev", "container": "b"}],
    }
    mine = PodResourcesAttributor(server.socket, resources=("nvidia.com/a*",)).lookup(b.read())
    assert mine == {(u1, None): [{"pod": "renamed", "namespace": "dev", "container": "c"}]}


def test_gke_device_ids_name_gpus_by_index(server: Server) -> None:
    b = mig_backend()
    u0, u1 = b.infos[0].uuid, b.infos[1].uuid
    # GKE's device plugin: "nvidia<index>", "/vgpu<n>" for a shared GPU, "/gi<GPU_I_ID>" for a MIG instance
    server.kubelet.pods = [
        pod("whole", "ml", ("a", "nvidia.com/gpu", ["nvidia0"])),
        pod("shared", "ml", ("b", "nvidia.com/gpu", ["nvidia0/vgpu3"])),
        pod("mig", "ml", ("c", "nvidia.com/gpu", ["nvidia1/gi5"])),
        pod("mig-shared", "ml", ("d", "nvidia.com/gpu", ["nvidia1/gi5/vgpu0"])),
        pod("gone", "ml", ("e", "nvidia.com/gpu", ["nvidia7", "nvidia1/gi9"])),
    ]
    found = PodResourcesAttributor(server.socket).lookup(b.read())
    assert found == {
        (u0, None): [
            {"pod": "whole", "namespace": "ml", "container": "a"},
            {"pod": "shared", "namespace": "ml", "container": "b"},
        ],
        (u1, 5): [
            {"pod": "mig", "namespace": "ml", "container": "c"},
            {"pod": "mig-shared", "namespace": "ml", "container": "d"},
        ],
    }


def test_the_resource_patterns_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from core.settings import Settings
    from gpuhealth.cli.backend import attributors_from

    assert resource_patterns(Settings().pod_resources_resource_names) == DEFAULT_RESOURCES
    assert DEFAULT_RESOURCES == ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
    monkeypatch.setenv("GPUHEALTH_POD_RESOURCES_RESOURCE_NAMES", " nvidia.com/gpu , example.com/vgpu-* ")
    (found,) = attributors_from("/nonexistent/kubelet.sock", None, Settings())
    assert isinstance(found, PodResourcesAttributor)
    assert found.resources == ("nvidia.com/gpu", "example.com/vgpu-*")
    for bad in ("", " , ", "nvidia.com/gpu,has space"):
        with pytest.raises(ValueError, match="pod-resources resource names"):
            resource_patterns(bad)
