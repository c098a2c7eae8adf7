"""Kubernetes semantics for the API server of tests/kube_api.py: what needs neither its HTTP server nor its store.

Here: Status error bodies (StatusError, with the apiserver's messages for conflicts and expired continue tokens);
the served resources (Res: API coordinates, scope, verbs, field selectors); label and field selectors, parsed and
matched as apimachinery's labels and fields packages do; strategic merge, RFC 7386 merge and RFC 6902 JSON patches;
PDB status as pkg/controller/disruption computes it and the PDB check of the eviction subresource; PDB and legacy
Event validation; and the node labels and status a kubelet, NFD and GPU Feature Discovery write on a GPU node.
Each function takes the objects it needs as arguments. tests/kube_api.py holds the object store, the HTTP handler
and routing, the test controls, `client()` and `main()`; the underscored names here are shared with it alone.
"""

from __future__ import annotations

import json
import re
import secrets
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from math import ceil
from typing import Any

Obj = dict[str, Any]
OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"
EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


class StatusError(Exception):
    """A failure the server answers with a meta/v1 Status body."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def body(self) -> Obj:
        """The Status object, with the field order and omissions of the Go encoder."""
        status: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        status["message"] = self.message
        if self.reason:
            status["reason"] = self.reason
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.code
        return status


def _bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def _invalid(res: Res, name: str, causes: list[tuple[str, str, str]]) -> StatusError:
    """errors.NewInvalid: causes are (type, field, body) as field.Error renders them."""
    texts = [f"{path}: {body}" for _, path, body in causes]
    summary = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    kind = res.kind + (f".{res.group}" if res.group else "")
    details = _details(res, name)
    details["kind"] = res.kind
    details["causes"] = [{"reason": t, "message": body, "field": path} for t, path, body in causes]
    return StatusError(422, "Invalid", f'{kind} "{name}" is invalid: {summary}', details)


def _details(res: Res, name: str) -> Obj:
    details: Obj = {"name": name} if name else {}
    if res.group:
        details["group"] = res.group
    details["kind"] = res.plural
    return details


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _version_mismatch(got: Any, want: str) -> str:
    return f"the API version in the data ({got}) does not match the expected API version ({want})"


@dataclass(frozen=True)
class Res:
    """One served resource: its API coordinates, scope, verbs and supported field selectors."""

    group: str
    plural: str
    kind: str
    namespaced: bool
    verbs: frozenset[str]
    fields: dict[str, Callable[[Obj], str]] = field(default_factory=dict, compare=False, hash=False)

    @property
    def api_version(self) -> str:
        """apiVersion of the objects, e.g. policy/v1."""
        return f"{self.group}/v1" if self.group else "v1"

    @property
    def qualified(self) -> str:
        """GroupResource.String(): what Status messages name, e.g. poddisruptionbudgets.policy."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _dig(*path: str) -> Callable[[Obj], str]:
    def get(obj: Obj) -> str:
        value: Any = obj
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, bool):  # field selectors compare the Go formatting of booleans
            return "true" if value else "false"
        return "" if value is None else str(value)

    return get


def _fields(names: str) -> dict[str, Callable[[Obj], str]]:
    return {name: _dig(*name.split(".")) for name in ("metadata.name metadata.namespace " + names).split()}


