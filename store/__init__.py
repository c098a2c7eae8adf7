"""Store: SQLAlchemy models, sessions, migrations and queries (SQLite or PostgreSQL)."""

from store.errors import NotFound, StoreError, StoreUnavailable
from store.retention import Retention
from store.store import CLOCK_SKEW, Store

__all__ = ["CLOCK_SKEW", "NotFound", "Retention", "Store", "StoreError", "StoreUnavailable"]
