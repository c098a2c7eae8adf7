"""Validating custom resources offline against their CRD's schema, as the API server would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def crd_schema(crd_file: Path, group: str, kind: str, version: str) -> dict[str, Any]:
    """The openAPIV3Schema of `version` in a CustomResourceDefinition file (checked to be the right CRD)."""
    crd = yaml.safe_load(crd_file.read_text())
    assert (crd["kind"], crd["spec"]["group"], crd["spec"]["names"]["kind"]) == (
        "CustomResourceDefinition", group, kind)  # fmt: skip
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    assert v["served"] and v["storage"]
    schema: dict[str, Any] = v["schema"]["openAPIV3Schema"]
    return schema


def unknown_fields(value: Any, schema: dict[str, Any], where: str = "") -> list[str]:
    """Fields the API server would prune (a structural schema drops what it does not declare)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict) and "properties" in schema:
        out = [f"{where}.{k}" for k in value if k not in schema["properties"]]
        for k, v in value.items():
            if k in schema["properties"]:
                out += unknown_fields(v, schema["properties"][k], f"{where}.{k}")
        return out
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return [f for k, v in value.items() for f in unknown_fields(v, schema["additionalProperties"], f"{where}.{k}")]
    if isinstance(value, list) and "items" in schema:
        return [f for i, v in enumerate(value) for f in unknown_fields(v, schema["items"], f"{where}[{i}]")]
    return []
