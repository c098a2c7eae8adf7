"""Sample columns for the rest of dcgm-exporter's default counters (issue 17): reserved framebuffer,
NVLink bandwidth, PCIe bytes per second and the vGPU license status.

On PostgreSQL a column added to the partitioned `samples` reaches every partition, and partitions
made later copy the parent (`LIKE samples`).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

REAL, DOUBLE = "real", "double"
METRICS: tuple[tuple[str, str], ...] = (
    ("fb_reserved_mib", REAL),
    ("nvlink_bandwidth_mbps", DOUBLE),  # typed counter, as dcgm-exporter does
    ("pcie_tx_bytes_per_s", REAL),
    ("pcie_rx_bytes_per_s", REAL),
    ("vgpu_license_status", REAL),
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
