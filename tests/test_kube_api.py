"""The test API server (tests/kube_api.py) speaks Kubernetes as lightkube sees it: verbs, Status errors, conflicts."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import httpx2
import lightkube
import pytest
from lightkube import ApiError
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node, Pod, PodEviction
from lightkube.resources.policy_v1 import PodDisruptionBudget
from lightkube.types import PatchType

from tests.kube_api import KubeApiServer, client
from tests.kube_semantics import labels_match, parse_label_selector


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as api:
        yield api


@pytest.fixture
def kube(server: KubeApiServer) -> Iterator[lightkube.Client]:
    with client(server) as c:
        yield c


def _evict(kube: lightkube.Client, namespace: str, name: str) -> None:
    kube.create(PodEviction(metadata=ObjectMeta(name=name, namespace=namespace)), name=name, namespace=namespace)


def _api_error(call: Callable[[], object]) -> ApiError:
    with pytest.raises(ApiError) as info:
        call()
    return info.value


def test_nodes_are_listed_and_got_with_a_resource_version(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_node("gpu-1", labels={"pool": "a100"})
    server.add_node("gpu-2", labels={"pool": "h100"}, unschedulable=True)
    assert [n.metadata.name for n in kube.list(Node)] == ["gpu-1", "gpu-2"]
    assert [n.metadata.name for n in kube.list(Node, labels={"pool": "h100"})] == ["gpu-2"]
    node = kube.get(Node, "gpu-2")
    assert node.spec.unschedulable is True and node.metadata.resourceVersion == "2" and node.metadata.uid
    error = _api_error(lambda: kube.get(Node, "gpu-9"))
    assert (error.status.code, error.status.reason, error.status.message) == (
        404,
        "NotFound",
        'nodes "gpu-9" not found',
    )
    assert (error.status.details.name, error.status.details.kind) == ("gpu-9", "nodes")


def test_label_selectors_follow_kubernetes_rules() -> None:
    labels = {"pool": "a100", "zone": "b"}
    assert labels_match(parse_label_selector("pool=a100,zone"), labels)
    assert labels_match(parse_label_selector("pool!=h100,!drain,zone in (a, b)"), labels)
    assert labels_match(parse_label_selector("missing!=x,missing notin (x)"), labels)  # absent keys pass != and notin
    assert not labels_match(parse_label_selector("pool in (h100),zone"), labels)


def test_strategic_merge_adds_a_label_and_null_deletes_one(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_node("gpu-1", labels={"keep": "1", "drop": "1"})
    node = kube.patch(Node, "gpu-1", {"metadata": {"labels": {"gpuhealth/state": "suspect", "drop": None}}})
    assert node.metadata.labels == {"keep": "1", "gpuhealth/state": "suspect"}
    assert node.metadata.resourceVersion == "2"
    assert server.node("gpu-1")["metadata"]["labels"] == {"keep": "1", "gpuhealth/state": "suspect"}


def test_a_strategic_merge_patch_replaces_the_taints_list(server: KubeApiServer, kube: lightkube.Client) -> None:
    # NodeSpec.taints is +listType=atomic with no patchStrategy: a taint sent alone replaces every other one.
    server.add_node("gpu-1", taints=[{"key": "other", "effect": "NoSchedule"}])
    taint = {"key": "gpuhealth/failing", "value": "xid79", "effect": "NoExecute"}
    node = kube.patch(Node, "gpu-1", {"spec": {"taints": [taint], "unschedulable": True}})
    assert [t.key for t in node.spec.taints] == ["gpuhealth/failing"] and node.spec.unschedulable is True


def test_merge_and_json_patches(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_node("gpu-1", labels={"a": "1"}, taints=[{"key": "t", "effect": "NoSchedule"}])
    node = kube.patch(Node, "gpu-1", {"metadata": {"labels": {"b": "2"}}}, patch_type=PatchType.MERGE)
    assert node.metadata.labels == {"a": "1", "b": "2"}
    ops = [{"op": "test", "path": "/metadata/labels/a", "value": "1"}, {"op": "remove", "path": "/spec/taints/0"}]
    assert kube.patch(Node, "gpu-1", ops, patch_type=PatchType.JSON).spec.taints == []
    failing = [{"op": "test", "path": "/metadata/labels/a", "value": "2"}]
    error = _api_error(lambda: kube.patch(Node, "gpu-1", failing, patch_type=PatchType.JSON))
    assert (error.status.code, error.status.reason) == (422, "Invalid")


def test_a_no_op_patch_keeps_the_resource_version_and_status_is_not_patchable(
    server: KubeApiServer, kube: lightkube.Client
) -> None:
    server.add_node("gpu-1", labels={"a": "1"})
    assert kube.patch(Node, "gpu-1", {"metadata": {"labels": {"a": "1"}}}).metadata.resourceVersion == "1"
    # nodeStrategy.PrepareForUpdate: the main resource ignores status; conditions change only through /status.
    node = kube.patch(Node, "gpu-1", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    assert node.status.conditions[0].status == "True" and node.metadata.resourceVersion == "1"


def test_a_stale_resource_version_is_a_409_conflict(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_node("gpu-1")
    stale = kube.get(Node, "gpu-1")
    kube.patch(Node, "gpu-1", {"metadata": {"labels": {"x": "1"}}})
    patch = {"metadata": {"resourceVersion": stale.metadata.resourceVersion, "labels": {"y": "1"}}}
    error = _api_error(lambda: kube.patch(Node, "gpu-1", patch))
    assert (error.status.code, error.status.reason) == (409, "Conflict")
    assert error.status.message == (
        'Operation cannot be fulfilled on nodes "gpu-1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert _api_error(lambda: kube.replace(stale)).status.code == 409  # PUT carries the stale version too
    fresh = kube.get(Node, "gpu-1")
    fresh.spec.unschedulable = True
    assert kube.replace(fresh).spec.unschedulable is True
    assert "y" not in server.node("gpu-1")["metadata"]["labels"]


def test_injected_conflicts_answer_the_next_patches(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_node("gpu-1")
    server.fail_next_patches(2)
    for _ in range(2):
        assert _api_error(lambda: kube.patch(Node, "gpu-1", {"spec": {"unschedulable": True}})).status.code == 409
    assert kube.patch(Node, "gpu-1", {"spec": {"unschedulable": True}}).spec.unschedulable is True
    assert server.counts[("PATCH", "nodes")] == 3


def test_pods_are_selected_by_node_and_phase(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_pod("ml", "train-0", "gpu-1", labels={"app": "train"})
    server.add_pod("ml", "done-0", "gpu-1", phase="Succeeded")
    server.add_pod("web", "serve-0", "gpu-2")
    on_node = kube.list(Pod, namespace=lightkube.ALL_NS, fields={"spec.nodeName": "gpu-1"})
    assert [p.metadata.name for p in on_node] == ["done-0", "train-0"]
    fields = {"spec.nodeName": "gpu-1", "status.phase": lightkube.operators.not_equal("Succeeded")}
    assert [p.metadata.name for p in kube.list(Pod, namespace=lightkube.ALL_NS, fields=fields)] == ["train-0"]
    assert [p.metadata.name for p in kube.list(Pod, namespace="web")] == ["serve-0"]
    gpus = server.pods("gpu-2")[0]["spec"]["containers"][0]["resources"]["limits"]
    assert gpus == {"nvidia.com/gpu": "1"}


def test_an_eviction_answers_201_and_removes_the_pod(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_pod("ml", "train-0", "gpu-1")
    _evict(kube, "ml", "train-0")
    assert server.pods() == []
    error = _api_error(lambda: _evict(kube, "ml", "train-0"))
    assert (error.status.code, error.status.message) == (404, 'pods "train-0" not found')


def test_the_raw_eviction_answer_is_a_success_status(server: KubeApiServer) -> None:
    server.add_pod("ml", "train-0", "gpu-1")
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "train-0"}}
    url = f"{server.url}/api/v1/namespaces/ml/pods/train-0/eviction"
    answer = httpx2.post(url, json=body, trust_env=False)
    assert answer.status_code == 201
    assert answer.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    body["metadata"]["name"] = "other"
    assert httpx2.post(url, json=body, trust_env=False).json()["reason"] == "BadRequest"


def test_a_budget_with_min_available_equal_to_the_pods_refuses_eviction(
    server: KubeApiServer, kube: lightkube.Client
) -> None:
    for i in range(2):
        server.add_pod("ml", f"train-{i}", f"gpu-{i}", labels={"app": "train"})
    server.add_pdb("ml", "train", {"app": "train"}, min_available=2)
    error = _api_error(lambda: _evict(kube, "ml", "train-0"))
    assert (error.status.code, error.status.reason) == (429, "TooManyRequests")
    assert error.status.message == "Cannot evict pod as it would violate the pod's disruption budget."
    cause = error.status.details.causes[0]
    assert (cause.reason, cause.message) == (
        "DisruptionBudget",
        "The disruption budget train needs 2 healthy pods and has 2 currently",
    )
    assert len(server.pods()) == 2


def test_a_budget_that_permits_one_disruption_allows_one_eviction(
    server: KubeApiServer, kube: lightkube.Client
) -> None:
    for i in range(3):
        server.add_pod("ml", f"train-{i}", "gpu-1", labels={"app": "train"})
    server.add_pdb("ml", "train", {"app": "train"}, min_available=2)
    assert kube.get(PodDisruptionBudget, "train", namespace="ml").status.disruptionsAllowed == 1
    _evict(kube, "ml", "train-0")
    assert _api_error(lambda: _evict(kube, "ml", "train-1")).status.code == 429
    assert kube.get(PodDisruptionBudget, "train", namespace="ml").status.disruptionsAllowed == 0


def test_budget_edge_cases_follow_the_disruption_controller(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_pod("ml", "bare-0", "gpu-1", labels={"app": "bare"})
    server.add_pod("ml", "bare-1", "gpu-1", labels={"app": "bare"})
    server.add_pdb("ml", "bare", {"app": "bare"}, max_unavailable=1)  # bare pods have no scale: expects 0
    assert _api_error(lambda: _evict(kube, "ml", "bare-0")).status.code == 429
    server.add_pod("ml", "rs-0", "gpu-1", labels={"app": "rs"}, controller="rs")
    server.add_pod("ml", "rs-1", "gpu-1", labels={"app": "rs"}, controller="rs")
    server.add_pdb("ml", "rs", {"app": "rs"}, max_unavailable=1)
    _evict(kube, "ml", "rs-0")
    server.add_pod("ml", "pending", None, labels={"app": "bare"}, phase="Pending")
    _evict(kube, "ml", "pending")  # canIgnorePDB: a Pending pod is deleted without asking the budget
    server.add_pdb("ml", "bare-too", {"app": "bare"}, min_available=0)
    assert _api_error(lambda: _evict(kube, "ml", "bare-1")).status.code == 500  # two budgets select the pod


def test_events_are_created_and_listed(server: KubeApiServer, kube: lightkube.Client) -> None:
    event = Event(
        metadata=ObjectMeta(generateName="gpu-1.", namespace="default"),
        involvedObject=ObjectReference(kind="Node", name="gpu-1", apiVersion="v1"),
        reason="GpuFailing",
        message="XID 79 on GPU 3",
        type="Warning",
        source=EventSource(component="gpuhealth"),
    )
    created = kube.create(event)
    assert created.metadata.name.startswith("gpu-1.") and created.metadata.uid
    assert [e.reason for e in kube.list(Event, namespace="default")] == ["GpuFailing"]
    assert server.events[0]["message"] == "XID 79 on GPU 3"
    elsewhere = Event(
        metadata=ObjectMeta(name="x", namespace="ml"), involvedObject=ObjectReference(kind="Node", name="n")
    )
    error = _api_error(lambda: kube.create(elsewhere))  # a cluster-scoped object's events live in "default"
    assert (error.status.code, error.status.reason) == (422, "Invalid")
    assert error.status.details.causes[0].field == "involvedObject.namespace"


def test_protocol_errors_are_status_bodies(server: KubeApiServer) -> None:
    server.add_node("gpu-1")
    with httpx2.Client(base_url=server.url, trust_env=False) as http:
        bad = http.patch("/api/v1/nodes/gpu-1", content=b"{", headers={"Content-Type": "application/merge-patch+json"})
        assert (bad.status_code, bad.json()["reason"]) == (400, "BadRequest")
        assert http.get("/api/v1/widgets").json()["reason"] == "NotFound"
        assert http.delete("/api/v1/nodes").json() == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "the server does not allow this method on the requested resource",
            "reason": "MethodNotAllowed",
            "details": {},
            "code": 405,
        }


def test_a_down_server_refuses_connections_until_it_is_back(server: KubeApiServer, kube: lightkube.Client) -> None:
    server.add_node("gpu-1")
    kube.get(Node, "gpu-1")  # a pooled keep-alive connection, which set_down must cut too
    server.set_down(True)
    with pytest.raises(httpx2.ConnectError):
        kube.get(Node, "gpu-1")
    server.set_down(False)
    assert kube.get(Node, "gpu-1").metadata.name == "gpu-1"


def test_pagination_serves_a_consistent_snapshot(server: KubeApiServer, kube: lightkube.Client) -> None:
    for i in range(2500):
        server.add_node(f"gpu-{i:04}")
    server.reset_counts()
    pages = iter(kube.list(Node, chunk_size=1000))
    names = [next(pages).metadata.name for _ in range(1000)]
    server.add_node("gpu-0999a")  # written between pages: not in the snapshot the pages are cut from
    names += [n.metadata.name for n in pages]
    assert names == [f"gpu-{i:04}" for i in range(2500)]
    assert server.counts == {("LIST", "nodes"): 3}
    with httpx2.Client(base_url=server.url, trust_env=False) as http:
        first = http.get("/api/v1/nodes", params={"limit": 1000}).json()["metadata"]
        assert first["remainingItemCount"] == 1501
        for i in range(20):  # writes and fresh paginated lists push the first snapshot out
            server.add_node(f"late-{i}")
            http.get("/api/v1/nodes", params={"limit": 1})
        expired = http.get("/api/v1/nodes", params={"limit": 1000, "continue": first["continue"]})
        assert (expired.status_code, expired.json()["reason"]) == (410, "Expired")


def test_listing_ten_thousand_nodes(server: KubeApiServer, kube: lightkube.Client) -> None:
    for i in range(10_000):
        server.add_node(f"gpu-{i:05}", labels={"nvidia.com/gpu.product": "H100"})
    start = time.perf_counter()
    nodes = list(kube.list(Node))
    elapsed = time.perf_counter() - start
    assert len(nodes) == 10_000
    body = json.dumps(server.node("gpu-00000"))
    print(f"\nLIST of 10,000 nodes through lightkube: {elapsed * 1000:.0f} ms ({len(body)} bytes a node)")


def test_concurrent_writers_are_serialised(server: KubeApiServer) -> None:
    server.add_node("gpu-1")

    def label(i: int) -> None:
        with client(server) as kube:
            for j in range(10):
                kube.patch(Node, "gpu-1", {"metadata": {"labels": {f"w{i}-{j}": "1"}}})

    threads = [threading.Thread(target=label, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    node = server.node("gpu-1")
    assert len(node["metadata"]["labels"]) == 40 and node["metadata"]["resourceVersion"] == "41"


def test_an_invalid_label_is_refused_with_422(server: KubeApiServer, kube: lightkube.Client) -> None:
    """ValidateObjectMeta's labels check, on update (a patch) and on create; the node stays as it was."""
    server.add_node("gpu-1")
    for value, why in [
        ("-1", "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.'"),
        ("x" * 64, "must be no more than 63 characters"),
        ("a b", "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?'"),
    ]:
        patch = {"metadata": {"labels": {"gpuhealth.io/gpu": value}}}
        error = _api_error(lambda p=patch: kube.patch(Node, "gpu-1", p, patch_type=PatchType.STRATEGIC))
        assert (error.status.code, error.status.reason) == (422, "Invalid")
        assert error.status.message.startswith(f'Node "gpu-1" is invalid: metadata.labels: Invalid value: "{value}": ')
        assert why in error.status.message
        assert error.status.details.causes[0].field == "metadata.labels"
    assert "gpuhealth.io/gpu" not in (kube.get(Node, "gpu-1").metadata.labels or {})
    error = _api_error(lambda: kube.patch(Node, "gpu-1", {"metadata": {"labels": {"-bad/key": "x"}}}))
    assert error.status.code == 422 and 'Invalid value: "-bad/key"' in error.status.message
    error = _api_error(lambda: kube.create(Node(metadata=ObjectMeta(name="gpu-2", labels={"a": "-"}))))
    assert error.status.code == 422
    kube.patch(Node, "gpu-1", {"metadata": {"labels": {"gpuhealth.io/gpu": "unknown", "empty": ""}}})
    assert kube.get(Node, "gpu-1").metadata.labels["gpuhealth.io/gpu"] == "unknown"