# Field selectors: all the apiserver registers for pods (pkg/registry/core/pod/strategy.go), a subset elsewhere.
_POD_FIELDS = _fields(
    "spec.nodeName spec.restartPolicy spec.schedulerName spec.serviceAccountName spec.hostNetwork"
    " status.phase status.podIP status.nominatedNodeName"
)
_EVENT_FIELDS = _fields(
    "involvedObject.kind involvedObject.namespace involvedObject.name involvedObject.uid reason type"
)
_READ = frozenset({"list", "get"})
NODES = Res("", "nodes", "Node", False, _READ | {"create", "patch", "update", "delete"}, _fields("spec.unschedulable"))
PODS = Res("", "pods", "Pod", True, _READ | {"create", "delete"}, _POD_FIELDS)
PDBS = Res("policy", "poddisruptionbudgets", "PodDisruptionBudget", True, _READ | {"create", "delete"}, _fields(""))
EVENTS = Res("", "events", "Event", True, _READ | {"create"}, _EVENT_FIELDS)
EVENTS_V1 = Res("events.k8s.io", "events", "Event", True, _READ | {"create"}, _fields(""))
_RESOURCES = {(r.group, r.plural): r for r in (NODES, PODS, PDBS, EVENTS, EVENTS_V1)}
# Lists whose strategic-merge-patch strategy is "merge" on a Node (kubernetes/api core/v1/types.go,
# apimachinery meta/v1 ObjectMeta): a merge key for lists of maps, None for merged lists of scalars.
# Everything else, NodeSpec.taints included (+listType=atomic), is replaced whole.
_NODE_MERGE_KEYS: dict[tuple[str, ...], str | None] = {
    ("metadata", "ownerReferences"): "uid",
    ("metadata", "finalizers"): None,
    ("spec", "podCIDRs"): None,
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}

# -- selectors -------------------------------------------------------------------------------------------------

Requirement = tuple[str, str, tuple[str, ...]]
_REQ = re.compile(
    r"\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9][-A-Za-z0-9_./]*)\s*"
    r"(?:(?P<op>==|=|!=|>|<)\s*(?P<val>[-A-Za-z0-9_.]*)|\s(?P<set>in|notin)\s*\((?P<vals>[^()]*)\))?\s*"
)


