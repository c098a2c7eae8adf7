"""Each scoring round also keeps the core's heat over its node's in its own spread of that
(`heat_vs_node_z`), the second yardstick a thermal demote on heat alone counts a round by
(`predictor.thresholds.heat_counts`). Rounds stored before it have null there: they count by
`heat_z` alone, as they did.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("risk_scores") as batch:
        batch.add_column(sa.Column("heat_vs_node_z", sa.Double, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("risk_scores") as batch:
        batch.drop_column("heat_vs_node_z")
