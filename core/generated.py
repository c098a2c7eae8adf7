"""Generated files (rules, dashboards, docs): write them, or say which ones are stale."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


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