def parse_label_selector(text: str) -> list[Requirement]:
    """Parse a labelSelector (=, ==, !=, in, notin, exists, !exists, >, <) as labels.Parse does."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    reqs: list[Requirement] = []
    for part in parts:
        if not part.strip() and len(parts) == 1:
            break
        m = _REQ.fullmatch(part)
        if m is None or (m["neg"] and (m["op"] or m["set"])):
            raise _bad_request(f"unable to parse requirement: {part.strip()!r}")
        if m["set"]:
            reqs.append((m["key"], m["set"], tuple(v.strip() for v in m["vals"].split(","))))
        elif m["op"]:
            reqs.append((m["key"], {"==": "="}.get(m["op"], m["op"]), (m["val"],)))
        else:
            reqs.append((m["key"], "!" if m["neg"] else "exists", ()))
    return reqs


def selector_requirements(selector: Obj) -> list[Requirement]:
    """A metav1.LabelSelector (matchLabels, matchExpressions) as requirements."""
    reqs: list[Requirement] = [(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append((expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ())))
    return reqs


def labels_match(reqs: list[Requirement], labels: dict[str, str]) -> bool:
    """Whether labels satisfy every requirement; a missing key satisfies != and notin, as in Kubernetes."""
    for key, op, values in reqs:
        have = labels.get(key)
        if (op == "=" and have != values[0]) or (op == "!=" and have == values[0]):
            return False
        if (op == "in" and have not in values) or (op == "notin" and have in values):
            return False
        if (op == "exists" and have is None) or (op == "!" and have is not None):
            return False
        if op in ("<", ">") and not _compares(have, op, values[0]):
            return False
    return True


def _compares(have: str | None, op: str, value: str) -> bool:
    """Gt/Lt requirements: both sides must be integers, else the label does not match."""
    try:
        left, right = int(have or ""), int(value)
    except ValueError:
        return False
    return left > right if op == ">" else left < right


def parse_field_selector(res: Res, text: str) -> list[tuple[Callable[[Obj], str], bool, str]]:
    """Parse a fieldSelector into (getter, equal, value); unknown fields are a 400 as in the apiserver."""
    reqs = []
    for part in filter(None, text.split(",")):
        m = re.fullmatch(r"\s*([^=!]+?)\s*(==|=|!=)\s*(.*?)\s*", part)
        if m is None:
            raise _bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        if m[1] not in res.fields:
            raise _bad_request(f"field label not supported: {m[1]}")
        reqs.append((res.fields[m[1]], m[2] != "!=", m[3]))
    return reqs


# -- patches ---------------------------------------------------------------------------------------------------

_DELETE = object()


def strategic_merge(original: Obj, patch: Obj, path: tuple[str, ...] = ()) -> Any:
    """Strategic merge patch: null deletes, $patch/$retainKeys/$deleteFromPrimitiveList honoured."""
    # $setElementOrder directives are accepted and ignored: they only reorder a merged list.
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    if directive == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    if directive is not None:
        raise _bad_request(f"Unknown patch type: {directive}")
    out = dict(original)
    if "$retainKeys" in patch:
        out = {k: v for k, v in out.items() if k in patch["$retainKeys"]}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            target = key.split("/", 1)[1]
            out[target] = [v for v in out.get(target) or [] if v not in value]
            continue
        sub, current = (*path, key), out.get(key)
        if value is None:
            merged: Any = _DELETE
        elif isinstance(value, dict):
            merged = strategic_merge(current if isinstance(current, dict) else {}, value, sub)
        elif isinstance(value, list) and sub in _NODE_MERGE_KEYS:
            merged = _merge_list(current if isinstance(current, list) else [], value, _NODE_MERGE_KEYS[sub], sub)
        else:
            merged = value
        if merged is _DELETE:
            out.pop(key, None)
        else:
            out[key] = merged
    return out


def _merge_list(original: list[Any], patch: list[Any], merge_key: str | None, path: tuple[str, ...]) -> list[Any]:
    """A list with patchStrategy merge: scalars are unioned, maps merged by their merge key."""
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [item for item in patch if not (isinstance(item, dict) and "$patch" in item)]
    if merge_key is None:
        return original + [v for v in patch if v not in original]
    out = list(original)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise _bad_request(f"map: {item} does not contain declared merge key: {merge_key}")
        at = next((i for i, o in enumerate(out) if isinstance(o, dict) and o.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if at is not None:
                del out[at]
        elif at is None:
            out.append(strategic_merge({}, item, path))
        else:
            out[at] = strategic_merge(out[at], item, path)
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: maps merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _unprocessable() -> StatusError:
    # The apiserver wraps a failed JSON-patch op in NewGenericServerResponse(422, ...), which drops the op's text.
    return StatusError(422, "Invalid", "the server rejected our request due to an error in our request", {})


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise _unprocessable()
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def _locate(doc: Any, tokens: list[str]) -> Any:
    for token in tokens:
        if isinstance(doc, dict) and token in doc:
            doc = doc[token]
        elif isinstance(doc, list) and token.isdigit() and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            raise _unprocessable()
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch: add, remove, replace, move, copy, test."""
    if not isinstance(ops, list) or not all(isinstance(op, dict) and "op" in op for op in ops):
        raise _bad_request("json: cannot unmarshal the patch into jsonpatch.Patch")
    for op in ops:
        kind, tokens = op["op"], _pointer(op.get("path"))
        if kind == "test":
            if _locate(doc, tokens) != op.get("value"):
                raise _unprocessable()
            continue
        if kind in ("move", "copy"):
            value = json.loads(json.dumps(_locate(doc, _pointer(op.get("from")))))
            if kind == "move":
                doc = _remove(doc, _pointer(op.get("from")))
        elif kind in ("add", "replace"):
            if "value" not in op:
                raise _unprocessable()
            value = op["value"]
            if kind == "replace":
                doc = _remove(doc, tokens)
        elif kind == "remove":
            doc = _remove(doc, tokens)
            continue
        else:
            raise _unprocessable()
        doc = _add(doc, tokens, value)
    return doc


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent, last = _locate(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list) and (last == "-" or (last.isdigit() and int(last) <= len(parent))):
        parent.insert(len(parent) if last == "-" else int(last), value)
    else:
        raise _unprocessable()
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return None
    _locate(doc, tokens)  # the target must exist
    parent, last = _locate(doc, tokens[:-1]), tokens[-1]
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[int(last)]
    return doc


# -- PDBs and evictions ----------------------------------------------------------------------------------------


