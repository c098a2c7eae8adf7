"""A thermal demote on the core's heat alone (GPUHEALTH_THERMAL_HEAT_Z, GPUHEALTH_DEMOTE_FOR_HEAT, and
the heat over its node's, GPUHEALTH_THERMAL_HEAT_VS_NODE_Z): a GPU whose heat has counted for the hold
is demoted whatever its risk, in the service (each round reads how long from the stored rounds) and
in `gpuhealth score` (from the history's own hours) alike.

One node of four GPUs, eight days of 5-minute samples with a daily load cycle; from day 7, GPU-0's
core runs up to 12 °C hotter at the same power (its cooler failing, ramping over 6 h). The model says
0 for every GPU, so only the heat can demote."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from predictor.conditions import HEAT_COLUMNS
from predictor.history_rounds import HistoryRounds
from predictor.score import score
from predictor.thresholds import Thresholds
from service.scorer import Scorer
from store import Store
from tests.service.tiny_model import silent_model

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY7 = T0 + timedelta(days=7)
HOURS = list(range(13))
TH = Thresholds(thermal_heat_z=4.0, thermal_heat_for_s=3 * 3600)
MODEL = silent_model()


def samples(
    days: int = 8, hot_from_day: float = 7.0, rise_c: float = 12.0, hot: tuple[int, ...] = (0,), room_c: float = 0.0
) -> pd.DataFrame:
    """`room_c`: the room's air swings by this much over 1000 minutes and drifts by 0.7 of it over 9 days."""
    rng = np.random.default_rng(3)
    n, t = days * 288, np.arange(days * 288)
    room = room_c * (np.sin(2 * np.pi * t / 200) + 0.7 * np.sin(2 * np.pi * t / (288 * 9)))
    parts = []
    for g in range(4):
        power = 350 + 120 * np.sin(2 * np.pi * t / 288 + g) + rng.normal(0, 15, n)
        temp = 30 + 0.08 * power + room + rng.normal(0, 0.8, n)
        if g in hot:
            temp += np.clip((t / 288 - hot_from_day) * 4, 0, 1) * rise_c
        parts.append(pd.DataFrame({
            "timestamp": pd.date_range(T0, periods=n, freq="5min"), "hostname": "n1", "gpu_uuid": f"GPU-{g}",
            "gpu_index": g, "model_name": "NVIDIA H100 80GB HBM3", "gpu_temp_c": np.round(temp), "power_w": power,
        }))  # fmt: skip
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def fleet() -> pd.DataFrame:
    return samples()


def served(
    tmp_path: Path, fleet: pd.DataFrame, th: Thresholds, start: datetime = DAY7
) -> tuple[Store, list[dict[str, dict[str, Any]]]]:
    """Each GPU's record at each hour of HOURS after `start`, every round by a scorer of its own (a restart)."""
    store = Store.open(f"sqlite:///{tmp_path / 'heat'}.db")
    store.samples.ingest(fleet)
    out = []
    for h in HOURS:
        recs = Scorer(store, MODEL, th, 300).run_once(at=start + timedelta(hours=h))
        out.append({str(r["gpu_uuid"]): r for r in recs})
    return store, out


def test_the_service_demotes_once_the_heat_has_held_and_gpuhealth_score_agrees(
    tmp_path: Path, fleet: pd.DataFrame
) -> None:
    store, rounds = served(tmp_path, fleet, TH)
    # The heat each round judged, as stored: GPU-0 climbs through the level and stays; the others never near it.
    heat = store.decisions.recent_rounds(["GPU-0", "GPU-1"], DAY7, DAY7 + timedelta(hours=13), of=("heat_z",))
    hot0 = [z is not None and z >= 4.0 for u, _, (z,) in heat if u == "GPU-0"]
    assert len(hot0) == len(HOURS) and max(z or 0 for u, _, (z,) in heat if u == "GPU-1") < 1.0
    first = hot0.index(True)
    assert 2 <= first <= 8 and all(hot0[first:])  # the heat reaches the level inside the rounds, and holds
    # Demoted three hours (three rounds an hour apart) after its heat first counted, not before.
    expected = ["demote" if h >= first + 3 else "ok" for h in HOURS]
    assert [r["GPU-0"]["decision"] for r in rounds] == expected
    assert all(r[f"GPU-{g}"]["decision"] == "ok" for r in rounds for g in (1, 2, 3))
    said = rounds[first + 3]["GPU-0"]["reasons"]
    began = DAY7 + timedelta(hours=first)
    assert said[0].startswith("thermal demote on heat alone: the core runs +")
    assert f"at 4 σ or more in every round since {began:%Y-%m-%d %H:%M} UTC (the hold: 3 h)" in said[0]
    assert said[1] == "risk 0.00 (ECC 0.00)"
    (dec,) = [d for d in store.decisions.find(state="active")[0] if d["gpu_uuid"] == "GPU-0"]
    assert dec["decision"] == "demote" and dec["created_at"] == DAY7 + timedelta(hours=first + 3)
    # `gpuhealth score` reads the same hold from the history's own hours.
    frame = fleet.assign(timestamp=pd.to_datetime(fleet["timestamp"], utc=True))
    for h in (first + 2, first + 3, HOURS[-1]):
        row = score(MODEL, frame, at=pd.Timestamp(DAY7 + timedelta(hours=h)), thresholds=TH,
                    past=HistoryRounds(MODEL, frame, TH)).set_index("gpu_uuid").loc["GPU-0"]  # fmt: skip
        assert row["decision"] == expected[h]


