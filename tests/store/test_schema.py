"""Migrations create exactly the schema the code describes, and it follows the catalogue."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from core import catalog
from store import Store
from store.engine import alembic_config
from store.partitions import include_object
from store.schema import METRIC_COLUMNS, metadata, samples, samples_hourly


def test_migrations_match_the_models(store: Store) -> None:
    """`alembic check`: upgrading to head leaves nothing for autogenerate to add or change."""
    with store._engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": include_object})
        diff = compare_metadata(context, metadata)
    assert diff == [], f"store/schema.py and the migrations differ; add a migration for: {diff}"
    assert store.revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_sample_columns_follow_the_catalogue() -> None:
    """Every catalogue field is a sample column; a new field fails here until a migration adds it."""
    assert set(METRIC_COLUMNS) == {f.name for f in catalog.FIELDS}
    assert METRIC_COLUMNS[: len(catalog.HISTORY_COLUMNS)] == catalog.HISTORY_COLUMNS
    for table, after in ((samples, []), (samples_hourly, ["thermal_throttle_share"])):
        names = [c.name for c in table.columns]
        assert names[-len(METRIC_COLUMNS) - len(after) :] == [*METRIC_COLUMNS, *after]
    script = ScriptDirectory.from_config(alembic_config())
    migrated: list[tuple[str, str]] = []
    for rev in reversed(list(script.walk_revisions())):  # oldest first
        migrated += list(getattr(rev.module, "METRICS", ()))
    assert [name for name, _ in migrated] == list(METRIC_COLUMNS)
    for name, kind in migrated:  # counters stay exact in double precision; gauges are float32
        assert kind == ("real" if catalog.BY_NAME[name].kind == "gauge" else "double"), name


def test_upgrade_is_idempotent(store: Store) -> None:
    store.upgrade()
    with store._engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
    assert tables >= {"nodes", "gpus", "samples", "samples_hourly", "risk_scores", "decisions", "failures",
                      "alerts", "probe_results", "alembic_version"}  # fmt: skip


def test_a_schema_newer_than_this_release_is_a_one_line_error(store: Store) -> None:
    """An older release started on a database a newer one upgraded: a StoreError naming the revision,
    never alembic's CommandError with its traceback."""
    import pytest

    from store import StoreError

    with store._engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(StoreError, match=r"0099.*newer"):
        store.upgrade()
    with pytest.raises(StoreError, match=r"0099.*newer"):
        Store.open(store.url).close()


def test_the_tables_a_round_updates_keep_room_on_postgresql(store: Store, backend: str) -> None:
    """Migration 0017: `gpus` and `decisions` keep half of each page free on PostgreSQL (a round's updates
    stay on their page, no index entry each); SQLite has no such setting and is left as it is."""
    if backend != "postgresql":
        assert store.revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()
        return
    with store._engine.connect() as conn:
        got = dict(
            conn.execute(
                sa.text(
                    "SELECT relname, reloptions FROM pg_class WHERE relname IN ('gpus', 'decisions', 'risk_scores')"
                )
            ).all()
        )
    assert got == {"gpus": ["fillfactor=50"], "decisions": ["fillfactor=50"], "risk_scores": None}
