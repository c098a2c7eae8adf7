"""Which hour rows changed, for the scorer's window (issue 60): a revision on every hour row.

`hour_revisions` holds one counter. Every transaction that writes hour rows (ingest, `db
import`, the puller) raises it and stamps the rows it writes with the new value
(`store.changes`). The counter's row lock orders the writers, so revisions become visible in
the order they were taken: a scorer that saw revision R has seen every row stamped R or less.
The scorer then reads only the rows stamped after the last revision it saw (the index).

Rows written before this migration have revision 0: a scorer reads its whole window at start-up.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hour_revisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("revision", sa.BigInteger, nullable=False),
    )
    op.execute("INSERT INTO hour_revisions (id, revision) VALUES (1, 0)")
    op.add_column("samples_hourly", sa.Column("revision", sa.BigInteger, nullable=False, server_default="0"))
    op.create_index("ix_samples_hourly_revision", "samples_hourly", ["revision"])


def downgrade() -> None:
    op.drop_index("ix_samples_hourly_revision", table_name="samples_hourly")
    with op.batch_alter_table("samples_hourly") as batch:
        batch.drop_column("revision")
    op.drop_table("hour_revisions")
