"""Errors the store raises; the API and the CLI turn them into answers and exit codes."""

from __future__ import annotations


class StoreError(Exception):
    """Bad input or a refused operation; the message is one clear line."""


class StoreUnavailable(StoreError):
    """The database cannot be reached (down, refused, locked); retry later (the API answers 503)."""


class NotFound(StoreError):
    """The GPU, node or decision asked for does not exist."""
