"""A small Kubernetes API server for tests: nodes, pods, evictions, PDBs and events, with the apiserver's semantics.

    with KubeApiServer() as server:
        server.add_node("gpu-1", labels={"nvidia.com/gpu.present": "true"})
        kube = client(server)                     # a lightkube.Client on http://127.0.0.1:PORT
        kube.patch(Node, "gpu-1", {"metadata": {"labels": {"drain": "true"}}})

Behaviour follows the Kubernetes sources (kubernetes/kubernetes, kubernetes/api, kubernetes/apimachinery):
Status bodies as apimachinery's pkg/api/errors builds them; one global resourceVersion, bumped by every write
that changes something (etcd's GuaranteedUpdate skips no-op writes); optimistic-lock 409s; updates through the
main resource keep the old status (the node and pod strategies' PrepareForUpdate); strategic merge patch with
the merge keys Node declares (NodeSpec.taints is `+listType=atomic`, so a patch replaces the whole list);
RFC 7386 and RFC 6902 patches (a failed JSON-patch op is a 422, as in the apiserver's patch handler); the
eviction subresource of pkg/registry/core/pod/storage/eviction.go; PDB status computed as
pkg/controller/disruption does (bare pods have no controller scale, so a maxUnavailable or percentage budget
over them expects 0 pods and allows no disruption); legacy Event validation of pkg/apis/core/validation/events.go.

Simplifications, each stated so that no test mistakes it for Kubernetes: deletion is immediate (no graceful
termination, no finalizers): an evicted or deleted pod is gone from the next read. The disruption controller is
instantly up to date (PDB status is computed on every read, so observedGeneration always equals generation).
No watch, no dryRun, no server-side apply, no managedFields, no authentication. A controller's scale is taken as
the number of its pods that exist (there are no ReplicaSets here). Paginated LISTs are served from a snapshot of
the collection, as etcd serves them at the first page's revision; only the 16 newest snapshots are kept, an older
continue token gets 410 Expired as a compacted revision would. There is no status subresource and no kubelet: a
node's status changes only through the test controls, `reboot_node` (a new `status.nodeInfo.bootID`, as a kubelet
posts after a reboot) and `set_node_ready`.

The lightkube client: in lightkube 1.0.1 `KubeConfig.from_server(url)` has no user and `Client` fails with
`AssertionError: Missing user` (client_adapter.httpx_params); `client()` builds the config with an empty `User()`.
`set_down(True)` closes the listening socket and every open connection, so the client raises
`httpx2.ConnectError` (lightkube 1.0.1 is built on httpx2, not httpx): what a stopped apiserver looks like.

What is where: this file holds the HTTP handler and the routing of requests to resources and verbs, the test
controls, `client()` and `main()`. The object store (resourceVersions, create/update strategies, LIST paging over
snapshots, evictions) is tests/kube_store.py. The Kubernetes semantics that need neither the HTTP server nor the
store's lock are beside them: Status errors, resources and selectors in tests/kube_semantics.py, patches in
tests/kube_patch.py, PDB status and the eviction checks in tests/kube_pdb.py, realistic GPU-node labels and status
in tests/kube_nodes.py. Label keys and values are checked on every create and update as ValidateObjectMeta does
(tests/kube_meta.py): a refused one is a 422.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx2
import lightkube
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User

from tests.kube_nodes import _full_status, _gfd_labels, node_info, rebooted, with_ready
from tests.kube_semantics import _RESOURCES, EVENTS, EVENTS_V1, NODES, PDBS, PODS, Obj, Res, StatusError, _now
from tests.kube_store import KubeStore

# -- the server ------------------------------------------------------------------------------------------------


def _route(path: str) -> tuple[Res, str | None, str | None, str | None]:
    """Map a URL path to (resource, namespace, name, subresource), or a 404 Status."""
    parts = [p for p in path.split("/") if p]
    missing = StatusError(404, "NotFound", "the server could not find the requested resource", {})
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis" and parts[2] == "v1":
        group, rest = parts[1], parts[3:]
    else:
        raise missing
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    res = _RESOURCES.get((group, rest[0])) if 1 <= len(rest) <= 3 else None
    if res is None:
        raise missing
    name, sub = [*rest[1:], None, None][:2]
    if (namespace is not None and not res.namespaced) or (namespace is None and res.namespaced and name is not None):
        raise missing
    if sub is not None and (res is not PODS or sub != "eviction"):
        raise missing
    return res, namespace, name, sub


def _verb(method: str, res: Res, namespace: str | None, name: str | None, sub: str | None) -> str:
    """The API verb of a request, or a 405 Status as go-restful answers a method without a route."""
    if sub is not None:
        verb = "evict" if method == "POST" else ""
    elif name is None:
        creatable = namespace is not None or not res.namespaced
        verb = {"GET": "list", "POST": "create" if creatable else "", "DELETE": "deletecollection"}.get(method, "")
    else:
        verb = {"GET": "get", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method, "")
    if verb != "evict" and verb not in res.verbs:
        raise StatusError(
            405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {}
        )
    return verb


class _HttpServer(ThreadingHTTPServer):
    """ThreadingHTTPServer that remembers its open connections, so that set_down can cut them."""

    daemon_threads = True
    api: KubeApiServer

    def __init__(self, address: tuple[str, int], api: KubeApiServer) -> None:
        super().__init__(address, _Handler)
        self.api, self.conns, self.conns_lock = api, set[socket.socket](), threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.conns_lock:
            self.conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.conns_lock:
            self.conns.discard(request)
        super().shutdown_request(request)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small answers on a keep-alive connection must not wait for a delayed ACK
    server: _HttpServer

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip()
        code, payload = self.server.api.handle(self.command, self.path, ctype, body)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a test's output is for its failures."""


