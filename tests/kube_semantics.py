"""Kubernetes semantics for the API server of tests/kube_api.py: what needs neither its HTTP server nor its store.

Here: Status error bodies (StatusError, with the apiserver's messages for conflicts and expired continue tokens);
the served resources (Res: API coordinates, scope, verbs, field selectors); label and field selectors, parsed and
matched as apimachinery's labels and fields packages do; and legacy Event validation. Beside it: patches in
tests/kube_patch.py, PDB status and the eviction checks in tests/kube_pdb.py, ObjectMeta validation in
tests/kube_meta.py, the labels and status of a GPU node in tests/kube_nodes.py. Each function takes the objects it
needs as arguments. tests/kube_api.py holds the HTTP handler and routing, the test controls, `client()` and
`main()`, tests/kube_store.py the object store; the underscored names here are shared with those files alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
