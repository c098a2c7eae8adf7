"""Shard leases of replicas (`store.leases`) on SQLite and the real PostgreSQL: exclusive claims under
concurrency, fair share, handover on expiry, release, and the fence that admits a scoring round."""

from __future__ import annotations

import threading
import zlib
from datetime import datetime, timedelta

import pytest

from predictor.policy import decision_changes
from store import SHARDS, RoundFence, Store, StoreError, shard_of
from tests.store.conftest import T0
from tests.store.test_scores import score

LEASE = timedelta(seconds=60)


def owners(store: Store) -> dict[int, str | None]:
    return {x["shard"]: x["owner"] for x in store.leases.shards()}


def held_by(store: Store, rid: str) -> set[int]:
    return {s for s, o in owners(store).items() if o == rid}


def test_shard_of_is_a_stable_hash() -> None:
    """CRC-32 modulo the shards: the same in every process and release (Python's hash() is salted)."""
    assert SHARDS == 64
    assert shard_of("node-a") == zlib.crc32(b"node-a") % 64 == 43
    assert shard_of("sim-node-00") == 55
    spread = {shard_of(f"gpu-node-{i:05d}") for i in range(2000)}
    assert spread == set(range(SHARDS))


def test_one_replica_claims_every_shard_and_renews(store: Store) -> None:
    first = store.leases.tick("a", LEASE, now=T0)
    assert (first["live"], first["target"], first["claimed"]) == (1, 64, list(range(64)))
    assert first["held"] == dict.fromkeys(range(64), T0 + LEASE) and first["now"] == T0
    again = store.leases.tick("a", LEASE, now=T0 + timedelta(seconds=20))
    assert again["claimed"] == [] and again["released"] == []
    assert set(again["held"].values()) == {T0 + timedelta(seconds=80)}
    assert {x["expires_at"] for x in store.leases.shards()} == {T0 + timedelta(seconds=80)}
    (r,) = store.leases.replicas()
    assert (r["replica_id"], r["started_at"], r["heartbeat_at"]) == ("a", T0, T0 + timedelta(seconds=20))


def test_fair_share_makes_room_for_newcomers(store: Store) -> None:
    t = iter(T0 + timedelta(seconds=i) for i in range(100))
    store.leases.tick("a", LEASE, now=next(t))
    b = store.leases.tick("b", LEASE, now=next(t))  # all taken: nothing yet
    assert (b["live"], b["target"], b["held"]) == (2, 32, {})
    a = store.leases.tick("a", LEASE, now=next(t))
    assert (a["target"], len(a["held"]), a["released"]) == (32, 32, list(range(32, 64)))
    b = store.leases.tick("b", LEASE, now=next(t))
    assert sorted(b["held"]) == list(range(32, 64))
    store.leases.tick("c", LEASE, now=next(t))
    for rid in ("a", "b", "c", "a", "b", "c"):
        store.leases.tick(rid, LEASE, now=next(t))
    counts = sorted(len(held_by(store, rid)) for rid in ("a", "b", "c"))
    assert counts == [20, 22, 22]  # ceil(64 / 3) = 22 each at most, nothing left over
    assert None not in owners(store).values()


def test_a_dead_replicas_shards_move_after_one_lease(store: Store) -> None:
    store.leases.tick("a", LEASE, now=T0)
    store.leases.tick("b", LEASE, now=T0 + timedelta(seconds=1))
    store.leases.tick("a", LEASE, now=T0 + timedelta(seconds=2))  # gives 32 back
    store.leases.tick("b", LEASE, now=T0 + timedelta(seconds=3))
    assert len(held_by(store, "a")) == len(held_by(store, "b")) == 32
    # a dies after its tick at T0+2s; before its leases expire b cannot take them
    early = store.leases.tick("b", LEASE, now=T0 + timedelta(seconds=61))
    assert (early["live"], early["claimed"]) == (2, [])
    late = store.leases.tick("b", LEASE, now=T0 + timedelta(seconds=62, milliseconds=1))
    assert (late["live"], sorted(late["held"])) == (1, list(range(64)))
    # a comes back: what it held is b's now; it gets a share again through fair share
    back = store.leases.tick("a", LEASE, now=T0 + timedelta(seconds=63))
    assert (back["live"], back["held"]) == (2, {})
    store.leases.tick("b", LEASE, now=T0 + timedelta(seconds=64))
    again = store.leases.tick("a", LEASE, now=T0 + timedelta(seconds=65))
    assert len(again["held"]) == 32 and set(again["held"]).isdisjoint(held_by(store, "b"))


def test_release_hands_the_shards_over_at_once(store: Store) -> None:
    store.leases.tick("a", LEASE, now=T0)
    store.leases.tick("b", LEASE, now=T0)
    assert store.leases.release("a") == 64
    assert set(owners(store).values()) == {None}
    assert [r["replica_id"] for r in store.leases.replicas()] == ["b"]
    b = store.leases.tick("b", LEASE, now=T0 + timedelta(seconds=1))
    assert (b["live"], len(b["held"])) == (1, 64)


