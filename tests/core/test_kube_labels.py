"""Label values from whatever the store holds are valid Kubernetes label values (issue 55.3)."""

from __future__ import annotations

import pytest

from core.kube_labels import UNKNOWN, VALUE_CHARS, is_label_value, label_value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, "3"),
        (0, "0"),
        (-1, UNKNOWN),
        (-7, UNKNOWN),
        (None, UNKNOWN),
        ("demote", "demote"),
        ("", UNKNOWN),
        ("-1", "1"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA_H100_80GB_HBM3"),
        ("node\x00a\n", "node_a"),
        ("..__--", UNKNOWN),
        ("x" * 100, "x" * VALUE_CHARS),
        ("a" * 62 + "-b", "a" * 62),
        ("²", UNKNOWN),
    ],
)
def test_any_stored_value_becomes_a_valid_label_value(value: str | int | None, expected: str) -> None:
    got = label_value(value)
    assert got == expected
    assert is_label_value(got) and len(got) <= VALUE_CHARS


def test_what_the_api_server_refuses() -> None:
    for bad in ("-1", "a b", "x" * 64, "a.", "_a", "é"):
        assert not is_label_value(bad)
    for good in ("", "a", "1", "a-b_c.d", "x" * 63):
        assert is_label_value(good)
