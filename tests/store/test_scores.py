"""Risk scores and the decision lifecycle; the GPU, node and decision listings built on them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from predictor.policy import DecisionChanges, decision_changes
from store import NotFound, Store, StoreError
from tests.store.conftest import T0, frame


def score(uuid: str, decision: str = "ok", risk: float | None = 0.1, host: str = "node-a", **kw: Any) -> dict[str, Any]:
    """One record as `gpuhealth score` writes it."""
    return {"gpu_uuid": uuid, "hostname": host, "model_name": "NVIDIA H100 80GB HBM3", "risk": risk,
            "risk_ecc": risk, "risk_thermal": 0.0, "risk_pcie": 0.0, "decision": decision,
            "reasons": kw.pop("reasons", [f"{decision} because"]), **kw}  # fmt: skip


def test_decision_lifecycle(store: Store) -> None:
    t = [T0 + timedelta(minutes=5 * i) for i in range(6)]
    assert store.decisions.write_scores([score("GPU-a", "ok")], t[0], rule=decision_changes) == []
    opened = store.decisions.write_scores([score("GPU-a", "watch", 0.4)], t[1], rule=decision_changes)
    assert [(d["gpu_uuid"], d["decision"], d["state"], d["created_at"]) for d in opened] == [
        ("GPU-a", "watch", "open", t[1])
    ]
    watch_id = opened[0]["id"]
    acked = store.decisions.ack(watch_id, "alice", t[1])
    assert (acked["state"], acked["acknowledged_by"], acked["acknowledged_at"]) == ("acknowledged", "alice", t[1])

    # the same decision again: no new one, reasons refreshed, the acknowledgement kept
    refreshed = store.decisions.write_scores(
        [score("GPU-a", "watch", 0.45, reasons=["still warm"])], t[2], rule=decision_changes
    )
    assert refreshed == []
    (d,), total = store.decisions.find(state="active")
    assert total == 1
    assert (d["id"], d["state"], d["reasons"], d["updated_at"], d["risk"]) == (
        watch_id, "acknowledged", ["still warm"], t[2], 0.45)  # fmt: skip

    # escalation closes the old decision and opens a new one
    (demote,) = store.decisions.write_scores([score("GPU-a", "demote", 0.8)], t[3], rule=decision_changes)
    assert demote["decision"] == "demote" and demote["id"] != watch_id
    closed, _ = store.decisions.find(state="closed")
    assert [(c["id"], c["closed_at"]) for c in closed] == [(watch_id, t[3])]
    with pytest.raises(StoreError, match=f"decision {watch_id} is closed"):
        store.decisions.ack(watch_id, "bob", t[3])

    # acknowledging twice keeps the first acknowledgement
    store.decisions.ack(demote["id"], "alice", t[3])
    again = store.decisions.ack(demote["id"], "bob", t[4])
    assert (again["acknowledged_by"], again["acknowledged_at"]) == ("alice", t[3])

    # ok closes it; nothing stays active
    assert store.decisions.write_scores([score("GPU-a", "ok", 0.05)], t[5], rule=decision_changes) == []
    assert store.decisions.find(state="active") == ([], 0)
    assert store.decisions.find(state=None)[1] == 2
    g = store.gpus.get("GPU-a")
    assert (g["decision"], g["decision_id"], g["risk"], g["scored_at"]) == ("ok", None, 0.05, t[5])

    hist = store.decisions.risk_history("GPU-a")
    assert [h["decision"] for h in hist] == ["ok", "watch", "watch", "demote", "ok"]
    assert [h["scored_at"] for h in hist] == [t[0], t[1], t[2], t[3], t[5]]
    assert [h["scored_at"] for h in store.decisions.risk_history("GPU-a", limit=2)] == [t[3], t[5]]
    assert [h["scored_at"] for h in store.decisions.risk_history("GPU-a", since=t[2], until=t[3])] == [t[2], t[3]]


def test_scores_with_unknown_risk_and_unknown_gpus(store: Store) -> None:
    store.decisions.write_scores(
        [score("GPU-new", "ok", float("nan"), reasons=["not scored: too little history"])], T0, rule=decision_changes
    )
    g = store.gpus.get("GPU-new")  # a GPU seen only through its score (e.g. scored from Prometheus)
    assert (g["hostname"], g["risk"], g["decision"], g["reasons"]) == (
        "node-a", None, "ok", ["not scored: too little history"])  # fmt: skip
    assert g["gpu_index"] is None
    assert store.gpus.node("node-a")["counts"]["ok"] == 1


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"decision": "explode"}, "unknown score 0: decision 'explode'; use one of ok, watch"),
        ({"risk": "high"}, "score 0: risk must be a number or null, got 'high'"),
        ({"reasons": "one string"}, "score 0: reasons must be a list of strings"),
        ({"gpu_uuid": None}, "score 0: gpu_uuid is required"),
    ],
)
def test_bad_scores_are_refused(store: Store, record: dict[str, Any], message: str) -> None:
    with pytest.raises(StoreError) as err:
        store.decisions.write_scores([score("GPU-a") | record], T0, rule=decision_changes)
    assert message in str(err.value)
    assert store.counts()["risk_scores"] == 0


def test_a_failed_round_writes_nothing(store: Store) -> None:
    with pytest.raises(StoreError, match="GPU-a is scored twice"):
        store.decisions.write_scores([score("GPU-a", "watch"), score("GPU-a", "demote")], T0, rule=decision_changes)
    assert store.counts()["risk_scores"] == 0


def test_the_rule_decides_and_the_store_persists(store: Store) -> None:
    """The store asks the rule, with the scored GPUs' active decisions, and writes exactly what it says."""
    seen: list[tuple[dict[str, tuple[int, str]], list[tuple[str, str, list[str]]]]] = []

    def rule(active: Any, scored: Any) -> DecisionChanges:
        seen.append((dict(active), [(u, d, list(r)) for u, d, r in scored]))
        return decision_changes(active, scored)

    (watch,) = store.decisions.write_scores([score("GPU-a", "watch", reasons=["warm"]), score("GPU-b")], T0, rule=rule)
    store.decisions.write_scores(
        [score("GPU-a", "watch", reasons=["still warm"])], T0 + timedelta(minutes=5), rule=rule
    )
    assert seen == [
        ({}, [("GPU-a", "watch", ["warm"]), ("GPU-b", "ok", ["ok because"])]),
        ({"GPU-a": (watch["id"], "watch")}, [("GPU-a", "watch", ["still warm"])]),
    ]

    def never(active: Any, scored: Any) -> DecisionChanges:
        return DecisionChanges()

    assert (
        store.decisions.write_scores(
            [score("GPU-a", "rma"), score("GPU-c", "drain")], T0 + timedelta(minutes=10), rule=never
        )
        == []
    )
    (d,), _ = store.decisions.find(state="active")
    assert (d["id"], d["decision"], d["reasons"]) == (watch["id"], "watch", ["still warm"])
    assert store.gpus.get("GPU-a")["risk"] == 0.1  # the scores are stored whatever the rule says


