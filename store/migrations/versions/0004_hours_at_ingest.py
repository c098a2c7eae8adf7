"""Hourly roll-ups kept at ingest: the share of samples thermally throttled, and the raw samples
still stored rolled into their hours (until now only the retention job made hour rows).

An hour row `hour = H` covers the samples in (H, H + 1 h]: a sample on the hour closes the
hour before it, so a fleet sampled hourly and one sampled every 10 s have the same counters
at every hour's end.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("samples_hourly", sa.Column("thermal_throttle_share", sa.Float, nullable=True))
    from store.hours import backfill_hours  # the roll-up the store runs at ingest, over what is stored

    backfill_hours(op.get_bind())


def downgrade() -> None:
    with op.batch_alter_table("samples_hourly") as batch:
        batch.drop_column("thermal_throttle_share")