def test_off_by_default_level_zero_nothing_is_demoted_on_heat(tmp_path: Path, fleet: pd.DataFrame) -> None:
    _, rounds = served(tmp_path, fleet, Thresholds(thermal_heat_z=0.0))
    assert {r["decision"] for rs in rounds for r in rs.values()} == {"ok"}


def test_a_node_wide_heat_episode_is_a_node_finding_not_four_demotes(tmp_path: Path) -> None:
    """Every GPU of the node runs 12 °C hotter together (its air, its fans): no GPU stands out of its
    node, so none is demoted on its heat; the node finding watches them all instead."""
    _, rounds = served(tmp_path, samples(hot=(0, 1, 2, 3)), TH)
    assert not any(r["decision"] == "demote" for rs in rounds for r in rs.values())
    last = rounds[-1]
    assert {r["decision"] for r in last.values()} == {"watch"}
    assert all(any("node-wide heat" in x for x in r["reasons"]) for r in last.values())


def test_the_heat_over_its_node_demotes_where_the_room_swings_and_its_own_heat_stays_under_the_level(
    tmp_path: Path,
) -> None:
    """Ten days in a room whose air swings by 3 °C: from day 9 GPU-0's core runs up to 10 °C hotter. The
    swings widen its own spread of heat, so its heat over its own past and its node stays under 4 σ;
    against its node's GPUs, in the same room, it stands far out. The rounds count from the first in
    which both yardsticks hold (that over its node at 5 σ, its own at 2 σ), across restarts; with the
    node's yardstick off it is never demoted."""
    fleet, day9 = samples(days=10, hot_from_day=9.0, rise_c=10.0, room_c=3.0), T0 + timedelta(days=9)
    th = Thresholds(thermal_heat_z=4.0, thermal_heat_vs_node_z=5.0, thermal_heat_vs_node_excess_z=2.0,
                    thermal_heat_for_s=3 * 3600)  # fmt: skip
    store, rounds = served(tmp_path, fleet, th, start=day9)
    judged = store.decisions.recent_rounds(["GPU-0"], day9, day9 + timedelta(hours=13), of=HEAT_COLUMNS)
    values = np.array([[np.nan if v is None else v for v in vs] for *_, vs in judged])
    heat, vs_node = values[:, 0], values[:, 1]
    assert len(heat) == len(HOURS) and np.nanmax(heat) < 4.0  # its own yardstick never reaches the level
    counts = (vs_node >= 5.0) & (heat >= 2.0)
    first = int(np.argmax(counts))
    assert 3 <= first <= 9 and counts[first:].all()
    assert (vs_node[:first] >= 5.0).any()  # over its node first, with too little heat of its own: not yet
    expected = ["demote" if h >= first + 3 else "ok" for h in HOURS]
    assert [r["GPU-0"]["decision"] for r in rounds] == expected
    assert all(r[f"GPU-{g}"]["decision"] == "ok" for r in rounds for g in (1, 2, 3))
    said = rounds[first + 3]["GPU-0"]["reasons"][0]
    assert said.startswith("thermal demote on heat alone: the core runs hotter than its node's GPUs by +")
    assert f"in every round since {day9 + timedelta(hours=first):%Y-%m-%d %H:%M} UTC (the hold: 3 h)" in said
    # `gpuhealth score` reads the same from the history's own hours.
    frame = fleet.assign(timestamp=pd.to_datetime(fleet["timestamp"], utc=True))
    for h in (first + 2, first + 3):
        row = score(MODEL, frame, at=pd.Timestamp(day9 + timedelta(hours=h)), thresholds=th,
                    past=HistoryRounds(MODEL, frame, th)).set_index("gpu_uuid").loc["GPU-0"]  # fmt: skip
        assert row["decision"] == expected[h]
    (tmp_path / "off").mkdir()
    _, off = served(tmp_path / "off", fleet, replace(th, thermal_heat_vs_node_z=0.0), start=day9)
    assert {r["decision"] for rs in off for r in rs.values()} == {"ok"}
