"""Kubernetes label values made from what the store holds: valid whatever it holds.

The API server refuses a node patch whose label value is not a valid one (422 Invalid), and NFD
drops such a line: a value it refuses would keep our marks off the node at every pass. The
actuator's labels (`actuate.kubernetes`) and the NFD feature file (`collector.nfd`) both go
through `label_value`.
"""

from __future__ import annotations

import re

VALUE_CHARS = 63
"""apimachinery's LabelValueMaxLength."""
VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
"""apimachinery's labelValueFmt (IsValidLabelValue): empty, or alphanumerics with -_. inside."""
UNKNOWN = "unknown"
"""What a label says for a GPU index nobody knows (None in the store, -1 in a history or an older store)."""
_OUTSIDE = re.compile(r"[^-A-Za-z0-9_.]+")


def is_label_value(text: str) -> bool:
    """Whether the API server takes `text` as a label value."""
    return len(text) <= VALUE_CHARS and VALUE.fullmatch(text) is not None


def label_value(value: str | int | None) -> str:
    """`value` as a valid label value.

    None and a negative integer (a GPU index of -1) are "unknown"; other text keeps its letters,
    digits, `-`, `_` and `.`, every other run of characters becomes `_`, it is cut to 63 characters
    and loses what is not alphanumeric at either end; text with nothing left is "unknown".
    """
    if value is None or (isinstance(value, int) and value < 0):
        return UNKNOWN
    text = str(value)
    if is_label_value(text) and text:
        return text
    text = _OUTSIDE.sub("_", text)[:VALUE_CHARS].strip("-_.")
    return text or UNKNOWN
