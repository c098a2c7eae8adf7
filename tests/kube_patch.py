"""Patches for the API server of tests/kube_api.py: strategic merge, RFC 7386 merge and RFC 6902 JSON patch."""

from __future__ import annotations

import json
from typing import Any

from tests.kube_semantics import Obj, StatusError, _bad_request

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
