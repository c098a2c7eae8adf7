"""Which hour rows changed: the revision counter writers raise and the scorer's window reads.

Every transaction that writes hour rows (`store.hours.write_hours`: ingest, `db import`, the
puller) takes the next revision from the one-row `hour_revisions` table and stamps the rows it
writes with it (migration 0015). Taking it is an UPDATE: the row stays locked until the
transaction ends, so on PostgreSQL a second writer waits for the first to commit before it
takes a revision of its own. Revisions therefore become visible in the order they were taken,
and a reader that sees revision R sees every row stamped R or less. (A sequence would not do:
a transaction that took 7 and commits after one that took 8 would be missed by a reader that
remembered 8.) On SQLite writers are serialised anyway.

The scorer (`store.window`) remembers the revision it read before its last round's reads and
asks for the hour rows stamped after it (`ix_samples_hourly_revision`).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from store.errors import StoreError

_NEXT = sa.text("UPDATE hour_revisions SET revision = revision + 1 WHERE id = 1 RETURNING revision")
_CURRENT = sa.text("SELECT revision FROM hour_revisions WHERE id = 1")


def next_revision(conn: Connection) -> int:
    """The revision this transaction stamps on the hour rows it writes (held until it ends)."""
    value = conn.execute(_NEXT).scalar_one_or_none()
    if value is None:
        raise StoreError("the hour_revisions row is missing: run `gpuhealth db upgrade`")
    return int(value)


def current_revision(conn: Connection) -> int:
    """The newest revision committed: every hour row stamped with it or less is visible."""
    value = conn.execute(_CURRENT).scalar_one_or_none()
    if value is None:
        raise StoreError("the hour_revisions row is missing: run `gpuhealth db upgrade`")
    return int(value)
