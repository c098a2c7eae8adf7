"""The committed deploy/kubernetes/, parsed: base/, the Components, and everything they make together."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "deploy/kubernetes"
BASE = OUT / "base"
COMPONENTS = OUT / "components"
EVERYTHING = ("prometheus-operator", "nfd")
"""The Components deploy/kubernetes/kustomization.yaml adds to base/ (kured-sentinel and gpu-operator-dcgm are not)."""


def load(rel: str) -> list[dict[str, Any]]:
    """The documents of one file of deploy/kubernetes/ (`rel`: e.g. base/collector.yaml)."""
    return [d for d in yaml.safe_load_all((OUT / rel).read_text()) if d is not None]


def generated_files() -> list[str]:
    """Every file under deploy/kubernetes/, relative to it."""
    return sorted(p.relative_to(OUT).as_posix() for p in OUT.rglob("*") if p.is_file())


def _resources(directory: Path) -> list[dict[str, Any]]:
    (k,) = load(f"{directory.relative_to(OUT)}/kustomization.yaml")
    return [d for name in k.get("resources", []) for d in load(f"{directory.relative_to(OUT)}/{name}")]


def base_objects() -> list[dict[str, Any]]:
    """Every object of base/, as its kustomization lists them."""
    return _resources(BASE)


def component_objects(name: str) -> list[dict[str, Any]]:
    """The objects a Component adds (its `resources:`)."""
    return _resources(COMPONENTS / name)


def _add(obj: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """RFC 6902 `add` to the end of a list (`…/-`), all the Components' patches use, in place."""
    for op in ops:
        assert op["op"] == "add" and op["path"].endswith("/-"), op
        node: Any = obj
        for part in op["path"].strip("/").split("/")[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node.append(op["value"])


def with_components(objects: list[dict[str, Any]], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """`objects` with the Components' resources added and their patches applied (as kustomize would)."""
    out = copy.deepcopy(objects) + [d for n in names for d in component_objects(n)]
    for n in names:
        (k,) = load(f"components/{n}/kustomization.yaml")
        for patch in k.get("patches", []):
            target = patch["target"]
            for o in out:
                if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]:
                    _add(o, yaml.safe_load(patch["patch"]))
    return out


def all_objects() -> list[dict[str, Any]]:
    """Every object `kubectl apply -k deploy/kubernetes` installs: base/ and the EVERYTHING Components."""
    return with_components(base_objects(), EVERYTHING)


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object of that kind and name."""
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found
