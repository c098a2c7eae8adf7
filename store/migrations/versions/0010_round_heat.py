"""Each scoring round keeps the core's heat it judged (`heat_z`), so a thermal demote on heat alone
can read how long that heat has held (`predictor.thresholds.heat_held`).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("risk_scores") as batch:
        batch.add_column(sa.Column("heat_z", sa.Double, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("risk_scores") as batch:
        batch.drop_column("heat_z")
