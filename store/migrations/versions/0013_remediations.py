"""The remediation loop's state: one row per GPU's way back (drain, remedy, verify, then returned, rma or
cancelled), kept in the store so that it survives restarts, replicas and scheduler outages
(`store.remediations`, `service.remediation`).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "remediations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("target", sa.String(32), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("gpu_uuid", sa.String(64), nullable=False),
        sa.Column("gpu_index", sa.Integer, nullable=True),
        sa.Column("remedy", sa.String(16), nullable=False),
        sa.Column("due", sa.String(8), nullable=False),
        sa.Column("cause", sa.Text, nullable=False),
        sa.Column("detected_at", TZ, nullable=False),
        sa.Column("opened_at", TZ, nullable=False),
        sa.Column("stage", sa.String(16), nullable=True),
        sa.Column("stage_at", TZ, nullable=True),
        sa.Column("deadline", TZ, nullable=True),
        sa.Column("remedied_at", TZ, nullable=True),
        sa.Column("reboot", sa.JSON, nullable=True),
        sa.Column("verified", sa.JSON, nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("result", sa.String(16), nullable=True),
        sa.Column("closed_at", TZ, nullable=True),
        sa.CheckConstraint("stage IS NULL OR stage IN ('drain', 'remedy', 'verify')", name="ck_remediations_stage"),
        sa.CheckConstraint(
            "result IS NULL OR result IN ('returned', 'rma', 'cancelled')", name="ck_remediations_result"
        ),
        sa.CheckConstraint("remedy IN ('reset', 'reboot')", name="ck_remediations_remedy"),
    )
    op.create_index("ix_remediations_gpu", "remediations", ["gpu_uuid", "opened_at"])
    op.create_index("ix_remediations_host", "remediations", ["hostname", "opened_at"])
    op.create_index("ix_remediations_stage", "remediations", ["stage"])


def downgrade() -> None:
    op.drop_table("remediations")
