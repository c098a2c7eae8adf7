"""PostgreSQL's round rows through the driver (`store.round_rows`) are the rows, ids and answers
SQLAlchemy Core gives (`store.decisions`' SQLite path): the same rounds written both ways compare
equal, row by row, and the rounds read back both ways too."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from predictor.policy import decision_changes
from store import Store, decisions, round_rows
from store import samples as samples_mod
from store.decisions import ROUND_VALUES, ScoreRecord
from store.errors import StoreError
from tests.postgres import PostgresServer

T0 = datetime(2026, 1, 5, tzinfo=UTC)
pytestmark = pytest.mark.integration


def _records(k: int) -> list[ScoreRecord]:
    out: list[ScoreRecord] = []
    for i in range(7 - (k % 2) + 2 * (k == 3)):  # GPU 2 (i = 6) only in even rounds and 3; GPU 7 new in round 3
        bad = (i + k) % 3 == 0 or i == 5  # GPU 4 (i = 5) stays bad: its reasons change, its decision refreshed
        uuid = f"GPU-{(5 * i) % 7}" if i < 7 else "GPU-7\\\t"  # the text COPY escapes
        out.append(
            {"gpu_uuid": uuid, "hostname": f"node-{i // 2}", "model_name": None if i == 3 else "H100",
             "risk": None if i == 2 else 0.1 * i + k / 100, "risk_ecc": 1e-300 if i == 1 else 0.5,
             "risk_thermal": float("nan") if i == 4 else -0.0, "risk_pcie": 1 / 3, "heat_z": None,
             "heat_vs_node_z": 2.5 if bad else None, "decision": "demote" if bad else "ok",
             "reasons": ['heat "high" é\t\\N\n', f"risk {k % 2}"] if bad else [], "remedy": "reset" if bad else None,
             "remedy_when": "now" if bad else None}
        )  # fmt: skip
    return out


# Round 2 is written after round 3 but scored before it: a GPU's latest score stays round 3's.
ROUNDS = [(0, T0), (1, T0 + timedelta(minutes=5)), (3, T0 + timedelta(minutes=15)), (2, T0 + timedelta(minutes=10))]


@pytest.fixture
def two_stores(pg_template: PostgresServer) -> Iterator[tuple[Store, Store]]:
    names = ("rr_driver", "rr_core")
    stores = [Store.open(pg_template.create_database(n, template="gpuhealth_template")) for n in names]
    try:
        yield stores[0], stores[1]
    finally:
        for s, n in zip(stores, names, strict=True):
            s.close()
            pg_template.drop_database(n)


def _dump(store: Store) -> dict[str, list[Any]]:
    with store.decisions.db.tx() as conn:
        return {
            t: [tuple(r) for r in conn.execute(sa.text(q))]
            for t, q in {
                "risk_scores": "SELECT id, gpu_uuid, scored_at, risk, risk_ecc, risk_thermal, risk_pcie, heat_z,"
                " heat_vs_node_z, decision, reasons::text, remedy, remedy_when FROM risk_scores ORDER BY id",
                "gpus": "SELECT uuid, hostname, model_name, latest_score_id FROM gpus ORDER BY uuid",
                "decisions": "SELECT id, gpu_uuid, decision, reasons::text, state, created_at, updated_at, closed_at"
                " FROM decisions ORDER BY id",
            }.items()
        }


def test_rounds_written_through_the_driver_equal_cores(
    two_stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    driver, core = two_stores
    opened = [driver.decisions.write_scores(_records(k), at, rule=decision_changes) for k, at in ROUNDS]
    with monkeypatch.context() as m:
        m.setattr(decisions, "_store_round", decisions._store_round_core)
        m.setattr(decisions, "_persist_changes", lambda db, *a: decisions._persist_changes_core(*a))
        opened_core = [core.decisions.write_scores(_records(k), at, rule=decision_changes) for k, at in ROUNDS]
    assert opened == opened_core
    got, want = _dump(driver), _dump(core)
    assert len(got["risk_scores"]) == 28
    decided = got["decisions"]  # closed, and refreshed (new reasons, updated later than opened), both ways
    assert any(r[4] == "closed" for r in decided) and any(r[4] == "open" and r[6] > r[5] for r in decided)
    assert got == want
    # Each GPU points at its newest round's score (round 3's, not round 2's written after it).
    newest = {r[1]: r[0] for r in sorted(got["risk_scores"], key=lambda r: r[2])}
    assert {r[0]: r[3] for r in got["gpus"]} == newest
    assert newest["GPU-0"] == next(r[0] for r in got["risk_scores"] if r[1] == "GPU-0" and r[2] == ROUNDS[2][1])


def test_rounds_read_through_the_driver_equal_cores(two_stores: tuple[Store, Store]) -> None:
    store = two_stores[0]
    for k, at in ROUNDS:
        store.decisions.write_scores(_records(k), at, rule=decision_changes)
    uuids = ["GPU-5", "GPU-0", "GPU-missing", "GPU-3", "GPU-1", "GPU-6"]
    lo, hi = T0 + timedelta(minutes=5), T0 + timedelta(minutes=15)
    with store.decisions.db.tx() as conn:
        for of in [("risk",), ROUND_VALUES, ("heat_vs_node_z", "risk_ecc")]:
            got = round_rows.read_rounds(conn, uuids, lo, hi, of)
            want = decisions._rounds_core(conn, uuids, lo, hi, of)
            assert got == want and len(got) == 10
            assert [type(x) for r in got for x in (*r[:2], *r[2])] == [type(x) for r in want for x in (*r[:2], *r[2])]
            assert {r[1].tzinfo for r in got} == {UTC}
    assert store.decisions.recent_rounds(uuids, lo, hi, of=("risk",))[0][:2] == ("GPU-0", lo)


def test_round_columns_are_recent_rounds_as_columns(two_stores: tuple[Store, Store]) -> None:
    store = two_stores[0]
    for k, at in ROUNDS:
        store.decisions.write_scores(_records(k), at, rule=decision_changes)
    uuids = ["GPU-5", "GPU-0", "GPU-missing", "GPU-3", "GPU-0", "GPU-1", "GPU-6", "GPU-4"]
    lo, hi = T0, T0 + timedelta(minutes=15)
    for of in [("risk",), ROUND_VALUES, ("heat_vs_node_z", "risk_ecc")]:
        rows = store.decisions.recent_rounds(uuids, lo, hi, of=of)
        gpu, at, values = store.decisions.round_columns(uuids, lo, hi, of=of)
        assert gpu.tolist() == [r[0] for r in rows] and len(rows) == 18
        assert at.dtype == np.dtype("datetime64[us]")
        assert at.tolist() == [r[1].replace(tzinfo=None) for r in rows]
        want = np.array([[np.nan if v is None else v for v in r[2]] for r in rows], dtype=np.float64)
        assert values.shape == (len(rows), len(of)) and values.tobytes() == want.tobytes()
    empty = store.decisions.round_columns(["GPU-missing"], lo, hi, of=ROUND_VALUES)
    assert [x.shape for x in empty] == [(0,), (0,), (0, len(ROUND_VALUES))]
    with pytest.raises(StoreError, match="not 'gpu_uuid'"):
        store.decisions.round_columns(uuids, lo, hi, of=("gpu_uuid",))


def test_gpu_identities_through_the_driver_are_cores(two_stores: tuple[Store, Store]) -> None:
    """The window's identities of GPUs (`samples._identities`) on PostgreSQL come through the driver in one
    statement; they are Core's: NULL index, model, ports and bus id as Core reads them, odd uuids, unknown ones."""
    store, _ = two_stores
    store.gpus.upsert(
        [
            {"uuid": "GPU-a", "hostname": "node-0", "gpu_index": 0, "model_name": "H100", "ib_rail": "mlx5_0:1",
             "pci_bus_id": "00000000:18:00.0", "seen_at": T0},
            {"uuid": 'GPU-b\t\\"é', "hostname": "node-0", "seen_at": T0},
            {"uuid": "GPU-c", "hostname": "node-1", "gpu_index": 7, "seen_at": T0},
        ]
    )  # fmt: skip
    asked = ["GPU-a", 'GPU-b\t\\"é', "GPU-c", "GPU-unknown"]
    g = decisions.T_GPUS.c
    with store.decisions.db.tx() as conn:
        core = conn.execute(
            sa.select(g.uuid, g.hostname, g.gpu_index, g.model_name, g.ib_rail, g.pci_bus_id).where(g.uuid.in_(asked))
        )
        want = sorted(tuple(r) for r in core)
        got = sorted(round_rows.gpu_identities(conn, asked))
        assert len(want) == 3 and got == want
        assert round_rows.gpu_identities(conn, []) == []
        ident = samples_mod._identities(conn, asked)
    assert ident['GPU-b\t\\"é'] == ("node-0", -1, "unknown", "", "")
    assert ident["GPU-a"] == ("node-0", 0, "H100", "mlx5_0:1", "00000000:18:00.0") and "GPU-unknown" not in ident
