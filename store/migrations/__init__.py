"""Alembic migrations of the store, configured in code (store.store.alembic_config; no alembic.ini)."""
