"""Retention for every table: hourly risk roll-ups, and indexes to delete old rows by time.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "risk_scores_hourly",
        sa.Column("gpu_uuid", sa.String(64), sa.ForeignKey("gpus.uuid"), primary_key=True),
        sa.Column("hour", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("risk", sa.Double, nullable=True),
        sa.Column("risk_ecc", sa.Double, nullable=True),
        sa.Column("risk_thermal", sa.Double, nullable=True),
        sa.Column("risk_pcie", sa.Double, nullable=True),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
    )
    op.create_index("ix_risk_scores_hourly_hour", "risk_scores_hourly", ["hour"])
    op.create_index("ix_risk_scores_scored", "risk_scores", ["scored_at"])
    op.create_index("ix_decisions_closed_at", "decisions", ["closed_at"])
    op.create_index("ix_probe_results_ran", "probe_results", ["ran_at"])


def downgrade() -> None:
    op.drop_index("ix_probe_results_ran", "probe_results")
    op.drop_index("ix_decisions_closed_at", "decisions")
    op.drop_index("ix_risk_scores_scored", "risk_scores")
    op.drop_index("ix_risk_scores_hourly_hour", "risk_scores_hourly")
    op.drop_table("risk_scores_hourly")