class KubeApiServer(KubeStore):
    """A Kubernetes API server on 127.0.0.1 for tests; see the module docstring for what it serves."""

    def __init__(self) -> None:
        super().__init__()
        self._counts: Counter[tuple[str, str]] = Counter()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:41234."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> KubeApiServer:
        """Listen on a free port (the same one again after stop or set_down)."""
        if self._httpd is None:
            self._httpd = _HttpServer(("127.0.0.1", self.port), self)
            self.port = self._httpd.server_address[1]
            self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Close the listening socket and cut every open connection."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with httpd.conns_lock:
            for conn in httpd.conns:
                with contextlib.suppress(OSError):  # already closed by the peer
                    conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> KubeApiServer:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    # -- test controls -----------------------------------------------------------------------------------------

    def set_down(self, down: bool) -> None:
        """Take the API server away (connection refused: httpx2.ConnectError) or bring it back on the same port."""
        if down:
            self.stop()
        else:
            self.start()

    def fail_next_patches(self, n: int) -> None:
        """Answer the next n node PATCH/PUTs with 409 Conflict, as if another writer had raced them."""
        with self._lock:
            self._conflicts = n

    @property
    def counts(self) -> dict[tuple[str, str], int]:
        """Requests per (verb, resource), verbs as apiserver_request_total names them (LIST apart from GET)."""
        with self._lock:
            return dict(self._counts)

    def reset_counts(self) -> None:
        """Forget the request counts."""
        with self._lock:
            self._counts.clear()

    @property
    def resource_version(self) -> int:
        """The current global resourceVersion."""
        return self._rv

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        taints: list[Obj] | None = None,
        unschedulable: bool = False,
        *,
        gpus: int = 8,
        full: bool = False,
    ) -> Obj:
        """Create a Ready node with gpus nvidia.com/gpu of capacity and a `status.nodeInfo.bootID`; `full`: as large
        as a GPU Operator node."""
        meta: Obj = {"name": name, "labels": dict(labels or {})}
        if annotations:
            meta["annotations"] = dict(annotations)
        spec: Obj = {"taints": list(taints)} if taints else {}
        if unschedulable:
            spec["unschedulable"] = True
        gpu = {"nvidia.com/gpu": str(gpus)}
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": _now()}
        status = {"capacity": gpu, "allocatable": dict(gpu), "conditions": [ready], "nodeInfo": node_info()}
        if full:
            meta["labels"] = {**_gfd_labels(name, gpus), **meta["labels"]}
            status = _full_status(name, gpus, ready)
        node = {"kind": "Node", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": status}
        with self._lock:
            return json.loads(self._create(NODES, None, node, trusted=True))

    def reboot_node(self, name: str, *, ready: str = "True") -> str:
        """What a node's kubelet posts when it starts after a reboot: a new bootID and its Ready condition
        ("False": back but not ready yet); returns the new bootID. Pods bound to the node stay bound (the kubelet
        restarts their containers; not modelled), and so do the node's spec and metadata: a reboot uncordons
        nothing."""
        with self._lock:
            node = json.loads(self._store[NODES.qualified][name][1])
            node["status"] = rebooted(node["status"], ready)
            self._put(NODES, node)
        return str(node["status"]["nodeInfo"]["bootID"])

    def set_node_ready(self, name: str, ready: str) -> None:
        """Set a node's Ready condition: "Unknown" as the node lifecycle controller writes it when the kubelet has
        gone silent (a node rebooting), "False" or "True" as the kubelet posts it."""
        with self._lock:
            node = json.loads(self._store[NODES.qualified][name][1])
            node["status"] = with_ready(node["status"], ready)
            self._put(NODES, node)

    def add_pod(
        self,
        namespace: str,
        name: str,
        node: str | None,
        *,
        gpus: int = 1,
        labels: dict[str, str] | None = None,
        phase: str = "Running",
        controller: str | None = None,
        controller_kind: str = "ReplicaSet",
    ) -> Obj:
        """Create a pod bound to node; Running pods are Ready; controller names its owner (a ReplicaSet, or the
        `controller_kind` given: "DaemonSet" for a node agent, which a drain leaves in place)."""
        meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if controller:
            uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{controller}"))
            owner = {
                "apiVersion": "apps/v1",
                "kind": controller_kind,
                "name": controller,
                "uid": uid,
                "controller": True,
            }
            meta["ownerReferences"] = [owner]
        container: Obj = {"name": "main", "image": "registry.k8s.io/pause:3.9"}
        if gpus > 0:  # extended resources: requests default to limits and must equal them
            container["resources"] = {
                "limits": {"nvidia.com/gpu": str(gpus)},
                "requests": {"nvidia.com/gpu": str(gpus)},
            }
        spec: Obj = {"containers": [container], **({"nodeName": node} if node else {})}
        ready = "True" if phase == "Running" else "False"
        status = {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
        pod = {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": status}
        with self._lock:
            return json.loads(self._create(PODS, namespace, pod, trusted=True))

    def add_pdb(
        self,
        namespace: str,
        name: str,
        match_labels: dict[str, str],
        *,
        min_available: int | str | None = None,
        max_unavailable: int | str | None = None,
        unhealthy_pod_eviction_policy: str | None = None,
    ) -> Obj:
        """Create a policy/v1 PodDisruptionBudget; the answer carries its computed status."""
        spec: Obj = {"selector": {"matchLabels": dict(match_labels)}}
        for key, value in (("minAvailable", min_available), ("maxUnavailable", max_unavailable)):
            if value is not None:
                spec[key] = value
        if unhealthy_pod_eviction_policy:
            spec["unhealthyPodEvictionPolicy"] = unhealthy_pod_eviction_policy
        pdb = {"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", "metadata": {"name": name}, "spec": spec}
        with self._lock:
            return json.loads(self._create(PDBS, namespace, pdb))

    def node(self, name: str) -> Obj:
        """A deep copy of the stored node (KeyError if there is none)."""
        with self._lock:
            return json.loads(self._store[NODES.qualified][name][1])

    def pods(self, node: str | None = None) -> list[Obj]:
        """Deep copies of the pods, all or those bound to node, in namespace/name order."""
        with self._lock:
            stored = sorted(self._store[PODS.qualified].items())
            pods = [json.loads(raw) for _, (obj, raw) in stored if node is None or obj["spec"].get("nodeName") == node]
        return pods

    @property
    def events(self) -> list[Obj]:
        """Deep copies of the events of both APIs (core/v1 and events.k8s.io/v1), oldest first."""
        with self._lock:
            raws = [raw for r in (EVENTS, EVENTS_V1) for _, raw in self._store[r.qualified].values()]
        return sorted((json.loads(raw) for raw in raws), key=lambda e: int(e["metadata"]["resourceVersion"]))

    # -- HTTP --------------------------------------------------------------------------------------------------

    def handle(self, method: str, target: str, ctype: str, body: bytes) -> tuple[int, bytes]:
        """Serve one request: (status code, JSON body)."""
        url = urlsplit(target)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        try:
            try:
                res, namespace, name, sub = _route(url.path)
            except StatusError:
                with self._lock:
                    self._counts[(method, "unknown")] += 1
                raise
            label = res.qualified + (f"/{sub}" if sub else "")
            with self._lock:
                self._counts[("LIST" if method == "GET" and name is None else method, label)] += 1
                verb = _verb(method, res, namespace, name, sub)
                if query.get("watch") in ("1", "true") or "dryRun" in query:
                    raise StatusError(405, "MethodNotAllowed", "watch and dryRun are not served by this test server")
                return self._dispatch(verb, res, namespace, name, query, ctype, body)
        except StatusError as err:
            return err.code, json.dumps(err.body()).encode()
        except Exception as exc:  # a bug here must reach the test as an apiserver 500, not a dropped connection
            causes = {"causes": [{"message": str(exc)}]}
            internal = StatusError(500, "InternalError", f"Internal error occurred: {exc!r}", causes)
            return 500, json.dumps(internal.body()).encode()


def client(server: KubeApiServer, *, namespace: str = "default", timeout: float = 10.0) -> lightkube.Client:
    """A lightkube.Client for server: plain HTTP, no credentials, proxies from the environment ignored."""
    # KubeConfig.from_server(url) leaves the user out, and lightkube 1.0.1's client adapter asserts one.
    config = KubeConfig.from_one(cluster=Cluster(server=server.url), user=User(), namespace=namespace)
    return lightkube.Client(config, timeout=httpx2.Timeout(timeout), trust_env=False)


def main() -> None:
    """Serve a cluster in a process of its own (a real API server is another process, with its own GIL):
    `python -m tests.kube_api --nodes 10000 --gpu-pods 300` prints `listening PORT`, serves until killed."""
    import argparse
    import sys
    import time

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--nodes", type=int, default=0)
    ap.add_argument("--gpu-pods", type=int, default=0, help="one GPU pod on each of the first N nodes")
    ap.add_argument("--prefix", default="gpu-")
    ap.add_argument("--small", action="store_true", help="minimal nodes (name, one label, one condition, nodeInfo)")
    a = ap.parse_args()
    server = KubeApiServer()
    for i in range(a.nodes):
        server.add_node(f"{a.prefix}{i:05d}", labels={"nvidia.com/gpu.present": "true"}, full=not a.small)
    for i in range(min(a.gpu_pods, a.nodes)):
        server.add_pod("train", f"job-{i:05d}", f"{a.prefix}{i:05d}", gpus=1)
    server.start()
    print(f"listening {server.port}", flush=True)
    try:
        while sys.stdin.readline():  # until the parent closes our stdin (or kills us)
            time.sleep(0.01)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
