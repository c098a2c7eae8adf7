"""Errors the store raises; the API and the CLI turn them into answers and exit codes."""

from __future__ import annotations


class StoreError(Exception):
    """Bad input or a refused operation; the message is one clear line."""


class StoreUnavailable(StoreError):
    """The database cannot be reached (down, refused, locked); retry later (the API answers 503).

    `reason` is the short cause ("connection refused", "database is locked") without the
    database's address: what an API client may be told. The message adds where, for logs.
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message


class NotFound(StoreError):
    """The GPU, node or decision asked for does not exist."""
