"""Project-wide test options and fixtures: the golden-file update switch, an empty SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Store


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files from the current output instead of comparing",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    """Compare text with a committed golden file (or rewrite it with --update-golden)."""
    update = request.config.getoption("--update-golden")

    def check(path: Path, actual: str) -> None:
        if update or not path.exists():
            if not update:
                pytest.fail(f"golden file {path} is missing: run pytest --update-golden")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(actual)
            return
        expected = path.read_text()
        assert actual == expected, f"output differs from {path}; if intended, run pytest --update-golden"

    return check


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """An empty store on a SQLite file of the test's own (tests/store/ runs its own on PostgreSQL too)."""
    s = Store.open(f"sqlite:///{tmp_path / 'gpuhealth.db'}")
    try:
        yield s
    finally:
        s.close()
