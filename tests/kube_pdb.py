"""PodDisruptionBudgets for the API server of tests/kube_api.py: their status, validation and the eviction checks.

PDB status is computed as pkg/controller/disruption does; the checks of a pods/eviction POST are those of
pkg/registry/core/pod/storage/eviction.go (EvictionREST.Create).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from math import ceil
from typing import Any

from tests.kube_semantics import (
    PDBS,
    Obj,
    StatusError,
    _bad_request,
    _invalid,
    _version_mismatch,
    labels_match,
    selector_requirements,
)


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