@pytest.mark.parametrize(
    "changes",
    [
        DecisionChanges(close=(999,)),
        DecisionChanges(refresh=((999, ["x"]),)),
        DecisionChanges(open=(("GPU-other", "watch", ["x"]),)),
        DecisionChanges(open=(("GPU-a", "ok", []),)),
    ],
)
def test_a_rule_acting_outside_the_round_is_refused_and_nothing_is_written(
    store: Store, changes: DecisionChanges
) -> None:
    with pytest.raises(StoreError, match="decision rule"):
        store.decisions.write_scores([score("GPU-a", "watch")], T0, rule=lambda active, scored: changes)
    assert store.counts()["risk_scores"] == 0


def test_write_scores_has_no_rule_of_its_own(store: Store) -> None:
    with pytest.raises(TypeError, match="rule"):
        store.decisions.write_scores([score("GPU-a", "watch")], T0)  # type: ignore[call-arg]


@pytest.fixture
def fleet(store: Store) -> Store:
    """Six GPUs on two nodes: rma, demote, watch, two ok (one unknown risk), one never scored."""
    store.samples.ingest(frame([{"timestamp": T0, "gpu_uuid": "GPU-never", "hostname": "node-b", "gpu_index": 2}]))
    store.decisions.write_scores(
        [
            score("GPU-rma", "rma", 0.5),
            score("GPU-demote", "demote", 0.9),
            score("GPU-watch", "watch", 0.4, host="node-b"),
            score("GPU-ok", "ok", 0.1),
            score("GPU-nan", "ok", None, host="node-b"),
        ],
        T0,
        rule=decision_changes,
    )
    return store


