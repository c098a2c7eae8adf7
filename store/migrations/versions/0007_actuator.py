"""The actuator: its audit of planned and applied actions, per-node controls, and its breaker.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "actions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", TZ, nullable=False),
        sa.Column("target", sa.String(32), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=False),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("why", sa.Text, nullable=False),
        sa.Column("gpu_uuid", sa.String(64), nullable=True),
        sa.Column("gpu_index", sa.Integer, nullable=True),
        sa.Column("result", sa.String(16), nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("workloads", sa.JSON, nullable=True),
        sa.Column("escalates", sa.Boolean, nullable=False),
        sa.CheckConstraint(
            "result IN ('planned', 'applied', 'pending', 'failed', 'blocked', 'skipped')", name="ck_actions_result"
        ),
        sa.CheckConstraint("mode IN ('dry-run', 'on')", name="ck_actions_mode"),
    )
    op.create_index("ix_actions_at", "actions", ["at"])
    op.create_index("ix_actions_host_at", "actions", ["hostname", "at"])
    op.create_table(
        "actuator_nodes",
        sa.Column("hostname", sa.String(255), primary_key=True),
        sa.Column("held", sa.Boolean, nullable=False),
        sa.Column("held_by", sa.String(255), nullable=True),
        sa.Column("held_at", TZ, nullable=True),
        sa.Column("released_at", TZ, nullable=True),
        sa.Column("released_by", sa.String(255), nullable=True),
        sa.Column("lowering_since", TZ, nullable=True),
        sa.Column("lowering_to", sa.String(16), nullable=True),
        sa.Column("saved", sa.JSON, nullable=True),
    )
    op.create_table(
        "actuator_state",
        sa.Column("target", sa.String(32), primary_key=True),
        sa.Column("breaker_open", sa.Boolean, nullable=False),
        sa.Column("opened_at", TZ, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("reset_at", TZ, nullable=True),
        sa.Column("reset_by", sa.String(255), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("actuator_state")
    op.drop_table("actuator_nodes")
    op.drop_index("ix_actions_host_at", table_name="actions")
    op.drop_index("ix_actions_at", table_name="actions")
    op.drop_table("actions")
