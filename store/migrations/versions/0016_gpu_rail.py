"""Each GPU's InfiniBand/RoCE rail (issue 58): `gpus.ib_rail`, its ports as `device/port` ("mlx5_3/1",
several joined by ", "), so a flapping rail's reason names the port (predictor.fabric).

The collector's rails augmenter ties ports to GPUs (collector.infiniband); fleet mode reads the same
ties from `gpuhealth_infiniband_port_gpu_info` (service.puller). Rows before this have none: their
reasons point to that series instead, as before.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gpus", sa.Column("ib_rail", sa.String(255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpus") as batch:
        batch.drop_column("ib_rail")