def test_list_gpus_ordering_filters_and_paging(fleet: Store) -> None:
    items, total = fleet.gpus.find()
    assert total == 6
    # what needs action first: the decision's severity (rma before a riskier demote), then risk, unscored last
    assert [i["uuid"] for i in items] == ["GPU-rma", "GPU-demote", "GPU-watch", "GPU-ok", "GPU-nan", "GPU-never"]
    assert [i["decision"] for i in items] == ["rma", "demote", "watch", "ok", "ok", None]
    page, total = fleet.gpus.find(limit=2, offset=2)
    assert ([i["uuid"] for i in page], total) == (["GPU-watch", "GPU-ok"], 6)
    pages = [u["uuid"] for o in range(0, 6, 4) for u in fleet.gpus.find(limit=4, offset=o)[0]]
    assert pages == [i["uuid"] for i in items]  # pages join up: the order is total (the UUID breaks ties)
    several, n = fleet.gpus.find(decision=["watch", "rma"])
    assert ([i["uuid"] for i in several], n) == (["GPU-rma", "GPU-watch"], 2)
    assert [i["uuid"] for i in fleet.gpus.find(decision=["ok", "demote"])[0]] == ["GPU-demote", "GPU-ok", "GPU-nan"]
    assert [i["uuid"] for i in fleet.gpus.find(hostname="node-b")[0]] == ["GPU-watch", "GPU-nan", "GPU-never"]
    assert [i["uuid"] for i in fleet.gpus.find(decision="ok")[0]] == ["GPU-ok", "GPU-nan"]
    assert [i["uuid"] for i in fleet.gpus.find(decision="rma")[0]] == ["GPU-rma"]
    assert fleet.gpus.find(min_risk=0.45) == (items[:2], 2)
    with pytest.raises(StoreError, match="unknown decision 'bad'"):
        fleet.gpus.find(decision="bad")
    with pytest.raises(StoreError, match="limit must be"):
        fleet.gpus.find(limit=-1)


def test_decisions_listing(fleet: Store) -> None:
    items, total = fleet.decisions.find(state="active")
    assert total == 3
    assert {i["decision"] for i in items} == {"rma", "demote", "watch"}
    (rma,), _ = fleet.decisions.find(decision="rma", state="active")
    assert (rma["gpu_uuid"], rma["hostname"], rma["risk"], rma["reasons"]) == (
        "GPU-rma",
        "node-a",
        0.5,
        ["rma because"],
    )
    assert [i["gpu_uuid"] for i in fleet.decisions.find(hostname="node-b")[0]] == ["GPU-watch"]
    fleet.decisions.ack(rma["id"], "ops", T0)
    assert fleet.decisions.find(state="open")[1] == 2
    assert fleet.decisions.find(state="acknowledged")[1] == 1
    with pytest.raises(StoreError, match="unknown state 'gone'"):
        fleet.decisions.find(state="gone")
    with pytest.raises(NotFound, match="decision 999 not found"):
        fleet.decisions.ack(999, "ops", T0)