@pytest.mark.parametrize("clock", ["passed", "database"])
def test_concurrent_claims_are_exclusive(store: Store, clock: str) -> None:
    """Replicas ticking at once (threads, each its own connection): no shard is believed held by two."""
    rids = [f"r{i}" for i in range(6)]
    rounds = 5
    barrier = threading.Barrier(len(rids))
    seen: dict[tuple[int, str], set[int]] = {}
    errors: list[BaseException] = []

    def replica(rid: str) -> None:
        try:
            for k in range(rounds):
                barrier.wait(timeout=30)
                now = T0 + timedelta(seconds=k) if clock == "passed" else None
                seen[(k, rid)] = set(store.leases.tick(rid, LEASE, now=now)["held"])
        except BaseException as err:  # reported below
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=replica, args=(rid,)) for rid in rids]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors
    for k in range(rounds):
        held = [seen[(k, rid)] for rid in rids]
        assert sum(len(h) for h in held) == len(set().union(*held)), f"round {k}: a shard with two owners"
    final = owners(store)
    for rid in rids:  # what each believes after its last tick is what the table says
        assert seen[(rounds - 1, rid)] <= {s for s, o in final.items() if o == rid}
    assert all(len(seen[(rounds - 1, rid)]) <= 11 for rid in rids)  # ceil(64 / 6)


def hosts_by_shard() -> dict[int, str]:
    """One hostname per shard."""
    out: dict[int, str] = {}
    i = 0
    while len(out) < SHARDS:
        out.setdefault(shard_of(f"node-{i}"), f"node-{i}")
        i += 1
    return out


def test_the_fence_admits_a_round_once_and_only_while_held(store: Store) -> None:
    host = hosts_by_shard()
    store.leases.tick("a", LEASE, now=T0)
    records = [score(f"GPU-{s}", host=host[s]) for s in (0, 1, 2)]
    fence = RoundFence("a", 100, frozenset({0, 1, 2}), now=T0 + timedelta(seconds=1))
    store.decisions.write_scores(records, T0, rule=decision_changes, fence=fence)
    assert fence.admitted == {0, 1, 2}
    assert {x["shard"]: x["scored_round"] for x in store.leases.shards()}[1] == 100

    # the same round again (a retry, or the next owner after a handover): nothing is written
    again = RoundFence("a", 100, frozenset({0, 1, 2}), now=T0 + timedelta(seconds=2))
    store.decisions.write_scores([score("GPU-0", "watch", 0.5, host=host[0])], T0 + timedelta(seconds=2),
                       rule=decision_changes, fence=again)  # fmt: skip
    assert again.admitted == frozenset()
    assert store.gpus.get("GPU-0")["decision"] == "ok"

    # past the lease (less the margin) the round is not written either
    late = RoundFence("a", 101, frozenset({0}), margin=timedelta(seconds=10), now=T0 + timedelta(seconds=55))
    store.decisions.write_scores([score("GPU-0", "watch", 0.5, host=host[0])], T0 + timedelta(seconds=55),
                       rule=decision_changes, fence=late)  # fmt: skip
    assert late.admitted == frozenset() and store.gpus.get("GPU-0")["decision"] == "ok"

    # shards held by another replica are dropped, ours written: one transaction, partial admission
    store.leases.tick("b", LEASE, now=T0 + timedelta(seconds=61))  # a's leases have expired: b takes all
    store.leases.tick("a", LEASE, now=T0 + timedelta(seconds=62))
    mixed = RoundFence("b", 101, frozenset({0, 1}), now=T0 + timedelta(seconds=63))
    written = [score("GPU-0", "watch", 0.5, host=host[0]), score("GPU-1", "watch", 0.5, host=host[1]),
               score("GPU-2", "watch", 0.5, host=host[2])]  # fmt: skip
    opened = store.decisions.write_scores(written, T0 + timedelta(seconds=63), rule=decision_changes, fence=mixed)
    assert mixed.admitted == {0, 1}
    assert sorted(d["gpu_uuid"] for d in opened) == ["GPU-0", "GPU-1"]
    assert store.gpus.get("GPU-2")["decision"] == "ok"


def test_bad_input_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="lease must be positive"):
        store.leases.tick("a", timedelta(0))
    with pytest.raises(StoreError, match="replica_id"):
        store.leases.tick("", LEASE)


def test_the_database_clock_decides(store: Store) -> None:
    """Without a clock passed in, expiry is measured by the database's time (now() on PostgreSQL)."""
    before = datetime.now().astimezone()
    got = store.leases.tick("a", LEASE)
    assert before - timedelta(seconds=5) <= got["now"] <= datetime.now().astimezone() + timedelta(seconds=5)
    assert set(got["held"].values()) == {got["now"] + LEASE}
