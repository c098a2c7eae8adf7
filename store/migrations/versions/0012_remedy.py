"""Each scoring round keeps the remedy beside the decision: what brings the GPU back (`remedy`: none,
reset, reboot, replace) and when (`remedy_when`: idle, now), `predictor.remedy`. Rounds stored before
it have null there.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("risk_scores") as batch:
        batch.add_column(sa.Column("remedy", sa.String(16), nullable=True))
        batch.add_column(sa.Column("remedy_when", sa.String(8), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("risk_scores") as batch:
        batch.drop_column("remedy_when")
        batch.drop_column("remedy")
