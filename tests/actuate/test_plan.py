"""Desired states, the plan between desired and observed, the settle clock and the breaker's bounds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actuate.breaker import BreakerPolicy
from actuate.plan import GpuDecision, Lowering, Observed, desired_states, plan, settle_clock
from core.decisions import DECISIONS, SEVERITY

T0 = datetime(2026, 12, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_a_node_takes_its_worst_gpu_and_names_it() -> None:
    got = desired_states([
        GpuDecision("n1", "a", 0, "watch", ("risk 0.4",)),
        GpuDecision("n1", "b", 3, "rma", ("row remap failure",)),
        GpuDecision("n1", "c", 1, "rma", ("row remap failure",)),
        GpuDecision("n2", "d", 0, "demote", ()),
    ])  # fmt: skip
    assert (got["n1"].state, got["n1"].gpu_index, got["n1"].why) == ("rma", 1, "GPU 1 rma: row remap failure")
    assert (got["n2"].state, got["n2"].why) == ("demote", "GPU 0 demote")
    with pytest.raises(ValueError, match="unknown decision 'broken'"):
        desired_states([GpuDecision("n1", "a", 0, "broken")])


def test_raise_at_once_lower_after_settle_never_touch_held_or_unmanaged() -> None:
    desired = desired_states([GpuDecision("up", "a", 0, "drain"), GpuDecision("down", "b", 0, "watch")])
    observed = {
        "up": Observed("up", "ok"),
        "down": Observed("down", "drain"),
        "held": Observed("held", "drain"),
        "optout": Observed("optout", "ok", managed=False),
    }
    desired |= desired_states([GpuDecision("optout", "c", 0, "rma")])
    clocks = settle_clock(desired, observed, {}, T0)
    assert clocks == {"down": Lowering(T0, "watch"), "held": Lowering(T0, "ok")}
    steps = plan(desired, observed, now=T0, settle=HOUR, lowering=clocks, held=["held"])
    assert [(s.hostname, s.from_state, s.to_state) for s in steps] == [("up", "ok", "drain")]
    later = T0 + HOUR
    clocks = settle_clock(desired, observed, clocks, later)
    assert clocks["down"].since == T0  # the clock kept running
    steps = plan(desired, observed, now=later, settle=HOUR, lowering=clocks, held=["held"])
    assert [(s.hostname, s.to_state, s.action) for s in steps] == [("up", "drain", "drain"), ("down", "watch", "watch")]
    # an operator's release skips the settle clock
    steps = plan(desired, observed, now=T0, settle=HOUR, lowering={}, released=["down"])
    assert ("down", "watch") in [(s.hostname, s.to_state) for s in steps]


def test_the_settle_clock_restarts_when_the_lower_state_rises_again() -> None:
    observed = {"n": Observed("n", "drain")}
    c1 = settle_clock(desired_states([GpuDecision("n", "a", 0, "watch")]), observed, {}, T0)
    c2 = settle_clock(desired_states([GpuDecision("n", "a", 0, "demote")]), observed, c1, T0 + HOUR / 2)
    assert c2["n"] == Lowering(T0 + HOUR / 2, "demote")
    c3 = settle_clock(desired_states([GpuDecision("n", "a", 0, "drain")]), observed, c2, T0 + HOUR)
    assert c3 == {}


def test_a_pending_drain_is_planned_again() -> None:
    desired = desired_states([GpuDecision("n", "a", 0, "drain")])
    steps = plan(desired, {"n": Observed("n", "drain", pending=True)}, now=T0, settle=HOUR, lowering={})
    assert [(s.from_state, s.to_state) for s in steps] == [("drain", "drain")]
    assert not steps[0].escalates  # already off work: not counted twice by the breaker


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from([f"n{i}" for i in range(6)]), st.sampled_from(DECISIONS), min_size=1),
    st.dictionaries(st.sampled_from([f"n{i}" for i in range(6)]), st.sampled_from(DECISIONS), min_size=1),
)
def test_applying_the_plan_leaves_nothing_to_do(want: dict[str, str], carried: dict[str, str]) -> None:
    """Level-triggered and idempotent: after the steps are applied, the same inputs plan nothing."""
    desired = desired_states(GpuDecision(h, h, 0, d) for h, d in want.items())
    observed = {h: Observed(h, s) for h, s in carried.items()}
    later = T0 + 2 * HOUR
    clocks = settle_clock(desired, observed, settle_clock(desired, observed, {}, T0), later)
    steps = plan(desired, observed, now=later, settle=HOUR, lowering=clocks)
    for s in steps:
        assert s.to_state == (desired[s.hostname].state if s.hostname in desired else "ok")
        observed[s.hostname] = Observed(s.hostname, s.to_state)
    clocks = settle_clock(desired, observed, clocks, later)
    assert plan(desired, observed, now=later, settle=HOUR, lowering=clocks) == []
    assert all(o.ours == (desired[h].state if h in desired else "ok") for h, o in observed.items())


def test_breaker_bounds_take_the_smaller_and_never_zero() -> None:
    p = BreakerPolicy()
    assert [p.limit(n) for n in (1, 4, 10, 30, 400, 10_000)] == [1, 1, 1, 3, 5, 5]
    for bad in ({"max_fraction": 0}, {"max_nodes": 0}, {"window": timedelta(0)}):
        with pytest.raises(ValueError, match="breaker"):
            BreakerPolicy(**bad)  # type: ignore[arg-type]


def test_severity_order() -> None:
    assert sorted(DECISIONS, key=SEVERITY.__getitem__) == ["ok", "watch", "demote", "drain", "rma"]


def test_node_lists_expand_like_slurms() -> None:
    from actuate.target import expand_hostlist

    assert expand_hostlist("gpu[001-003,010],login1, a-b") == ["gpu001", "gpu002", "gpu003", "gpu010", "login1", "a-b"]
    assert expand_hostlist("") == []
    assert expand_hostlist("n[8-10]x") == ["n8x", "n9x", "n10x"]
    for bad in ("gpu[3-1]", "gpu[a-b]", "gpu[1", "gpu]"):
        with pytest.raises(ValueError, match="cannot read"):
            expand_hostlist(bad)
