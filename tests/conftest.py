"""Project-wide test options: the golden-file update switch."""

from __future__ import annotations

from pathlib import Path

import pytest


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
