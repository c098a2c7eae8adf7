"""A link's habit belongs to its slot: a GPU put in a slot whose link has always replayed is judged
against the slot's history (the GPUs it replaced), not against none (decision 0089)."""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest

from core.history import BUS_IDS_ATTR, validate
from predictor.features import build_features
from simulator.families import training_config
from simulator.run import simulate

T0 = pd.Timestamp("2026-05-01T00:00:00Z")
H100 = "NVIDIA H100 80GB HBM3"
DAY_H = 24
CUT = T0 + pd.Timedelta(days=30)
SURPRISE = ["replay_surprise_6h", "replay_surprise_1d"]


def gpu(uuid: str, index: int, first_h: int, last_h: int, replaying: np.ndarray, host: str = "node-a") -> pd.DataFrame:
    """Hourly rows from hour `first_h` to `last_h` (hours since T0); the replay counter rises (by 5) in the
    hours where `replaying` (indexed by hour since T0) is set."""
    hours = np.arange(first_h, last_h + 1)
    rises = np.where(replaying[hours], 5.0, 0.0)
    rises[0] = 0.0
    return pd.DataFrame(
        {
            "timestamp": T0 + pd.to_timedelta(hours, unit="h"),
            "hostname": host,
            "gpu_uuid": uuid,
            "gpu_index": index,
            "model_name": H100,
            "gpu_temp_c": 40.0,
            "pcie_replay_count": np.cumsum(rises),
        }
    )


def habit(every: int) -> np.ndarray:
    """A link that replays one hour in `every`, all month."""
    out = np.zeros(31 * DAY_H, dtype=bool)
    out[::every] = True
    return out


def recent(hours: tuple[int, ...]) -> np.ndarray:
    """A link quiet but for these hours before the cutoff."""
    out = np.zeros(31 * DAY_H, dtype=bool)
    out[[30 * DAY_H - h for h in hours]] = True
    return out


def features(*parts: pd.DataFrame, cut: pd.Timestamp | pd.DatetimeIndex = CUT) -> pd.DataFrame:
    frame = validate(pd.concat(parts, ignore_index=True), source="test")
    cuts = pd.DatetimeIndex([cut] if isinstance(cut, pd.Timestamp) else cut)
    return build_features(frame, cuts).set_index(["gpu_uuid", "cutoff"])


def fleet() -> list[pd.DataFrame]:
    """node-a slot 0: GPU-old replayed one hour in four for 20 days and was pulled; GPU-new took its slot a
    day later and replays in 2 of its last 6 hours. Slot 1: GPU-fresh, never replaced, replays the same
    hours as GPU-new over the same 9 days (its first hours there). node-b slot 0 replays one hour in four
    all month and was never replaced."""
    now = recent((1, 4))
    return [
        gpu("GPU-old", 0, 0, 20 * DAY_H, habit(4)),
        gpu("GPU-new", 0, 21 * DAY_H, 30 * DAY_H, now),
        gpu("GPU-fresh", 1, 21 * DAY_H, 30 * DAY_H, now),
        gpu("GPU-b0", 0, 0, 30 * DAY_H, habit(4), host="node-b"),
    ]


def test_a_new_gpu_in_a_slot_that_always_replayed_is_judged_by_the_slots_habit() -> None:
    x = features(*fleet())
    new, fresh = x.loc[("GPU-new", CUT), SURPRISE], x.loc[("GPU-fresh", CUT), SURPRISE]
    # The same hours, the same age: only the slot's history tells them apart.
    assert (x.loc[("GPU-new", CUT), ["replay_active_hours_6h", "replay_active_hours_1d"]] == 2).all()
    assert (fresh > 2.0).all(), fresh  # against the prior alone (0.01 an hour): rare
    # Its predecessor replayed one hour in four: two in six is its slot's habit.
    assert (new < 1.0).all(), new


def test_gpus_never_replaced_keep_their_own_habit() -> None:
    """The slot's history changes the replaced GPU's features only: dropping its predecessor changes
    nothing for the others, bit for bit."""
    parts = fleet()
    cuts = pd.date_range(CUT - pd.Timedelta(days=8), CUT, freq="7h")
    with_old = features(*parts, cut=cuts)
    without = features(*parts[1:], cut=cuts)
    others = with_old.index.get_level_values("gpu_uuid").isin(["GPU-fresh", "GPU-b0"])
    pd.testing.assert_frame_equal(with_old[others], without.loc[with_old.index[others]], check_exact=True)
    changed = with_old.loc["GPU-new", SURPRISE] != without.loc["GPU-new", SURPRISE]
    assert changed.any().all()


def test_the_slot_is_the_host_and_index_and_a_gpu_alive_beside_it_is_no_predecessor() -> None:
    """A GPU of another host or slot, or one whose rows overlap the new GPU's (a renumbered neighbour),
    lends it no habit."""
    now = recent((1, 4))
    alone = features(gpu("GPU-new", 0, 21 * DAY_H, 30 * DAY_H, now))
    for other in (
        gpu("GPU-old", 1, 0, 20 * DAY_H, habit(4)),  # another slot
        gpu("GPU-old", 0, 0, 20 * DAY_H, habit(4), host="node-b"),  # another host
        gpu("GPU-old", 0, 0, 22 * DAY_H, habit(4)),  # still reporting when GPU-new came
    ):
        x = features(other, gpu("GPU-new", 0, 21 * DAY_H, 30 * DAY_H, now))
        pd.testing.assert_series_equal(x.loc[("GPU-new", CUT), SURPRISE], alone.loc[("GPU-new", CUT), SURPRISE])


