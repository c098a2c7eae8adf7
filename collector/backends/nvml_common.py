"""pynvml's vocabulary, shared by the NVML backend's modules: error codes by name, strings, value unions,
handle addresses (nvidia-ml-py differs between versions in each of these)."""

from __future__ import annotations

import ctypes
from typing import Any

VALUE_MEMBERS_BY_TYPE: dict[str, str] = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
}
"""nvmlValueType_t -> the member of the c_nvmlValue_t union that holds such a value (nvml.h)."""


def value_members(nvml: Any) -> dict[int, str]:
    """nvmlValueType_t value -> c_nvmlValue_t member, for the types this pynvml knows."""
    return {getattr(nvml, k): v for k, v in VALUE_MEMBERS_BY_TYPE.items() if hasattr(nvml, k)}


def codes(nvml: Any, *names: str) -> frozenset[int]:
    """NVML_ERROR_* values by name, skipping names an older pynvml lacks."""
    return frozenset(getattr(nvml, n) for n in names if hasattr(nvml, n))


def absent_codes(nvml: Any) -> frozenset[int]:
    """Errors that mean "this GPU has no such value": the field is simply absent."""
    return codes(
        nvml,
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_NOT_FOUND",
        "NVML_ERROR_NO_DATA",
        "NVML_ERROR_FUNCTION_NOT_FOUND",
        "NVML_ERROR_INVALID_ARGUMENT",
    )


def link_absent_codes(nvml: Any) -> frozenset[int]:
    """Errors of one NVLink link that mean "no such link"."""
    return codes(nvml, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT")


def text(value: object) -> str:
    """A pynvml string: str in nvidia-ml-py 12+, bytes in older versions and some structs."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def one_line(err: BaseException) -> str:
    """An error message squeezed onto one line."""
    return " ".join(str(err).split()) or type(err).__name__


def address(handle: object) -> int | None:
    """The C address behind a device handle: two pynvml handle objects for the same GPU
    compare unequal (ctypes pointers compare by identity), their addresses do not."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value  # type: ignore[arg-type]
    except (ctypes.ArgumentError, TypeError):
        return None