def test_a_node_has_a_boot_id_and_a_reboot_posts_a_new_one(server: KubeApiServer, kube: lightkube.Client) -> None:
    """status.nodeInfo.bootID is set at creation, one per node; a reboot posts a new one and Ready again, and
    leaves the node's spec (its cordon) and metadata as they were; the main resource cannot write it."""
    server.add_node("gpu-1", unschedulable=True)
    server.add_node("gpu-2", full=True)
    one, two = kube.get(Node, "gpu-1"), kube.get(Node, "gpu-2")
    assert one.status.nodeInfo.bootID != two.status.nodeInfo.bootID
    kube.patch(Node, "gpu-1", {"status": {"nodeInfo": {"bootID": "forged"}}})
    assert kube.get(Node, "gpu-1").status.nodeInfo.bootID == one.status.nodeInfo.bootID
    server.set_node_ready("gpu-1", "Unknown")
    (down,) = kube.get(Node, "gpu-1").status.conditions
    assert (down.status, down.reason) == ("Unknown", "NodeStatusUnknown")
    new = server.reboot_node("gpu-1")
    up = kube.get(Node, "gpu-1")
    assert new == up.status.nodeInfo.bootID != one.status.nodeInfo.bootID
    assert (up.status.conditions[0].status, up.status.conditions[0].reason) == ("True", "KubeletReady")
    assert up.spec.unschedulable is True and int(up.metadata.resourceVersion) > int(one.metadata.resourceVersion)
    assert up.status.nodeInfo.machineID == one.status.nodeInfo.machineID  # the same machine, booted again
    server.reboot_node("gpu-2", ready="False")
    ready = [c for c in kube.get(Node, "gpu-2").status.conditions if c.type == "Ready"]
    assert [(c.status, c.reason) for c in ready] == [("False", "KubeletNotReady")]
