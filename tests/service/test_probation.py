"""A GPU a drain let go stays demoted while its risk stays high (GPUHEALTH_PROBATION_RISK, _FOR):
across rounds and restarts in the service, and from the history alone in `gpuhealth score`.

The model here is all ECC head (risk 1.0, or 0 for the silent one); a pending row remap in the
samples of day 3, 00:00-03:00, is the drain."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd

from predictor.history_rounds import HistoryRounds
from predictor.score import score
from predictor.thresholds import Thresholds
from service.scorer import Scorer
from store import Store
from tests.service.tiny_model import constant_model, silent_model

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAY3 = T0 + timedelta(days=3)
TH = Thresholds(ecc_demote_for_s=12 * 3600)


def samples(hours: float = 4 * 24, uuid: str = "GPU-a") -> list[dict[str, Any]]:
    """A GPU's samples every 5 minutes from T0; a row remap is pending from day 3 00:00 to 03:00."""
    out = []
    for i in range(int(hours * 12)):
        t = T0 + timedelta(minutes=5 * i)
        out.append({"timestamp": t, "hostname": "n1", "gpu_uuid": uuid, "gpu_index": 0,
                    "model_name": "NVIDIA H100 80GB HBM3", "gpu_temp_c": 40.0 + i % 7, "power_w": 300.0 + i % 11,
                    "row_remap_pending": float(DAY3 <= t < DAY3 + timedelta(hours=3))})  # fmt: skip
    return out


def test_the_service_keeps_a_released_gpu_demoted_while_its_risk_holds_across_a_restart(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'd.db'}")
    store.samples.ingest(pd.DataFrame(samples()))
    risky = Scorer(store, constant_model(("ecc",)), TH, 300)
    at = [DAY3 + timedelta(hours=h) for h in range(10)]
    assert risky.run_once(at=at[1])[0]["decision"] == "drain"
    # The remap is no longer pending: the model's own demote would wait 12 h, the probation does not.
    rec = risky.run_once(at=at[4])[0]
    assert rec["decision"] == "demote"
    assert rec["reasons"][0].startswith("probation: a drain or RMA let it go on 2026-03-04 04:00 UTC")
    # A restart reads the chain from the stored decisions.
    again = Scorer(store, constant_model(("ecc",)), TH, 300)
    rec = again.run_once(at=at[5])[0]
    assert rec["decision"] == "demote" and rec["reasons"][0].startswith(
        "probation: a drain or RMA let it go on 2026-03-04 04:00"
    )
    # The risk falls: back to ok; when it rises again the chain is broken, so the model's wait applies.
    assert Scorer(store, silent_model(), TH, 300).run_once(at=at[6])[0]["decision"] == "ok"
    rec = again.run_once(at=at[7])[0]
    assert rec["decision"] == "watch" and rec["reasons"][0].startswith("demote pending")


def test_a_probation_ends_after_probation_for_and_is_off_at_zero(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'd.db'}")
    store.samples.ingest(pd.DataFrame(samples()))
    short = Scorer(
        store, constant_model(("ecc",)), Thresholds(ecc_demote_for_s=12 * 3600, probation_for_s=2 * 3600), 300
    )
    got = [short.run_once(at=DAY3 + timedelta(hours=h))[0] for h in (1, 4, 5, 6)]
    # Let go at 04:00: on probation at 04:00 and 05:00, over at 06:00; the demote it opened is then
    # held, as any standing demote, while the risk (1.0) stays at the release level.
    assert [r["decision"] for r in got] == ["drain", "demote", "demote", "demote"]
    assert got[2]["reasons"][0].startswith("probation: a drain or RMA let it go on 2026-03-04 04:00 UTC")
    assert got[3]["reasons"][0].startswith("demote held: demoted since 2026-03-04 04:00 UTC, and its risk 1.00")
    store2 = Store.open(f"sqlite:///{tmp_path / 'e.db'}")
    store2.samples.ingest(pd.DataFrame(samples()))
    off = Scorer(store2, constant_model(("ecc",)), Thresholds(ecc_demote_for_s=12 * 3600, probation_for_s=0), 300)
    assert [off.run_once(at=DAY3 + timedelta(hours=h))[0]["decision"] for h in (1, 4)] == ["drain", "watch"]


def test_gpuhealth_score_reads_the_release_from_the_history() -> None:
    """One-shot scoring has no stored decisions: the history's own hours say when the drain let it go."""
    frame = pd.DataFrame(samples())
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    model = constant_model(("ecc",))
    # The history's risk has been high for days: a wait longer than that keeps the model's own demote pending.
    long_wait = Thresholds(ecc_demote_for_s=5 * 86400)

    def at(hour: int, th: Thresholds = long_wait) -> pd.Series:
        out = score(model, frame, at=pd.Timestamp(DAY3 + timedelta(hours=hour)), thresholds=th,
                    past=HistoryRounds(model, frame, th))  # fmt: skip
        return out.iloc[0]

    assert at(1)["decision"] == "drain"
    row = at(4)
    assert row["decision"] == "demote"
    # The history's hours see the remap gone at 03:00 (the service above saw it at its next round, 04:00).
    assert row["reasons"][0].startswith("probation: a drain or RMA let it go on 2026-03-04 03:00 UTC")
    assert at(4, Thresholds(ecc_demote_for_s=5 * 86400, probation_for_s=0))["decision"] == "watch"
    # A GPU never drained is not on probation: the same history without the remap.
    clean = frame.assign(row_remap_pending=0.0)
    out = score(model, clean, at=pd.Timestamp(DAY3 + timedelta(hours=4)), thresholds=long_wait,
                past=HistoryRounds(model, clean, long_wait))  # fmt: skip
    assert out["decision"].tolist() == ["watch"]