def test_get_node_and_not_found(fleet: Store) -> None:
    node = fleet.gpus.node("node-b")
    assert [g["uuid"] for g in node["gpus"]] == ["GPU-watch", "GPU-nan", "GPU-never"]
    assert node["counts"] == {"ok": 1, "watch": 1, "demote": 0, "drain": 0, "rma": 0, "unscored": 1}
    assert node["first_seen"] == T0
    with pytest.raises(NotFound, match="node nowhere not found"):
        fleet.gpus.node("nowhere")
    with pytest.raises(NotFound, match="GPU GPU-x not found"):
        fleet.gpus.get("GPU-x")
    with pytest.raises(NotFound):
        fleet.decisions.risk_history("GPU-x")


def test_counts(fleet: Store) -> None:
    c = fleet.counts()
    assert (c["gpus"], c["nodes"], c["samples"], c["risk_scores"]) == (6, 2, 1, 5)
    assert (c["decisions_rma"], c["decisions_demote"], c["decisions_watch"], c["decisions_active"]) == (1, 1, 1, 3)


def test_recent_rounds_are_the_rounds_in_the_window_oldest_first(store: Store) -> None:
    for h, (a, b) in enumerate([(0.8, 0.1), (0.9, None), (0.2, 0.95)]):
        store.decisions.write_scores([score("GPU-a", risk=a), score("GPU-b", risk=b)], T0 + timedelta(hours=h),
                           rule=decision_changes)  # fmt: skip
    got = store.decisions.recent_rounds(["GPU-a", "GPU-b", "GPU-x"], T0 + timedelta(hours=1), T0 + timedelta(hours=3))
    assert got == [
        ("GPU-a", T0 + timedelta(hours=1), (0.9,)), ("GPU-a", T0 + timedelta(hours=2), (0.2,)),
        ("GPU-b", T0 + timedelta(hours=1), (None,)), ("GPU-b", T0 + timedelta(hours=2), (0.95,)),
    ]  # fmt: skip
    # The end is open: a round at `until` is the one being scored, not yet stored.
    assert store.decisions.recent_rounds(["GPU-a"], T0, T0) == []
    assert store.decisions.recent_rounds([], T0, T0 + timedelta(hours=9)) == []


def test_each_round_keeps_the_core_heat_it_judged(store: Store) -> None:
    """What a demote on heat alone reads: the round's `heat_z` and `heat_vs_node_z`, in the order
    asked, each null where not judged (light load, a young GPU)."""
    for h, (z, v) in enumerate([(4.5, 1.0), (None, None), (2.25, 6.5)]):
        rows = [score("GPU-a", heat_z=z, heat_vs_node_z=v), score("GPU-b")]
        store.decisions.write_scores(rows, T0 + timedelta(hours=h), rule=decision_changes)
    got = store.decisions.recent_rounds(
        ["GPU-a", "GPU-b"], T0, T0 + timedelta(hours=3), of=("heat_vs_node_z", "heat_z")
    )
    assert [(u, t - T0, z) for u, t, z in got] == [
        ("GPU-a", timedelta(0), (1.0, 4.5)), ("GPU-a", timedelta(hours=1), (None, None)),
        ("GPU-a", timedelta(hours=2), (6.5, 2.25)), ("GPU-b", timedelta(0), (None, None)),
        ("GPU-b", timedelta(hours=1), (None, None)), ("GPU-b", timedelta(hours=2), (None, None)),
    ]  # fmt: skip
    for bad in ("heat_z", "heat_vs_node_z"):
        with pytest.raises(StoreError, match=f"score 0: {bad}"):
            store.decisions.write_scores(
                [score("GPU-a", **{bad: "hot"})], T0 + timedelta(hours=4), rule=decision_changes
            )
    with pytest.raises(StoreError, match=r"recent_rounds reads risk, .*heat_vs_node_z; not 'decision'"):
        store.decisions.recent_rounds(["GPU-a"], T0, T0 + timedelta(hours=3), of=("heat_z", "decision"))
    with pytest.raises(StoreError, match="not none"):
        store.decisions.recent_rounds(["GPU-a"], T0, T0 + timedelta(hours=3), of=())


