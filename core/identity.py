"""What a GPU's identity may hold to be stored, said once for every way in (a pull, an import, ingest).

The limits are the store's columns (`store/schema.py`, checked against these by the store's
tests): PostgreSQL refuses a longer string or a NUL character, and its INTEGER is 32 bits.
SQLite would keep any of them, so both backends check here and behave alike.
"""

from __future__ import annotations

UUID_CHARS = 64
"""gpus.uuid, samples.gpu_uuid: String(64)."""
NAME_CHARS = 255
"""gpus.hostname, nodes.hostname, gpus.model_name: String(255)."""
INDEX_MAX = 2**31 - 1
"""gpus.gpu_index is an INTEGER (int32 on PostgreSQL), as the history frame's gpu_index is."""
UNKNOWN_INDEX = -1
"""A history frame's gpu_index when no index is known; the store keeps NULL for it."""

BAD_INDEX = "bad_index"
INDEX_OUT_OF_RANGE = "index_out_of_range"
LABEL_TOO_LONG = "label_too_long"
NUL_BYTE = "nul_byte"
BAD_VALUE = "bad_value"
REASONS = (BAD_INDEX, INDEX_OUT_OF_RANGE, LABEL_TOO_LONG, NUL_BYTE, BAD_VALUE)
"""Why a series or a GPU is left out: an index label no integer reads, an index outside 0..INDEX_MAX
(or -1 for unknown), a name past its column, a NUL character, a value the history cannot hold."""


def problem(uuid: str, index: int, model_name: str, hostname: str) -> tuple[str, str] | None:
    """(reason, what is wrong) where this identity cannot be stored as it is; None where it can."""
    return (
        index_problem(index)
        or text_problem("UUID", uuid, UUID_CHARS)
        or text_problem("model name", model_name, NAME_CHARS)
        or text_problem("hostname", hostname, NAME_CHARS)
    )


def index_problem(index: int) -> tuple[str, str] | None:
    """(reason, what is wrong) for an index outside 0..INDEX_MAX that is not UNKNOWN_INDEX; else None."""
    if UNKNOWN_INDEX <= index <= INDEX_MAX:
        return None
    return INDEX_OUT_OF_RANGE, f"the GPU index {index} is outside 0..{INDEX_MAX} (or {UNKNOWN_INDEX}: unknown)"


def text_problem(what: str, value: str, limit: int) -> tuple[str, str] | None:
    """(reason, what is wrong) for text with a NUL character or over `limit` characters; else None."""
    if "\x00" in value:
        return NUL_BYTE, f"the {what} holds a NUL character"
    if len(value) > limit:
        return LABEL_TOO_LONG, f"the {what} has {len(value)} characters, more than the store's {limit}"
    return None


def shown(value: str, limit: int = 64) -> str:
    """`value` quoted for a log line: escaped (NUL, control characters) and cut to `limit` characters."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}…({len(value)} characters)"
