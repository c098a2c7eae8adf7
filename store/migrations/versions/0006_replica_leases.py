"""Replicas of `serve --source prometheus` and the leases on the shards of the fleet they split.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("replica_id", sa.String(255), primary_key=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("info", sa.JSON, nullable=True),
    )
    # The rows (one per shard) are written by the first replica that runs (store.leases).
    op.create_table(
        "shard_leases",
        sa.Column("shard", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("scored_round", sa.BigInteger, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("shard_leases")
    op.drop_table("replicas")
