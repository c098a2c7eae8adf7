"""Telemetry backends behind one protocol; GPU libraries are imported only inside their module."""

from __future__ import annotations

from collector.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    GpuInfo,
    GpuReading,
    XidEvent,
)

__all__ = [
    "Backend",
    "BackendError",
    "BackendUnavailable",
    "GpuInfo",
    "GpuReading",
    "XidEvent",
]
