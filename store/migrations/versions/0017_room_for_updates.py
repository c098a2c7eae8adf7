"""Room in each page for the rows a scoring round updates (issue 60, decision 0090 run 8): on PostgreSQL,
`gpus` and `decisions` keep half of each page free (fillfactor 50).

Every round points each scored GPU at its new score (`gpus.latest_score_id`) and refreshes each standing
decision's reasons (`decisions.reasons`, `updated_at`). With full pages each new row version goes to
another page and every index of the table gets an entry for it; with room on its page the version
stays there and no index changes (a heap-only tuple update, since neither column is indexed). Measured
on 10,000 GPUs with a standing decision each: the decisions' update 0.20 -> 0.10 s, the GPUs' 0.065
-> 0.017 s. Pages written from now on keep the room; existing ones get it as they are rewritten
(VACUUM FULL or CLUSTER, at an operator's choosing: not here, as it would lock the tables). SQLite
has no such setting: nothing changes there.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

TABLES = ("gpus", "decisions")
FILLFACTOR = 50


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            op.execute(f"ALTER TABLE {table} RESET (fillfactor)")
