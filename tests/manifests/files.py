"""The committed deploy/kubernetes/, parsed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "deploy/kubernetes"


def load(name: str) -> list[dict[str, Any]]:
    """The documents of one file of deploy/kubernetes/."""
    return [d for d in yaml.safe_load_all((OUT / name).read_text()) if d is not None]


def manifest_files() -> list[str]:
    """Every YAML file of deploy/kubernetes/ except the kustomization."""
    return sorted(p.name for p in OUT.glob("*.yaml") if p.name != "kustomization.yaml")


def all_objects() -> list[dict[str, Any]]:
    """Every object of deploy/kubernetes/ (the kustomization excluded)."""
    return [d for name in manifest_files() for d in load(name)]


def one(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object of that kind and name."""
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found
