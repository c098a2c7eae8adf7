"""Stored risk models: archives and cards in, at most one active, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa

from store import NotFound, Store, StoreError
from store.models import ModelInfo, StoredModel
from store.schema import T_MODELS
from tests.store.conftest import T0

CARD = {"trained_on": {"sets": [{"name": "fleet", "gpus": 64}]}, "validation": {"ecc": {"brier": 0.001}}}


def keys(typed: object) -> list[str]:
    return list(typed.__annotations__)  # type: ignore[attr-defined]


def test_a_stored_model_comes_back_whole_and_inactive(store: Store) -> None:
    data = b"\x00skops archive\xff" * 1000
    info = store.models.put(data, CARD, created_at=T0)
    sha = hashlib.sha256(data).hexdigest()
    assert info["version"] == f"20260105-000000-{sha[:8]}"
    assert (info["size"], info["sha256"], info["active"], info["activated_at"]) == (len(data), sha, False, None)
    assert info["card"] == CARD and info["created_at"] == T0
    got = store.models.get(info["version"])
    assert got["data"] == data and got["card"] == CARD
    assert list(info) == keys(ModelInfo) and list(got) == keys(StoredModel)
    assert [c.name for c in T_MODELS.columns if c.name != "data"] == keys(ModelInfo)
    assert store.models.active() is None and store.models.active_version() is None
    assert store.models.active_info() is None


def test_the_same_archive_is_stored_once(store: Store) -> None:
    first = store.models.put(b"one", CARD, created_at=T0)
    again = store.models.put(b"one", {"other": "card"}, created_at=T0 + timedelta(hours=1))
    assert again == first
    assert len(store.models.find()) == 1


def test_models_are_listed_newest_first_and_versions_are_unique(store: Store) -> None:
    a = store.models.put(b"a", CARD, created_at=T0, version="first")
    b = store.models.put(b"b", CARD, created_at=T0 + timedelta(days=1))
    assert [m["version"] for m in store.models.find()] == [b["version"], "first"]
    assert "data" not in store.models.find()[0]
    with pytest.raises(StoreError, match="already taken"):
        store.models.put(b"c", CARD, version=a["version"])


def test_one_model_is_active_at_a_time(store: Store) -> None:
    a = store.models.put(b"a", CARD, created_at=T0)["version"]
    b = store.models.put(b"b", CARD, created_at=T0 + timedelta(hours=1))["version"]
    on = store.models.activate(a, T0 + timedelta(hours=2))
    assert on["active"] and on["activated_at"] == T0 + timedelta(hours=2)
    assert store.models.active_version() == a
    promoted = store.models.activate(b, T0 + timedelta(hours=3), card={**CARD, "promotion": {"promoted": True}})
    assert promoted["card"]["promotion"] == {"promoted": True}
    assert store.models.active_version() == b
    active = store.models.active()
    assert active is not None and active["data"] == b"b"
    old = store.models.info(a)
    assert not old["active"] and old["activated_at"] == T0 + timedelta(hours=2)  # when it was last made active
    assert [m["active"] for m in store.models.find()] == [True, False]


def test_the_database_itself_refuses_two_active_models(store: Store) -> None:
    store.models.put(b"a", CARD, created_at=T0)
    store.models.put(b"b", CARD, created_at=T0)
    with pytest.raises(sa.exc.IntegrityError), store._engine.begin() as conn:
        conn.execute(sa.update(T_MODELS).values(active=True))


def test_concurrent_promotions_leave_one_active(store: Store) -> None:
    versions = [store.models.put(bytes([i]) * 10, CARD, created_at=T0)["version"] for i in range(4)]
    errors: list[BaseException] = []

    def promote(v: str) -> None:
        try:
            store.models.activate(v, T0)
        except BaseException as err:  # collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=promote, args=(v,)) for v in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(m["active"] for m in store.models.find()) == 1


def test_cards_are_updated_and_checked(store: Store) -> None:
    v = store.models.put(b"a", CARD, created_at=T0)["version"]
    assert store.models.update_card(v, {"promotion": {"refused": "recall_ecc"}})["card"] == {
        "promotion": {"refused": "recall_ecc"}
    }
    with pytest.raises(StoreError, match="without NaN"):
        store.models.update_card(v, {"x": float("nan")})
    with pytest.raises(StoreError, match="must be an object"):
        store.models.put(b"z", ["not", "a", "card"])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="non-empty bytes"):
        store.models.put(b"", CARD)


def test_unknown_versions_are_not_found(store: Store) -> None:
    for call in (store.models.get, store.models.info, lambda v: store.models.activate(v, T0)):
        with pytest.raises(NotFound, match="model nope not found"):
            call("nope")


def test_prune_keeps_the_newest_and_the_active_one(store: Store) -> None:
    made = [store.models.put(bytes([i]) * 10, CARD, created_at=T0 + timedelta(hours=i))["version"] for i in range(5)]
    store.models.activate(made[0], T0 + timedelta(days=1))  # the oldest is the one serving
    would = store.models.prune(2, dry_run=True)
    assert [m["version"] for m in would] == [made[2], made[1]]  # newest first; the active one stays
    assert len(store.models.find()) == 5  # a dry run deletes nothing
    gone = store.models.prune(2)
    assert [m["version"] for m in gone] == [made[2], made[1]] and all("data" not in m for m in gone)
    assert [m["version"] for m in store.models.find()] == [made[4], made[3], made[0]]
    assert store.models.active_version() == made[0] and store.models.get(made[0])["data"] == bytes([0]) * 10
    assert store.models.prune(2) == []  # nothing left to prune
    with pytest.raises(NotFound):
        store.models.get(made[1])


def test_prune_when_the_active_model_is_among_the_newest(store: Store) -> None:
    made = [store.models.put(bytes([i]) * 10, CARD, created_at=T0 + timedelta(hours=i))["version"] for i in range(3)]
    store.models.activate(made[2], T0 + timedelta(days=1))
    assert [m["version"] for m in store.models.prune(1)] == [made[1], made[0]]
    assert [m["version"] for m in store.models.find()] == [made[2]]


@pytest.mark.parametrize("keep", [0, -1, 1.5, True, "3"])
def test_prune_refuses_a_keep_that_is_no_count(store: Store, keep: object) -> None:
    store.models.put(b"a", CARD, created_at=T0)
    with pytest.raises(StoreError, match="keep must be a whole number"):
        store.models.prune(keep)  # type: ignore[arg-type]
    assert len(store.models.find()) == 1
