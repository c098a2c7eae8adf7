"""The remedy beside each decision: stored with the round, read back with the GPU and its decision."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command

from predictor.policy import decision_changes
from store import Store, StoreError
from store.engine import Database, alembic_config
from tests.postgres import PostgresServer
from tests.store.conftest import T0
from tests.store.test_scores import score

_dbs = itertools.count()


def test_the_remedy_round_trips_with_the_gpu_and_its_decision(store: Store) -> None:
    rows = [
        score("GPU-a", "drain", remedy="reset", remedy_when="idle"),
        score("GPU-b", "ok", remedy="reboot", remedy_when="now"),  # the driver asks; the decision stays ok
        score("GPU-c", "watch"),  # a record from before remedies (or a lost GPU's): null
    ]
    store.decisions.write_scores(rows, T0, rule=decision_changes)
    gpus = {g["uuid"]: (g["decision"], g["remedy"], g["remedy_when"]) for g in store.gpus.find()[0]}
    assert gpus == {
        "GPU-a": ("drain", "reset", "idle"),
        "GPU-b": ("ok", "reboot", "now"),
        "GPU-c": ("watch", None, None),
    }
    got = {d["gpu_uuid"]: (d["remedy"], d["remedy_when"]) for d in store.decisions.find(state="active")[0]}
    assert got == {"GPU-a": ("reset", "idle"), "GPU-c": (None, None)}
    # The next round's remedy is the one read (as the latest risk is).
    store.decisions.write_scores(
        [score("GPU-a", "drain", remedy="replace", remedy_when="now")], T0 + timedelta(minutes=5), rule=decision_changes
    )
    assert [(d["remedy"], d["remedy_when"]) for d in store.decisions.find(decision="drain")[0]] == [("replace", "now")]


@pytest.mark.parametrize(("field", "value"), [("remedy", "fix"), ("remedy_when", "later")])
def test_an_unknown_remedy_is_refused(store: Store, field: str, value: str) -> None:
    with pytest.raises(StoreError, match=f"unknown score 0: {field} '{value}'"):
        store.decisions.write_scores([score("GPU-a", **{field: value})], T0, rule=decision_changes)


def test_upgrade_from_0011_keeps_the_rounds_with_no_remedy(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A database at the previous head (0011) upgrades: its rounds stay, their remedy null; new rounds keep one."""
    if backend == "sqlite":
        url, drop = f"sqlite:///{tmp_path / 'old.db'}", None
    else:
        server: PostgresServer = request.getfixturevalue("pg_template")
        name = f"remedy{next(_dbs)}"
        url, drop = server.create_database(name), (server, name)
    db = Database(url)
    try:
        with db.tx(write=True) as conn:
            command.upgrade(alembic_config(conn), "0011")
            conn.execute(sa.text("INSERT INTO gpus (uuid, hostname, state, first_seen, last_seen) "
                                 "VALUES ('GPU-old', 'node-a', 'active', :t, :t)"), {"t": T0})  # fmt: skip
            conn.execute(sa.text("INSERT INTO risk_scores (gpu_uuid, scored_at, decision, reasons) "
                                 "VALUES ('GPU-old', :t, 'watch', '[]')"), {"t": T0})  # fmt: skip
        db.close()
        s = Store.open(url)  # upgrades to head
        try:
            s.decisions.write_scores(
                [score("GPU-old", "watch", remedy="reset", remedy_when="idle")], T0 + timedelta(hours=1),
                rule=decision_changes,
            )  # fmt: skip
            with s._engine.connect() as conn:
                got = conn.execute(sa.text("SELECT remedy, remedy_when FROM risk_scores ORDER BY scored_at")).all()
            assert [tuple(r) for r in got] == [(None, None), ("reset", "idle")]
        finally:
            s.close()
    finally:
        if drop is not None:
            drop[0].drop_database(drop[1])
