"""The reference pages name code that exists: each `module.function`, `Class.attribute` and
`GPUHEALTH_*` setting that docs/policy.md, docs/architecture.md and docs/development.md name in
backticks resolves in the code. A function moved or renamed fails here until the page says where
it went (the decision records keep the names of their day and are not checked)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("policy.md", "architecture.md", "development.md")
PACKAGES = ("predictor", "service", "store", "actuate", "core", "collector", "api", "alerts", "simulator")
CLASSES = {  # a class a page names without its module
    "Thresholds": "predictor.thresholds",
    "NodeHeat": "predictor.node",
    "HistoryRounds": "predictor.history_rounds",
    "Store": "store",
    "Decisions": "store.decisions",
    "Lowering": "actuate.plan",
}
CODE = re.compile(r"`([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`")
SETTING = re.compile(r"`(GPUHEALTH_[A-Z_]+)`")


def _module(name: str) -> Any:
    """The module `name` names, as a package of ours or a module of one (`thresholds`: `predictor.thresholds`)."""
    for candidate in (name, *(f"{p}.{name}" for p in PACKAGES)):
        try:
            return importlib.import_module(candidate)
        except ModuleNotFoundError:
            continue
    return None


def resolves(dotted: str) -> bool | None:
    """Whether a dotted name resolves in the code; None where it names no module or class of ours (a file
    name such as `policy.py`, a label such as `gpuhealth.io/state`)."""
    parts = dotted.split(".")
    if parts[-1] in ("py", "md", "toml", "h", "yml", "json"):
        return None
    obj, rest = None, parts
    if parts[0] in CLASSES:
        obj, rest = getattr(importlib.import_module(CLASSES[parts[0]]), parts[0]), parts[1:]
    else:
        for i in range(len(parts), 0, -1):  # the longest prefix that is a module
            obj = _module(".".join(parts[:i]))
            if obj is not None:
                rest = parts[i:]
                break
        if obj is None:
            return None
    for attr in rest:
        fields = getattr(obj, "__dataclass_fields__", {})
        if not hasattr(obj, attr) and attr not in fields:
            return False
        obj = getattr(obj, attr, None)
    return True


def unresolved(text: str) -> list[str]:
    """The code names and settings of a page's text that do not resolve."""
    bad = [name for name in sorted(set(CODE.findall(text))) if resolves(name) is False]
    fields = {f.upper() for f in Settings.model_fields}
    bad += [s for s in sorted(set(SETTING.findall(text))) if s.removeprefix("GPUHEALTH_") not in fields]
    return bad


@pytest.mark.parametrize("page", PAGES)
def test_the_page_names_code_that_exists(page: str) -> None:
    bad = unresolved((ROOT / "docs" / page).read_text())
    assert not bad, f"docs/{page} names what the code does not have: {', '.join(bad)}"


def test_a_renamed_function_or_setting_is_found() -> None:
    text = (
        "`conditions.light_load` `Thresholds.release_level` `policy.decide(carried=…)` `Decisions.drained` "
        "`thresholds.gone_away` `Thresholds.no_such_level` `GPUHEALTH_DEMOTE_FOR` `GPUHEALTH_NO_SUCH` "
        "`policy.py` `gpuhealth.io/state=watch`"
    )
    assert unresolved(text) == ["Thresholds.no_such_level", "thresholds.gone_away", "GPUHEALTH_NO_SUCH"]
