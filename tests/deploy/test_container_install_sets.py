"""The Containerfile's install sets, as pyproject.toml declares them: the collector image takes the
`collector` extra alone, the service image every dependency (docs/deploy.md#container-images)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
HEAVY = ("pandas", "pyarrow", "scipy", "scikit-learn", "matplotlib")  # docs/decisions/0076


def test_the_collector_set_is_a_subset_of_the_dependencies_spelled_the_same() -> None:
    # `pip install gpuhealth` is the whole product: the extra only names what the node agent needs,
    # so a bound raised in `dependencies` must be raised here too, or the images would disagree.
    assert set(PROJECT["optional-dependencies"]["collector"]) <= set(PROJECT["dependencies"])


def test_the_collector_set_has_none_of_the_data_stack() -> None:
    names = {
        spec.split(">")[0].split("<")[0].split("=")[0].split("[")[0]
        for spec in PROJECT["optional-dependencies"]["collector"]
    }
    assert names.isdisjoint(HEAVY)
