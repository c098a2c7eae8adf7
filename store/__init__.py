"""Store: SQLAlchemy models, sessions, migrations and queries (SQLite or PostgreSQL)."""

from store.errors import NotFound, StoreError, StoreUnavailable
from store.store import Store

__all__ = ["NotFound", "Store", "StoreError", "StoreUnavailable"]