def test_demoted_since_is_when_the_standing_demote_was_opened(store: Store) -> None:
    """Only a demote standing now counts, acknowledged or not; a decision after it, or none, is left out."""
    t = [T0 + timedelta(hours=h) for h in range(4)]
    rounds = {
        "GPU-a": ["watch", "demote", "demote"],  # opened at t1, refreshed at t2
        "GPU-b": ["demote", "ok", "demote"],  # closed, then a new one at t2
        "GPU-c": ["demote", "demote", "drain"],  # a drain took over
        "GPU-d": ["demote", "watch", "watch"],  # fell back
    }
    for i in range(3):
        store.decisions.write_scores([score(u, d[i], 0.5) for u, d in rounds.items()], t[i], rule=decision_changes)
    assert store.decisions.demoted_since([*rounds, "GPU-unknown"]) == {"GPU-a": t[1], "GPU-b": t[2]}
    assert store.decisions.demoted_since([]) == {}
    (dec,) = [d for d in store.decisions.find(state="active")[0] if d["gpu_uuid"] == "GPU-a"]
    store.decisions.ack(dec["id"], "alice", t[3])
    assert store.decisions.demoted_since(["GPU-a"]) == {"GPU-a": t[1]}


def test_drained_are_the_gpus_whose_standing_decision_is_a_drain_or_rma(store: Store) -> None:
    """What keeps a pending remap's drain standing: a drain or RMA standing now, acknowledged or not."""
    t = [T0 + timedelta(hours=h) for h in range(4)]
    rounds = {
        "GPU-a": ["watch", "drain", "drain"],  # drained since t1
        "GPU-b": ["drain", "ok", "watch"],  # let go, then a watch
        "GPU-c": ["demote", "rma", "rma"],  # an RMA stands
        "GPU-d": ["drain", "demote", "demote"],  # a demote took over
    }
    for i in range(3):
        store.decisions.write_scores([score(u, d[i], 0.5) for u, d in rounds.items()], t[i], rule=decision_changes)
    assert store.decisions.drained([*rounds, "GPU-unknown"]) == {"GPU-a", "GPU-c"}
    assert store.decisions.drained([]) == set()
    (dec,) = [d for d in store.decisions.find(state="active")[0] if d["gpu_uuid"] == "GPU-a"]
    store.decisions.ack(dec["id"], "alice", t[3])
    assert store.decisions.drained(["GPU-a"]) == {"GPU-a"}


def test_released_at_follows_a_drain_through_the_demotes_that_took_over_from_it(store: Store) -> None:
    """A drain or RMA standing: let go now; a demote opened in the round a drain or RMA closed:
    let go then, however long it stands; anything else in between breaks the chain."""
    t = [T0 + timedelta(hours=h) for h in range(8)]
    rounds = {
        "GPU-a": ["drain", "demote", "demote", "demote"],  # the demote took over from the drain at t1
        "GPU-b": ["drain", "watch", "demote", "demote"],  # a watch between: no chain
        "GPU-c": ["ok", "drain", "drain", "drain"],  # still drained: let go now
        "GPU-d": ["demote", "demote", "demote", "demote"],  # the model's demote, no drain before it
        "GPU-e": ["rma", "demote", "drain", "demote"],  # the newest drain counts
        "GPU-f": ["drain", "ok", "demote", "demote"],  # closed without a successor, then a new demote
    }
    for i in range(4):
        store.decisions.write_scores([score(u, d[i], 0.5) for u, d in rounds.items()], t[i], rule=decision_changes)
    now = t[4]
    got = store.decisions.released_at([*rounds, "GPU-unknown"], now)
    assert got == {"GPU-a": t[1], "GPU-c": now, "GPU-e": t[3]}
    assert store.decisions.released_at([], now) == {}
    # An acknowledged demote is still the standing decision.
    (dec,) = [d for d in store.decisions.find(state="active")[0] if d["gpu_uuid"] == "GPU-a"]
    store.decisions.ack(dec["id"], "alice", now)
    assert store.decisions.released_at(["GPU-a"], now) == {"GPU-a": t[1]}
