"""The scoring loop waits for a model's demote to hold (GPUHEALTH_DEMOTE_FOR, _FOR_ECC), across rounds and restarts.

The model here is all ECC head, so its wait is `ecc_demote_for_s`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from predictor.thresholds import Thresholds
from service.scorer import Scorer
from store import Store
from tests.service.tiny_model import constant_model

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def samples(hours: float, uuid: str = "GPU-a") -> list[dict[str, Any]]:
    """A GPU's samples every 5 minutes for `hours` from T0."""
    return [
        {"timestamp": T0 + timedelta(minutes=5 * i), "hostname": "n1", "gpu_uuid": uuid, "gpu_index": 0,
         "model_name": "NVIDIA H100 80GB HBM3", "gpu_temp_c": 40.0 + i % 7, "power_w": 300.0 + i % 11}
        for i in range(int(hours * 12))
    ]  # fmt: skip


def open_decision(store: Store) -> str:
    found, _ = store.decisions.find(state="open")
    return str(found[0]["decision"]) if found else "ok"


def test_a_model_demote_stands_after_its_risk_held_demote_for_and_a_restart_keeps_the_clock(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'd.db'}")
    store.samples.ingest(pd.DataFrame(samples(4 * 24)))
    start = T0 + timedelta(days=3)
    scorer = Scorer(store, constant_model(("ecc",)), Thresholds(ecc_demote_for_s=3 * 3600), 300)
    seen = []
    for h in range(3):
        recs = scorer.run_once(at=start + timedelta(hours=h))
        seen.append((recs[0]["decision"], open_decision(store)))
        assert recs[0]["reasons"][0].startswith("demote pending: risk at or above 0.70 since 2026-03-04 00:00 UTC")
    assert seen == [("watch", "watch")] * 3
    # A new scorer (a restart) reads the stored rounds: the risk has held 3 h at the next round.
    again = Scorer(store, constant_model(("ecc",)), Thresholds(ecc_demote_for_s=3 * 3600), 300)
    recs = again.run_once(at=start + timedelta(hours=3))
    assert recs[0]["decision"] == "demote" and open_decision(store) == "demote"
    assert not any(r.startswith("demote pending") for r in recs[0]["reasons"])


def test_a_dip_below_the_threshold_starts_the_clock_again(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'd.db'}")
    store.samples.ingest(pd.DataFrame(samples(4 * 24)))
    start = T0 + timedelta(days=3)
    th = Thresholds(ecc_demote_for_s=2 * 3600)
    high, low = Scorer(store, constant_model(("ecc",)), th, 300), Scorer(store, constant_model(), th, 300)
    got = [s.run_once(at=start + timedelta(hours=h))[0]["decision"]
           for h, s in enumerate([high, high, low, high, high, high])]  # fmt: skip
    assert got == ["watch", "watch", "ok", "watch", "watch", "demote"]


def test_gpuhealth_score_reads_how_long_the_risk_held_from_the_history() -> None:
    """One-shot scoring has no stored rounds: the history's own hours before the cutoff say it."""
    from predictor.history_rounds import HistoryRounds
    from predictor.score import score

    frame = pd.DataFrame(samples(4 * 24))
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    model, th = constant_model(("ecc",)), Thresholds(ecc_demote_for_s=3 * 3600)
    held = score(model, frame, thresholds=th, past=HistoryRounds(model, frame, th))
    assert held["decision"].tolist() == ["demote"]
    # A history that begins 6 h before the cutoff has no model score in its first hours (too
    # little history), so the risk has held only since it has one: pending.
    short = frame[frame["timestamp"] >= frame["timestamp"].max() - pd.Timedelta(hours=7, minutes=30)]
    short = short.reset_index(drop=True)
    pending = score(model, short, thresholds=th, past=HistoryRounds(model, short, th))
    assert pending["decision"].tolist() == ["watch"]
    assert pending["reasons"].iat[0][0].startswith("demote pending")