@pytest.mark.parametrize("nan", [False, True])
def test_the_slots_habit_is_the_same_at_one_cutoff_and_many(nan: bool) -> None:
    """One cutoff reads only its windows' rows; many take whole columns: the same numbers either way,
    with NaN samples or without."""
    parts = fleet()
    if nan:
        parts[0].loc[parts[0].index[5::17], "pcie_replay_count"] = np.nan
    cuts = pd.DatetimeIndex([CUT - pd.Timedelta(hours=30), CUT])
    many = features(*parts, cut=cuts)
    for c in cuts:
        one = features(*parts, cut=c)
        pd.testing.assert_frame_equal(one, many.loc[one.index], check_exact=False, rtol=1e-12)


def test_an_unknown_index_names_no_slot() -> None:
    """GPUs whose index is unknown (-1 in a history) share no slot, and so no habit."""
    now = recent((1, 4))
    alone = features(gpu("GPU-new", -1, 21 * DAY_H, 30 * DAY_H, now))
    x = features(gpu("GPU-old", -1, 0, 20 * DAY_H, habit(4)), gpu("GPU-new", -1, 21 * DAY_H, 30 * DAY_H, now))
    pd.testing.assert_series_equal(x.loc[("GPU-new", CUT), SURPRISE], alone.loc[("GPU-new", CUT), SURPRISE])


def test_where_the_frame_knows_the_bus_ids_the_slot_is_the_bus_id() -> None:
    """A new GPU numbered 1 in the bus id GPU-old held as 0 (the node booted with another GPU missing) takes
    its habit; one at GPU-old's index but another bus id does not."""
    now = recent((1, 4))
    old = gpu("GPU-old", 0, 0, 20 * DAY_H, habit(4))
    alone = features(gpu("GPU-new", 1, 21 * DAY_H, 30 * DAY_H, now)).loc[("GPU-new", CUT), SURPRISE]
    for new_index, new_bus, inherits in ((1, "00000000:41:00.0", True), (0, "00000000:52:00.0", False)):
        frame = validate(pd.concat([old, gpu("GPU-new", new_index, 21 * DAY_H, 30 * DAY_H, now)]), source="test")
        frame.attrs[BUS_IDS_ATTR] = {"GPU-old": "00000000:41:00.0", "GPU-new": new_bus}
        got = build_features(frame, CUT).set_index("gpu_uuid").loc["GPU-new", SURPRISE].astype(float)
        assert (got < 1.0).all() if inherits else got.equals(alone.rename("GPU-new")), (new_index, got)


def test_the_simulator_replaces_gpus_in_their_slot_and_exercises_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated fleet replaces a failed GPU with a new UUID in the same slot (`FleetSim._repairs`), its
    flaky link staying with the slot: the replacements' habit is their slots', and two slots lose two GPUs
    within 60 days (noisy-links, seed 7, 32 nodes x 8 GPUs, 60 days at 8x the field's failure rate)."""
    slots = importlib.import_module("predictor.features.slots")
    frame, fails = simulate(training_config("noisy-links", 7, nodes=32, acceleration=8.0), 60)
    per_slot = frame.groupby(["hostname", "gpu_index"], observed=True)["gpu_uuid"].nunique()
    assert (per_slot > 1).sum() >= 20
    cuts = pd.date_range(frame["timestamp"].min() + pd.Timedelta(days=10), frame["timestamp"].max(), freq="1D")
    x = build_features(frame, cuts, failures=fails)
    monkeypatch.setattr(slots, "predecessors", lambda f, q: slots.NONE)
    own = build_features(frame, cuts, failures=fails)
    changed = (x[SURPRISE] != own[SURPRISE]).any(axis=1)
    assert x.loc[changed, "gpu_uuid"].nunique() >= 10
    assert x.drop(columns=SURPRISE).equals(own.drop(columns=SURPRISE))
    lost = x.loc[x["slot_gpus_failed_60d"] >= 2, ["hostname", "gpu_index"]].drop_duplicates()
    assert len(lost) >= 2


def test_bus_ids_match_however_the_gpus_are_ordered() -> None:
    """Three slots by bus id, the queries' GPUs in another order than the frame's: each new GPU finds its
    own predecessor only (a slot's code is the same for the GPUs and for the queries)."""
    now = recent((1, 4))
    # A GPU long gone, first in the frame's order: its bus id is known, it is no query.
    parts, buses = [gpu("GPU-0-gone", 7, 0, 5 * DAY_H, habit(2))], {"GPU-0-gone": "00000000:99:00.0"}
    for k, (bus, every) in enumerate((("00000000:C1:00.0", 0), ("00000000:41:00.0", 4), ("00000000:18:00.0", 0))):
        if every:
            parts.append(gpu(f"GPU-z-old{k}", k, 0, 20 * DAY_H, habit(every)))
        else:
            parts.append(gpu(f"GPU-z-old{k}", k, 0, 20 * DAY_H, np.zeros(31 * DAY_H, dtype=bool)))
        parts.append(gpu(f"GPU-a-new{k}", k, 21 * DAY_H, 30 * DAY_H, now))
        buses |= {f"GPU-z-old{k}": bus, f"GPU-a-new{k}": bus}
    frame = validate(pd.concat(parts), source="test")
    frame.attrs[BUS_IDS_ATTR] = buses
    got = build_features(frame, CUT).set_index("gpu_uuid")[SURPRISE]
    assert (got.loc["GPU-a-new1"] < 1.0).all(), got
    assert (got.loc[["GPU-a-new0", "GPU-a-new2"]] > 2.0).all().all(), got