def _ready(pod: Obj) -> bool:
    """podutil.IsPodReady: the Ready condition is True."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)."""
    if isinstance(value, int):
        return value
    return ceil(int(str(value).rstrip("%")) * total / 100)


def _pdb_pods(pdb: Obj, every_pod: list[Obj]) -> list[Obj]:
    """Pods a PDB selects: a null selector selects none, an empty one every pod of the namespace."""
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return []
    reqs, namespace = selector_requirements(selector), pdb["metadata"]["namespace"]
    return [
        o
        for o in every_pod
        if o["metadata"]["namespace"] == namespace and labels_match(reqs, o["metadata"].get("labels") or {})
    ]


def pdb_status(pdb: Obj, every_pod: list[Obj]) -> Obj:
    """The status pkg/controller/disruption would write now (trySync, getExpectedPodCount, countHealthyPods);
    every_pod: all the pods there are, of every namespace."""
    spec, pods = pdb.get("spec") or {}, _pdb_pods(pdb, every_pod)
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    if max_unavailable is not None:
        expected = _expected_scale(pods, every_pod)
        desired = max(expected - _scaled(max_unavailable, expected), 0)
    elif isinstance(min_available, int):
        expected, desired = len(pods), min_available
    elif min_available is not None:
        expected = _expected_scale(pods, every_pod)
        desired = _scaled(min_available, expected)
    else:
        expected = desired = 0
    healthy = sum(1 for p in pods if _ready(p) and not p["metadata"].get("deletionTimestamp"))
    allowed = healthy - desired if expected > 0 and healthy > desired else 0
    generation = pdb["metadata"]["generation"]
    condition = {
        "type": "DisruptionAllowed",
        "status": "True" if allowed > 0 else "False",
        "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
        "message": "",
        "observedGeneration": generation,
        "lastTransitionTime": pdb["metadata"]["creationTimestamp"],
    }
    return {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [condition],
    }


def _expected_scale(pods: list[Obj], every_pod: list[Obj]) -> int:
    """getExpectedScale: the summed scale of the pods' controllers; pods without one count for nothing."""
    controllers = {
        ref["uid"] for p in pods for ref in p["metadata"].get("ownerReferences") or [] if ref.get("controller")
    }
    return sum(  # a controller's scale: its pods that exist (there are no ReplicaSets here to ask)
        1
        for p in every_pod
        for ref in p["metadata"].get("ownerReferences") or []
        if ref.get("controller") and ref["uid"] in controllers
    )


def validate_pdb(pdb: Obj) -> None:
    """The spec checks of a created PDB: minAvailable and maxUnavailable, not both, each an int or percentage."""
    spec, name = pdb.get("spec") or {}, pdb["metadata"]["name"]
    causes = []
    if "minAvailable" in spec and "maxUnavailable" in spec:
        causes.append(
            ("FieldValueInvalid", "spec", 'Invalid value: "": minAvailable and maxUnavailable cannot be both set')
        )
    for key in ("minAvailable", "maxUnavailable"):
        value = spec.get(key)
        if value is not None and not ((isinstance(value, int) and value >= 0) or re.fullmatch(r"\d+%", str(value))):
            causes.append(
                (
                    "FieldValueInvalid",
                    f"spec.{key}",
                    f"Invalid value: {json.dumps(value)}: must be an integer or percentage",
                )
            )
    if causes:
        raise _invalid(PDBS, name, causes)


def check_eviction(ns: str, name: str, body: Any) -> None:
    """The Eviction body of a pods/eviction POST (EvictionREST.Create): version, kind, namespace and name."""
    if not isinstance(body, dict) or body.get("apiVersion") not in ("policy/v1", "policy/v1beta1"):
        version = body.get("apiVersion") if isinstance(body, dict) else None
        raise _bad_request(_version_mismatch(version, "policy/v1"))
    if body.get("kind") != "Eviction":
        raise _bad_request(f"the object provided is unrecognized (must be of type Eviction): kind {body.get('kind')!r}")
    meta = body.get("metadata") or {}
    if meta.get("namespace") not in (None, "", ns):
        raise _bad_request("the namespace of the provided object does not match the namespace sent on the request")
    if meta.get("name") != name:
        raise _bad_request("name in URL does not match name in Eviction object")


