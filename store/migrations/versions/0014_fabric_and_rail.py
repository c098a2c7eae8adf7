"""Sample columns for the NVLink fabric and the GPU's InfiniBand rail (issue 58): links down, the
fabric registration's state, and the rail's link downs, which the node findings read
(`predictor.fabric`).

On PostgreSQL a column added to the partitioned `samples` reaches every partition, and partitions
made later copy the parent (`LIKE samples`).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

REAL, DOUBLE = "real", "double"
METRICS: tuple[tuple[str, str], ...] = (
    ("nvlink_links_down", REAL),
    ("gpu_fabric_state", REAL),
    ("ib_rail_link_downed", DOUBLE),  # a counter: exact in double precision
)
TABLES = ("samples", "samples_hourly")


def upgrade() -> None:
    for table in TABLES:
        for name, kind in METRICS:
            op.add_column(table, sa.Column(name, sa.REAL() if kind == REAL else sa.Double(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            for name, _ in reversed(METRICS):
                batch.drop_column(name)
