"""PostgreSQL: raw samples partitioned by time, one partition per UTC day (SQLite: no change).

The rows move into a new partitioned `samples`: the old table is renamed, the new parent and the
partitions its rows need are created, the rows are copied, the old table is dropped, and the
primary key and the time index are built last (once per partition, faster than during the copy).
Downgrade copies the rows back into a plain table.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from datetime import date

from alembic import op

from store.partitions import create_sql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

OLD = "samples_unpartitioned"

# The distinct UTC days of the old rows, one index probe per day (a loose index scan), oldest first.
_DAYS_SQL = f"""
WITH RECURSIVE d(day) AS (
    SELECT date_trunc('day', min("timestamp") AT TIME ZONE 'UTC') FROM {OLD}
    UNION ALL
    SELECT (SELECT date_trunc('day', min("timestamp") AT TIME ZONE 'UTC') FROM {OLD}
            WHERE "timestamp" >= ((d.day + interval '1 day') AT TIME ZONE 'UTC'))
    FROM d WHERE d.day IS NOT NULL
)
SELECT day::date FROM d WHERE day IS NOT NULL
"""


def _keys(table: str) -> None:
    op.execute(f'ALTER TABLE {table} ADD CONSTRAINT samples_pkey PRIMARY KEY (gpu_uuid, "timestamp")')
    op.execute(f'CREATE INDEX ix_samples_timestamp ON {table} ("timestamp")')


def _move_aside() -> None:
    op.execute(f"ALTER TABLE samples RENAME TO {OLD}")
    op.execute(f"ALTER TABLE {OLD} RENAME CONSTRAINT samples_pkey TO {OLD}_pkey")
    op.execute(f"ALTER INDEX ix_samples_timestamp RENAME TO ix_{OLD}_timestamp")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _move_aside()
    op.execute(f'CREATE TABLE samples (LIKE {OLD} INCLUDING DEFAULTS) PARTITION BY RANGE ("timestamp")')
    bind = op.get_bind()
    days: list[date] = list(bind.exec_driver_sql(_DAYS_SQL).scalars())
    for day in days:
        for stmt in create_sql(day):
            bind.exec_driver_sql(stmt)
    op.execute(f"INSERT INTO samples SELECT * FROM {OLD}")
    op.execute(f"DROP TABLE {OLD}")
    _keys("samples")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _move_aside()
    op.execute(f"CREATE TABLE samples (LIKE {OLD} INCLUDING DEFAULTS)")
    op.execute(f"INSERT INTO samples SELECT * FROM {OLD}")
    op.execute(f"DROP TABLE {OLD}")  # and its partitions
    _keys("samples")
