"""docs/architecture.md's layer table says what pyproject.toml's import-linter contract checks: the same
layers, top to bottom, with the same packages in each. A package added to the contract, or moved
between layers, fails here until the page says so too."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def contract_layers(pyproject: str) -> list[set[str]]:
    """The `layers` contract's layers, top first, each the set of its packages (`a : b` is one layer)."""
    contracts = tomllib.loads(pyproject)["tool"]["importlinter"]["contracts"]
    (layers,) = (c["layers"] for c in contracts if c["type"] == "layers")
    return [{p.strip() for p in layer.split(":")} for layer in layers]


def table_layers(page: str) -> list[set[str]]:
    """The layer table of the architecture page (its first column names a layer, or is blank for the
    one above; its second names packages as `pkg/`), as the contract's shape."""
    section = page.split("## Layers, one way", 1)[1].split("\n## ", 1)[0]
    out: list[set[str]] = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 2 or cells[0] == "layer" or set(cells[0]) == {"-"}:
            continue  # not a row, the header or the rule under it
        packages = set(re.findall(r"`([a-z_]+)/`", cells[1]))
        if cells[0]:
            out.append(packages)
        elif out:
            out[-1] |= packages
    return out


def test_the_layer_table_is_the_contract() -> None:
    contract = contract_layers((ROOT / "pyproject.toml").read_text())
    table = table_layers((ROOT / "docs" / "architecture.md").read_text())
    assert table == contract, f"docs/architecture.md's layers {table} differ from pyproject.toml's {contract}"


def test_a_layer_missing_from_the_table_is_found() -> None:
    page = (
        "## Layers, one way\n\n| layer | packages | what |\n|---|---|---|\n"
        "| top | `cli/` | x |\n| components | `a/` | y |\n| | `b/` | z |\n\n## Next\n"
    )
    assert table_layers(page) == [{"cli"}, {"a", "b"}]
    pyproject = '[[tool.importlinter.contracts]]\nname = "L"\ntype = "layers"\nlayers = ["cli", "a : b : c"]\n'
    assert contract_layers(pyproject) == [{"cli"}, {"a", "b", "c"}]
    assert table_layers(page) != contract_layers(pyproject)
