"""What runs on each GPU now (pods or Slurm jobs), so decisions say which workloads they affect.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_workloads",
        sa.Column("gpu_uuid", sa.String(64), primary_key=True),
        sa.Column("workloads", sa.JSON, nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("gpu_workloads")
