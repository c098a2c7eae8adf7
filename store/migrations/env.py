"""Alembic environment: runs on the connection the Store hands over (config.attributes["connection"])."""

from __future__ import annotations

from alembic import context

from store.partitions import include_object
from store.schema import metadata

config = context.config


def run_migrations_online() -> None:
    """Migrate on the caller's connection; render_as_batch lets later ALTERs work on SQLite."""
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("store migrations run through store.Store.upgrade(), which passes a connection")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_object=include_object,  # the day partitions of samples are made at ingest
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise RuntimeError("offline (SQL script) migrations are not supported; run `gpuhealth db upgrade`")
run_migrations_online()
