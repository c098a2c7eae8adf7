"""Checks of what callers hand the store: each returns the clean value or raises a one-line StoreError.

The store is a boundary (rows come from collectors, the API, the CLI and hooks), so every
public entry point checks its input with these whatever its type hints say.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, overload

import numpy as np
import pandas as pd

from store.errors import StoreError

MAX_LIMIT = 10_000
"""The largest page a listing returns."""


def utc(value: Any, what: str) -> datetime:
    """An aware UTC datetime; naive means UTC (as in history files); anything else is an error."""
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if not isinstance(value, datetime):
        raise StoreError(f"{what} must be a datetime, got {value!r}")
    try:
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset
        raise StoreError(f"{what}: time {value.isoformat()} is out of range") from None


def parse_time(value: Any, what: str) -> datetime:
    """RFC 3339 text (Alertmanager's, with nanoseconds) or a datetime, as aware UTC."""
    if isinstance(value, datetime):
        return utc(value, what)
    if not isinstance(value, str):
        raise StoreError(f"{what} must be an RFC 3339 time, got {value!r}")
    micro = re.sub(r"(\.\d{6})\d+", r"\1", value.strip())  # Go writes nanoseconds; Python takes micro
    try:
        t = datetime.fromisoformat(micro.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise StoreError(f"{what}: invalid time {value!r}; use RFC 3339 (2026-01-31T12:00:00Z)") from None
    return utc(t, what)


def optional_float(value: Any, what: str) -> float | None:
    """A finite float or None (None and NaN mean "unknown")."""
    if value is None:
        return None
    if type(value) is float:  # the usual case first (a round's 60,000 values): float(value) is itself
        f = value
    elif isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise StoreError(f"{what} must be a number or null, got {value!r}")
    else:
        f = float(value)
    if math.isnan(f):
        return None
    if math.isinf(f):
        raise StoreError(f"{what} must be finite, got {value!r}")
    return f


@overload
def text(value: Any, what: str, *, required: Literal[True] = True, max_len: int = 255) -> str: ...
@overload
def text(value: Any, what: str, *, required: bool, max_len: int = 255) -> str | None: ...
def text(value: Any, what: str, *, required: bool = True, max_len: int = 255) -> str | None:
    """A string of at most `max_len` characters; blank or None is None, an error when `required`."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise StoreError(f"{what} is required")
        return None
    if not isinstance(value, str):
        raise StoreError(f"{what} must be a string, got {value!r}")
    if len(value) > max_len:
        raise StoreError(f"{what} is longer than {max_len} characters")
    return value


def non_negative_int(value: Any, what: str) -> int | None:
    """A non-negative integer or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise StoreError(f"{what} must be an integer >= 0, got {value!r}")
    return int(value)


def clean(value: str) -> str:
    """Text without NUL characters: PostgreSQL refuses them in text, SQLite keeps them; both store this."""
    return value.replace("\x00", "") if "\x00" in value else value


def clean_or_none(value: Any) -> str | None:
    """NUL-free text, or None for anything that is not a string."""
    return clean(value) if isinstance(value, str) else None


def string_map(value: Any, what: str) -> dict[str, str]:
    """Labels or annotations as a dict of NUL-free strings; kept whole (the JSON column has no limit)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StoreError(f"{what} must be an object of strings")
    return {clean(str(k)): clean(str(v)) for k, v in value.items()}


def choice(value: Any, allowed: Sequence[str], what: str) -> str:
    """`value` if it is one of `allowed`."""
    if value not in allowed:
        raise StoreError(f"unknown {what} {value!r}; use one of {', '.join(allowed)}")
    return str(value)


def string_list(value: Any, what: str) -> list[str]:
    """A list of strings (reasons); None is empty."""
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence | np.ndarray):
        raise StoreError(f"{what} must be a list of strings, got {value!r}")
    out = list(value)
    if not all(isinstance(r, str) for r in out):
        raise StoreError(f"{what} must be a list of strings, got {value!r}")
    return out


def paging(limit: int, offset: int) -> None:
    """Refuse a page size outside 0..MAX_LIMIT or a negative offset."""
    if not 0 <= limit <= MAX_LIMIT:
        raise StoreError(f"limit must be 0..{MAX_LIMIT}, got {limit}")
    if offset < 0:
        raise StoreError(f"offset must be >= 0, got {offset}")
