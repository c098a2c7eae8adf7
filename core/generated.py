"""Generated files (rules, dashboards, docs, manifests): write them, say which ones are stale, and the
one YAML style they are written in."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (PromQL, dashboard JSON read best that way); no anchors for
    values that happen to be shared."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|" if "\n" in data else None)


_Dumper.add_representer(str, _str)


def to_yaml(obj: Any) -> str:
    """Stable YAML: keys in the order given, block strings, no line wrapping, no anchors."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True, default_flow_style=False)


def write(outputs: Mapping[Path, str], root: Path) -> list[Path]:
    """Write every file of `outputs` (path relative to `root` -> text); return the paths written."""
    written = []
    for rel, text in outputs.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def stale(outputs: Mapping[Path, str], root: Path) -> list[Path]:
    """The files of `outputs` that are missing under `root` or differ from what was generated."""
    return [rel for rel, text in outputs.items() if not (root / rel).is_file() or (root / rel).read_text() != text]
