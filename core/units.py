"""Parsing of the human units the CLI and settings accept (durations, listen addresses)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str | float, allow_zero: bool = False) -> float:
    """Seconds from "500ms", "10s", "5m", "1h", "7d", "2w" or a bare number of seconds.

    A duration must be positive; with `allow_zero`, zero ("0", "0s", "0.0h") is one too, for
    settings where 0 means "off" or "at once"."""
    if isinstance(text, int | float):
        seconds = float(text)
    else:
        m = _DURATION.match(text)
        if not m:
            raise ValueError(f"invalid duration {text!r}: use e.g. 10s, 5m, 1h, 7d")
        seconds = float(m.group(1)) * _SECONDS[m.group(2) or "s"]
    if seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"duration must be positive, got {text!r}")
    return seconds


def parse_listen(text: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """(host, port) from "0.0.0.0:9400", ":9400", "[::1]:9400" or "9400"."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    host = host.strip("[]") or default_host
    try:
        p = int(port)
    except ValueError:
        raise ValueError(f"invalid listen address {text!r}: use HOST:PORT, e.g. 0.0.0.0:9400") from None
    if not 0 <= p <= 65535:
        raise ValueError(f"invalid port {p} in {text!r}: must be 0..65535")
    return host, p
