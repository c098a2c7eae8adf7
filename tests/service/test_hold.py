"""A GPU's demote is held while its risk stays at the release level (GPUHEALTH_RELEASE_THRESHOLD):
across rounds and restarts in the service, and from the history alone in `gpuhealth score`.

The model's ECC head follows the GPU's age (`schedule_model`): 0 until day 3, then 1.0, then 0.5
(under the demote level, over the watch level) from day 3.25, then 0.2 from day 3.5, and 0.5 again
from day 3.75."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from predictor.history_rounds import HistoryRounds
from predictor.score import score
from predictor.thresholds import Thresholds
from service.scorer import Scorer
from store import Store
from tests.service.tiny_model import schedule_model

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY3 = T0 + timedelta(days=3)
STEPS = ((3.0, 1.0), (3.25, 0.5), (3.5, 0.2), (3.75, 0.5))
TH = Thresholds(ecc_demote_for_s=3600)
MODEL = schedule_model(STEPS)


def samples(hours: float = 4 * 24) -> list[dict[str, Any]]:
    """One GPU's samples every 5 minutes from T0."""
    return [
        {"timestamp": T0 + timedelta(minutes=5 * i), "hostname": "n1", "gpu_uuid": "GPU-a", "gpu_index": 0,
         "model_name": "NVIDIA H100 80GB HBM3", "gpu_temp_c": 40.0 + i % 7, "power_w": 300.0 + i % 11}
        for i in range(int(hours * 12))
    ]  # fmt: skip


def rounds(store: Store, th: Thresholds, hours: list[int]) -> list[dict[str, Any]]:
    """The GPU's record at each round, DAY3 + h, each round by a scorer of its own (a restart)."""
    return [Scorer(store, MODEL, th, 300).run_once(at=DAY3 + timedelta(hours=h))[0] for h in hours]


def new_store(tmp_path: Path, name: str = "d") -> Store:
    s = Store.open(f"sqlite:///{tmp_path / name}.db")
    s.samples.ingest(pd.DataFrame(samples()))
    return s


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return new_store(tmp_path)


def test_the_service_holds_a_demote_while_the_risk_stays_at_the_release_level(store: Store) -> None:
    # Risk 1.0 from 00:00: pending, then demoted at 01:00 (a 1 h wait); 0.5 from 06:00 holds it, each
    # round read from the stored decisions (a new scorer every round); 0.2 from 12:00 ends it; 0.5
    # again from 18:00 is a watch: the chain is broken.
    got = rounds(store, TH, [0, 1, 5, 7, 11, 13, 19])
    assert [r["decision"] for r in got] == ["watch", "demote", "demote", "demote", "demote", "ok", "watch"]
    assert got[3]["reasons"][0] == (
        "demote held: demoted since 2026-03-04 01:00 UTC, and its risk 0.50 is still at or above 0.30; "
        "interruptible work only until it falls under that"
    )
    assert got[3]["reasons"][1].startswith("risk 0.50 (ECC 0.50)")
    assert not any(r.startswith("demote held") for r in got[2]["reasons"])  # the model's own demote


def test_a_release_at_the_demote_level_ends_the_demote_when_the_risk_falls_under_it(tmp_path: Path) -> None:
    got = rounds(new_store(tmp_path), Thresholds(ecc_demote_for_s=3600, release=0.7), [0, 1, 7])
    assert [r["decision"] for r in got] == ["watch", "demote", "watch"]
    # A release under the watch level holds the demote through 0.2 too.
    low = Thresholds(ecc_demote_for_s=3600, release=0.15)
    got = rounds(new_store(tmp_path, "low"), low, [0, 1, 7, 13, 19])
    assert [r["decision"] for r in got] == ["watch", "demote", "demote", "demote", "demote"]
    assert got[3]["reasons"][0].startswith("demote held: demoted since 2026-03-04 01:00 UTC, and its risk 0.20")


def test_gpuhealth_score_reads_the_standing_demote_from_the_history() -> None:
    """One-shot scoring has no stored decisions: the history's own hours say the GPU was demoted."""
    frame = pd.DataFrame(samples())
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)

    def at(hour: int, th: Thresholds = TH) -> pd.Series:
        out = score(MODEL, frame, at=pd.Timestamp(DAY3 + timedelta(hours=hour)), thresholds=th,
                    past=HistoryRounds(MODEL, frame, th))  # fmt: skip
        return out.iloc[0]

    row = at(7)
    assert row["decision"] == "demote"
    # The history's hours: the risk reached 1.0 at 00:00 and its 1 h wait ended at 01:00.
    assert row["reasons"][0].startswith("demote held: demoted since 2026-03-04 01:00 UTC")
    assert at(7, Thresholds(ecc_demote_for_s=3600, release=0.7))["decision"] == "watch"
    assert at(13)["decision"] == "ok"
    assert at(19)["decision"] == "watch"
