from __future__ import annotations

import pytest

from core.units import parse_duration, parse_listen


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10s", 10.0),
        ("500ms", 0.5),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("7d", 604800.0),
        ("2", 2.0),
        (1.5, 1.5),
    ],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten", "5 parsecs", "-1s", "0s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["0", "0s", "0.0h", 0])
def test_parse_duration_allows_zero_when_asked(text: str | float) -> None:
    assert parse_duration(text, allow_zero=True) == 0.0
    with pytest.raises(ValueError, match="must be positive"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["", "-1s", -1.0, "soon"])
def test_parse_duration_allowing_zero_still_rejects_the_rest(text: str | float) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text, allow_zero=True)


def test_parse_listen() -> None:
    assert parse_listen("0.0.0.0:9400") == ("0.0.0.0", 9400)
    assert parse_listen(":9400") == ("0.0.0.0", 9400)
    assert parse_listen("9400") == ("0.0.0.0", 9400)
    assert parse_listen("[::1]:9401") == ("::1", 9401)
    with pytest.raises(ValueError, match="invalid listen"):
        parse_listen("host:http")
    with pytest.raises(ValueError, match=r"must be 0\.\.65535"):
        parse_listen("host:70000")