def check_budget(pod: Obj, pdbs: Iterable[Obj], status_of: Callable[[Obj], Obj]) -> None:
    """The PDB half of EvictionREST.Create: 500 for two budgets, 429 when the one budget allows no disruption.
    pdbs: all the PDBs there are, of every namespace; status_of: a PDB's status (pdb_status over every pod)."""
    # canIgnorePDB: terminal, Pending and terminating pods are deleted without asking any budget.
    if pod.get("status", {}).get("phase") in ("Succeeded", "Failed", "Pending") or pod["metadata"].get(
        "deletionTimestamp"
    ):
        return
    labels, namespace = pod["metadata"].get("labels") or {}, pod["metadata"]["namespace"]
    matching = [
        pdb
        for pdb in pdbs
        if pdb["metadata"]["namespace"] == namespace
        and (pdb.get("spec") or {}).get("selector") is not None
        and labels_match(selector_requirements(pdb["spec"]["selector"]), labels)
    ]
    if len(matching) > 1:
        message = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
        raise StatusError(500, "", message)
    if not matching:
        return
    pdb, status = matching[0], status_of(matching[0])
    if not _ready(pod):
        if pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
            return
        if status["currentHealthy"] >= status["desiredHealthy"] > 0:  # the unready pod disrupts nothing
            return
    if status["disruptionsAllowed"] == 0:
        text = f"The disruption budget {pdb['metadata']['name']} needs {status['desiredHealthy']} healthy pods"
        cause = {"reason": "DisruptionBudget", "message": f"{text} and has {status['currentHealthy']} currently"}
        message = "Cannot evict pod as it would violate the pod's disruption budget."
        raise StatusError(429, "TooManyRequests", message, {"causes": [cause]})


# -- events ----------------------------------------------------------------------------------------------------


def validate_event(res: Res, event: Obj) -> None:
    """legacyValidateEvent for core/v1; plus ValidateEventCreate's strict rules for events.k8s.io/v1."""
    ns, causes = event["metadata"]["namespace"], []
    involved = event.get("regarding" if res is EVENTS_V1 else "involvedObject") or {}
    involved_ns = involved.get("namespace") or ""
    mismatch = (
        "FieldValueInvalid",
        "involvedObject.namespace",
        f'Invalid value: "{involved_ns}": does not match event.namespace',
    )
    if not event.get("eventTime"):
        if involved_ns != ns and (involved_ns or ns != "default"):
            causes.append(mismatch)
    else:
        if not involved_ns and ns not in ("default", "kube-system"):
            causes.append(mismatch)
        required = ("reportingController", "reportingInstance", "action", "reason")
        sources = {"reportingController": "reportingController" if res is EVENTS_V1 else "reportingComponent"}
        causes += [("FieldValueRequired", f, "Required value") for f in required if not event.get(sources.get(f, f))]
    if res is EVENTS_V1:
        if not event.get("eventTime"):
            causes.append(("FieldValueRequired", "eventTime", "Required value"))
        if event.get("type") not in ("Normal", "Warning"):
            causes.append(
                ("FieldValueInvalid", "type", f'Invalid value: "": has invalid value: {event.get("type", "")}')
            )
    if causes:
        raise _invalid(res, event["metadata"]["name"], causes)


# -- GPU nodes, as a kubelet, NFD and GPU Feature Discovery describe them --------------------------------------


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
        "nodeInfo": {
            "machineID": secrets.token_hex(16),
            "systemUUID": str(uuid.uuid4()),
            "bootID": str(uuid.uuid4()),
            "kernelVersion": "5.15.0-1042-nvidia",
            "osImage": "Ubuntu 22.04.4 LTS",
            "containerRuntimeVersion": "containerd://1.7.13",
            "kubeletVersion": "v1.30.2",
            "kubeProxyVersion": "v1.30.2",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "images": images,
    }
