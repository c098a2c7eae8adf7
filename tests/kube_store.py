"""The object store of the API server of tests/kube_api.py: the verbs on stored objects, as the registry serves them.

One global resourceVersion, bumped by every write that changes something (etcd's GuaranteedUpdate skips no-op
writes); the create and update strategies; optimistic-lock 409s; patches applied by content type; LIST paging over
snapshots of the collection; PDBs rendered with their status; the eviction subresource. KubeApiServer is a
KubeStore, and holds `_lock` around every call into it.
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import uuid
from bisect import bisect_left
from typing import Any

from tests.kube_meta import validate_labels
from tests.kube_patch import json_patch, merge_patch, strategic_merge
from tests.kube_pdb import check_budget, check_eviction, pdb_status, validate_pdb
from tests.kube_semantics import (
    _RESOURCES,
    EVENTS,
    EVENTS_V1,
    EXPIRED,
    NODES,
    OPTIMISTIC_LOCK,
    PDBS,
    PODS,
    Obj,
    Res,
    StatusError,
    _bad_request,
    _details,
    _invalid,
    _now,
    _version_mismatch,
    labels_match,
    parse_field_selector,
    parse_label_selector,
    validate_event,
)

_SNAPSHOTS = 16


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except ValueError as exc:
        raise _bad_request(f"error decoding body: {exc}") from None


class KubeStore:
    """The objects of a test cluster and the verbs on them; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._rv = 0
        self._store: dict[str, dict[str, tuple[Obj, bytes]]] = {r.qualified: {} for r in _RESOURCES.values()}
        self._snapshots: dict[tuple[str, int], list[tuple[str, Obj, bytes]]] = {}
        self._conflicts = 0

    # -- verbs -------------------------------------------------------------------------------------------------

    def _dispatch(
        self, verb: str, res: Res, ns: str | None, name: str | None, query: dict[str, str], ctype: str, body: bytes
    ) -> tuple[int, bytes]:
        if verb == "list":
            return 200, self._list(res, ns, query)
        if verb == "create":
            return 201, self._create(res, ns, _json(body))
        assert name is not None
        if verb == "evict":
            return 201, self._evict(ns or "", name, _json(body))
        key = f"{ns}/{name}" if ns else name
        stored = self._store[res.qualified].get(key)
        if stored is None:
            raise StatusError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))
        old, raw = stored
        if verb == "get":
            return 200, self._render(res, old, raw)
        if verb == "delete":
            del self._store[res.qualified][key]
            self._rv += 1  # a delete is an etcd write, so it moves the revision on
            return 200, raw
        if res is NODES and self._conflicts > 0:
            self._conflicts -= 1
            raise self._conflict(res, name)
        if verb == "update":
            return 200, self._update(res, old, _json(body))
        return 200, self._update(res, old, self._patched(old, raw, ctype, body))

    def _patched(self, old: Obj, raw: bytes, ctype: str, body: bytes) -> Any:
        """The object with the patch applied, by content type."""
        patch = _json(body)
        if ctype == "application/json-patch+json":
            return json_patch(json.loads(raw), patch)
        if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            accepted = (
                "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
            )
            message = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
            raise StatusError(415, "UnsupportedMediaType", message, {})
        if not isinstance(patch, dict):
            raise _bad_request(
                f"json: cannot unmarshal {type(patch).__name__} into Go value of type map[string]interface {{}}"
            )
        return merge_patch(old, patch) if ctype == "application/merge-patch+json" else strategic_merge(old, patch)

    # -- storage -----------------------------------------------------------------------------------------------

    def _conflict(self, res: Res, name: str) -> StatusError:
        message = f'Operation cannot be fulfilled on {res.qualified} "{name}": {OPTIMISTIC_LOCK}'
        return StatusError(409, "Conflict", message, _details(res, name))

    def _put(self, res: Res, obj: Obj) -> bytes:
        """Store obj under a new resourceVersion; stored dicts are never mutated again (LIST snapshots share them)."""
        self._rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._rv)
        raw = json.dumps(obj, separators=(",", ":")).encode()
        self._store[res.qualified][self._key(res, meta)] = (obj, raw)
        return self._render(res, obj, raw)

    def _render(self, res: Res, obj: Obj, raw: bytes) -> bytes:
        """The stored bytes, or for a PDB the object with the status the disruption controller would write."""
        if res is not PDBS:
            return raw
        return json.dumps({**obj, "status": self._pdb_status(obj)}, separators=(",", ":")).encode()

    def _check_type(self, res: Res, obj: Any) -> Obj:
        if not isinstance(obj, dict) or not isinstance(obj.setdefault("metadata", {}), dict):
            raise _bad_request(f"the body is not a {res.kind} object")
        if obj.get("apiVersion", res.api_version) != res.api_version:
            raise _bad_request(_version_mismatch(obj["apiVersion"], res.api_version))
        if obj.get("kind", res.kind) != res.kind:
            raise _bad_request(
                f"the object provided is unrecognized (must be of type {res.kind}): kind {obj['kind']!r}"
            )
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        return obj

    def _create(self, res: Res, ns: str | None, body: Any, *, trusted: bool = False) -> bytes:
        """POST: name or generateName, uid, creationTimestamp; 409 AlreadyExists; per-kind strategy."""
        obj = self._check_type(res, json.loads(json.dumps(body)) if trusted else body)  # the caller keeps its dicts
        meta = obj["metadata"]
        validate_labels(res, obj)
        if ns is not None:
            if meta.get("namespace") not in (None, "", ns):
                raise _bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(
                secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5)
            )
        name = meta.get("name") or ""
        if not name:
            raise _invalid(
                res, "", [("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")]
            )
        if meta.get("resourceVersion"):  # etcd3 store.Create refuses it, and the apiserver reports that as a 500
            raise StatusError(500, "InternalError", "resourceVersion should not be set on objects to be created")
        if (f"{ns}/{name}" if ns else name) in self._store[res.qualified]:
            raise StatusError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name))
        meta["uid"], meta["creationTimestamp"] = str(uuid.uuid4()), _now()
        if res is PODS and not trusted:  # podStrategy.PrepareForCreate: a new pod is Pending until a kubelet runs it
            obj["status"] = {"phase": "Pending"}
        elif res is PDBS:
            validate_pdb(obj)
            meta["generation"] = 1
            obj.pop("status", None)
        elif res in (EVENTS, EVENTS_V1):
            validate_event(res, obj)
        return self._put(res, obj)

    def _update(self, res: Res, old: Obj, new: Any) -> bytes:
        """PUT or the result of a PATCH: optimistic lock, immutable metadata, status kept, no-op writes skipped."""
        obj = self._check_type(res, new)
        # A patch shares untouched subtrees with the stored object, which LIST snapshots also hold: copy what we edit.
        meta, old_meta = obj.setdefault("metadata", {}).copy(), old["metadata"]
        obj["metadata"] = meta
        if meta.get("name", old_meta["name"]) != old_meta["name"]:
            raise _bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({old_meta['name']})"
            )
        if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta["resourceVersion"]:
            raise self._conflict(res, old_meta["name"])
        validate_labels(res, obj)
        for key in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion", "generation"):
            if key in old_meta:
                meta[key] = old_meta[key]
        if "status" in old:  # nodeStrategy/podStrategy.PrepareForUpdate: status changes only via /status
            obj["status"] = old["status"]
        else:
            obj.pop("status", None)
        if obj == old:  # etcd3 GuaranteedUpdate writes nothing, and keeps the resourceVersion, for a no-op
            return self._store[res.qualified][self._key(res, old_meta)][1]
        return self._put(res, obj)

    @staticmethod
    def _key(res: Res, meta: Obj) -> str:
        return f"{meta['namespace']}/{meta['name']}" if res.namespaced else meta["name"]

    # -- LIST ------------------------------------------------------------------------------------------------------

    def _list(self, res: Res, ns: str | None, query: dict[str, str]) -> bytes:
        """LIST with selectors and limit/continue paging over a snapshot, as the etcd3 store pages."""
        labels = parse_label_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(res, query.get("fieldSelector", ""))
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise _bad_request(f"limit: Invalid value: {query['limit']!r}") from None
        if query.get("continue"):
            rv, start = self._decode_continue(query["continue"])
            items = self._snapshots.get((res.qualified, rv))
            if items is None:
                raise StatusError(410, "Expired", EXPIRED)
        else:
            rv, start = self._rv, ""
            items = sorted(((k, o, r) for k, (o, r) in self._store[res.qualified].items()), key=lambda t: t[0])
        prefix = f"{ns}/" if ns else ""
        at = bisect_left(items, max(start, prefix), key=lambda t: t[0])
        end = bisect_left(items, prefix[:-1] + "0", key=lambda t: t[0]) if prefix else len(items)  # "0" follows "/"
        out: list[bytes] = []
        last = start
        while at < end and not (limit and len(out) == limit):
            key, obj, raw = items[at]
            at += 1
            if labels and not labels_match(labels, obj["metadata"].get("labels") or {}):
                continue
            if fields and any((get(obj) == value) != equal for get, equal, value in fields):
                continue
            out.append(self._render(res, obj, raw))
            last = key
        meta: Obj = {"resourceVersion": str(rv)}
        if at < end:  # etcd had more keys in range: the client must come back, even if none of them match
            self._snapshots.setdefault((res.qualified, rv), items)
            while len(self._snapshots) > _SNAPSHOTS:
                del self._snapshots[next(iter(self._snapshots))]
            token = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": last + "\x00"}).encode()
            meta["continue"] = base64.urlsafe_b64encode(token).decode().rstrip("=")
            if not labels and not fields:
                meta["remainingItemCount"] = end - at
        head = {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta}
        return json.dumps(head)[:-1].encode() + b',"items":[' + b",".join(out) + b"]}"

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, str]:
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            return int(decoded["rv"]), str(decoded["start"])
        except (ValueError, KeyError, TypeError) as exc:
            raise _bad_request(f"continue key is not valid: {exc}") from None

    # -- PDBs and evictions ----------------------------------------------------------------------------------------

    def _pdb_status(self, pdb: Obj) -> Obj:
        """The status the disruption controller would write now, over the stored pods (pdb_status)."""
        return pdb_status(pdb, [pod for pod, _ in self._store[PODS.qualified].values()])

    def _evict(self, ns: str, name: str, body: Any) -> bytes:
        """pods/eviction (EvictionREST.Create): the PDB check, then the pod is deleted at once; 201 Success."""
        check_eviction(ns, name, body)
        stored = self._store[PODS.qualified].get(f"{ns}/{name}")
        if stored is None:
            raise StatusError(404, "NotFound", f'pods "{name}" not found', _details(PODS, name))
        check_budget(stored[0], (pdb for pdb, _ in self._store[PDBS.qualified].values()), self._pdb_status)
        del self._store[PODS.qualified][f"{ns}/{name}"]
        self._rv += 1
        return json.dumps(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        ).encode()
