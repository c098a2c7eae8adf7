"""Feature families run side by side in threads (`FeatureContext.run_all`): the same features, bit
for bit, whatever the number of lanes; a family that reads another's features waits for it; an
error in one family is raised and stops the families not yet started."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pandas as pd
import pytest

from predictor.features import SPECS, build_features
from predictor.features.context import Columns, Family, FeatureContext
from tests.predictor.features.test_features_identity import cutoffs, fleets  # noqa: F401  (a fixture)


@pytest.mark.parametrize("fleet", ["hourly", "15min"])
@pytest.mark.parametrize("when", ["latest", "earlier", "many"])
def test_families_side_by_side_give_the_features_one_by_one_gives(
    fleets: dict[str, pd.DataFrame],  # noqa: F811
    fleet: str,
    when: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    frame = fleets[fleet]
    cut = cutoffs(frame)[when]
    threads: set[str] = set()

    def seen(fam: Family) -> Family:
        def run(ctx: FeatureContext) -> Columns:
            threads.add(threading.current_thread().name)
            return fam.compute(ctx)

        run.__name__ = fam.name
        return replace(fam, compute=run)

    one = build_features(frame, cut, lanes=1)
    wrapped = {id(s.family): seen(s.family) for s in SPECS}
    specs = tuple(replace(s, family=wrapped[id(s.family)]) for s in SPECS)
    monkeypatch.setattr("predictor.features.SPECS", specs)
    for lanes in (2, 4):
        threads.clear()
        side = build_features(frame, cut, lanes=lanes)
        assert len({t for t in threads if t.startswith("features")}) >= 2  # they did run side by side
        pd.testing.assert_frame_equal(side, one, check_exact=True)
    assert one["heat_vs_node_own_z"].notna().any() and one["mem_spread_z"].notna().any()


def context(families: dict[str, Family]) -> FeatureContext:
    """A context over three queries for made-up families (they read nothing of the frame)."""
    q = SimpleNamespace(c=np.zeros(3))
    return FeatureContext(cast(Any, None), cast(Any, q), pd.DataFrame(), families)


def test_a_family_that_reads_another_waits_for_it_and_it_runs_once() -> None:
    started = threading.Event()
    calls: list[str] = []

    def slow(ctx: FeatureContext) -> Columns:
        calls.append("slow")
        started.set()
        time.sleep(0.2)  # the reader asks for its feature meanwhile, from the other lane
        return {"b": np.arange(3.0)}

    def reader(ctx: FeatureContext) -> Columns:
        assert started.wait(5)
        return {"a": ctx.feature("b") + 1.0}

    b, a = Family(slow, (), heavy=True), Family(reader, ())
    done = context({"a": a, "b": b}).run_all(2)
    assert calls == ["slow"]
    assert np.array_equal(done["a"], [1.0, 2.0, 3.0])


def test_an_error_in_a_family_is_raised_once_the_running_families_stopped() -> None:
    ended: list[str] = []

    def broken(ctx: FeatureContext) -> Columns:
        raise RuntimeError("broken family")

    def slow(ctx: FeatureContext) -> Columns:
        time.sleep(0.3)
        ended.append("slow")
        return {}

    fams = {"x": Family(slow, (), heavy=True), "y": Family(broken, (), heavy=True)}
    with pytest.raises(RuntimeError, match="broken family"):
        context(fams).run_all(2)
    assert ended == ["slow"]  # nothing of the build runs on after the error is raised
    assert not [t for t in threading.enumerate() if t.name.startswith("features")]


def test_a_small_history_runs_in_one_lane_unless_told(
    fleets: dict[str, pd.DataFrame],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below LANE_MIN_ROWS hour rows threads cost more than they give: one lane, unless `lanes` is given."""
    import predictor.features as features

    asked: list[int] = []
    real = FeatureContext.run_all

    def run_all(self: FeatureContext, lanes: int = 1) -> Columns:
        asked.append(lanes)
        return real(self, lanes)

    monkeypatch.setattr(FeatureContext, "run_all", run_all)
    monkeypatch.setattr(features, "LANES", 2)
    frame = fleets["hourly"]
    cut = frame["timestamp"].max()
    build_features(frame, cut)
    build_features(frame, cut, lanes=2)
    monkeypatch.setattr(features, "LANE_MIN_ROWS", 1000)
    build_features(frame, cut)
    assert len(frame) < 300_000 and asked == [1, 2, 2]
