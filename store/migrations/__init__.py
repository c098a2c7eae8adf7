"""Alembic migrations of the store, configured in code (store.engine.alembic_config; no alembic.ini)."""
