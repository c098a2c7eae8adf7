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
    info = store.put_model(data, CARD, created_at=T0)
    sha = hashlib.sha256(data).hexdigest()
    assert info["version"] == f"20260105-000000-{sha[:8]}"
    assert (info["size"], info["sha256"], info["active"], info["activated_at"]) == (len(data), sha, False, None)
    assert info["card"] == CARD and info["created_at"] == T0
    got = store.get_model(info["version"])
    assert got["data"] == data and got["card"] == CARD
    assert list(info) == keys(ModelInfo) and list(got) == keys(StoredModel)
    assert [c.name for c in T_MODELS.columns if c.name != "data"] == keys(ModelInfo)
    assert store.active_model() is None and store.active_model_version() is None
    assert store.active_model_info() is None


def test_the_same_archive_is_stored_once(store: Store) -> None:
    first = store.put_model(b"one", CARD, created_at=T0)
    again = store.put_model(b"one", {"other": "card"}, created_at=T0 + timedelta(hours=1))
    assert again == first
    assert len(store.list_models()) == 1


def test_models_are_listed_newest_first_and_versions_are_unique(store: Store) -> None:
    a = store.put_model(b"a", CARD, created_at=T0, version="first")
    b = store.put_model(b"b", CARD, created_at=T0 + timedelta(days=1))
    assert [m["version"] for m in store.list_models()] == [b["version"], "first"]
    assert "data" not in store.list_models()[0]
    with pytest.raises(StoreError, match="already taken"):
        store.put_model(b"c", CARD, version=a["version"])


def test_one_model_is_active_at_a_time(store: Store) -> None:
    a = store.put_model(b"a", CARD, created_at=T0)["version"]
    b = store.put_model(b"b", CARD, created_at=T0 + timedelta(hours=1))["version"]
    on = store.activate_model(a, T0 + timedelta(hours=2))
    assert on["active"] and on["activated_at"] == T0 + timedelta(hours=2)
    assert store.active_model_version() == a
    promoted = store.activate_model(b, T0 + timedelta(hours=3), card={**CARD, "promotion": {"promoted": True}})
    assert promoted["card"]["promotion"] == {"promoted": True}
    assert store.active_model_version() == b
    active = store.active_model()
    assert active is not None and active["data"] == b"b"
    old = store.model_info(a)
    assert not old["active"] and old["activated_at"] == T0 + timedelta(hours=2)  # when it was last made active
    assert [m["active"] for m in store.list_models()] == [True, False]


def test_the_database_itself_refuses_two_active_models(store: Store) -> None:
    store.put_model(b"a", CARD, created_at=T0)
    store.put_model(b"b", CARD, created_at=T0)
    with pytest.raises(sa.exc.IntegrityError), store._engine.begin() as conn:
        conn.execute(sa.update(T_MODELS).values(active=True))


def test_concurrent_promotions_leave_one_active(store: Store) -> None:
    versions = [store.put_model(bytes([i]) * 10, CARD, created_at=T0)["version"] for i in range(4)]
    errors: list[BaseException] = []

    def promote(v: str) -> None:
        try:
            store.activate_model(v, T0)
        except BaseException as err:  # collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=promote, args=(v,)) for v in versions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(m["active"] for m in store.list_models()) == 1


def test_cards_are_updated_and_checked(store: Store) -> None:
    v = store.put_model(b"a", CARD, created_at=T0)["version"]
    assert store.update_model_card(v, {"promotion": {"refused": "recall_ecc"}})["card"] == {
        "promotion": {"refused": "recall_ecc"}
    }
    with pytest.raises(StoreError, match="without NaN"):
        store.update_model_card(v, {"x": float("nan")})
    with pytest.raises(StoreError, match="must be an object"):
        store.put_model(b"z", ["not", "a", "card"])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="non-empty bytes"):
        store.put_model(b"", CARD)


def test_unknown_versions_are_not_found(store: Store) -> None:
    for call in (store.get_model, store.model_info, lambda v: store.activate_model(v, T0)):
        with pytest.raises(NotFound, match="model nope not found"):
            call("nope")


def test_prune_keeps_the_newest_and_the_active_one(store: Store) -> None:
    made = [store.put_model(bytes([i]) * 10, CARD, created_at=T0 + timedelta(hours=i))["version"] for i in range(5)]
    store.activate_model(made[0], T0 + timedelta(days=1))  # the oldest is the one serving
    would = store.prune_models(2, dry_run=True)
    assert [m["version"] for m in would] == [made[2], made[1]]  # newest first; the active one stays
    assert len(store.list_models()) == 5  # a dry run deletes nothing
    gone = store.prune_models(2)
    assert [m["version"] for m in gone] == [made[2], made[1]] and all("data" not in m for m in gone)
    assert [m["version"] for m in store.list_models()] == [made[4], made[3], made[0]]
    assert store.active_model_version() == made[0] and store.get_model(made[0])["data"] == bytes([0]) * 10
    assert store.prune_models(2) == []  # nothing left to prune
    with pytest.raises(NotFound):
        store.get_model(made[1])


def test_prune_when_the_active_model_is_among_the_newest(store: Store) -> None:
    made = [store.put_model(bytes([i]) * 10, CARD, created_at=T0 + timedelta(hours=i))["version"] for i in range(3)]
    store.activate_model(made[2], T0 + timedelta(days=1))
    assert [m["version"] for m in store.prune_models(1)] == [made[1], made[0]]
    assert [m["version"] for m in store.list_models()] == [made[2]]


@pytest.mark.parametrize("keep", [0, -1, 1.5, True, "3"])
def test_prune_refuses_a_keep_that_is_no_count(store: Store, keep: object) -> None:
    store.put_model(b"a", CARD, created_at=T0)
    with pytest.raises(StoreError, match="keep must be a whole number"):
        store.prune_models(keep)  # type: ignore[arg-type]
    assert len(store.list_models()) == 1
