"""The two `PastRounds` answer alike on the same history: the service's stored rounds (`StoredRounds`,
asked before each of its hourly rounds) and the history's hours replayed (`HistoryRounds`, what
`gpuhealth score` asks), for the same GPUs at the same cutoffs, where `predictor.past` says they agree.

One node of four GPUs, eight days of 5-minute samples with a daily load cycle. On the last day the
model's ECC head (every GPU's) rises to 0.9 at 03:00 (a demote after its 3 h wait), falls to 0.5 at
09:00 (held), 0.2 at 13:00 (released; over the probation's 0.1) and rises to 0.5 at 17:00; GPU-0's core
runs up to 12 °C hotter from 00:00 (the heat alone); GPU-1's row remap is pending from 05:00 to 11:00
(a drain, then a probation) and again from 15:00. The remap hold is on with a 2 h hold of its own."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from predictor.history_rounds import HistoryRounds
from predictor.past import PastRounds
from predictor.score import score
from predictor.thresholds import Thresholds
from service.scorer import Scorer
from service.stored_rounds import StoredRounds
from store import Store
from tests.postgres import postgres_server  # noqa: F401  (session fixture)
from tests.service.tiny_model import schedule_model

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAYS = 8
LAST = T0 + timedelta(days=DAYS - 1)
HOURS = range(-1, 22)
"""The service's rounds: every hour on the hour from LAST - 1 h (nothing happens before LAST)."""
UUIDS = [f"GPU-{g}" for g in range(4)]


def _on_last_day(hour: float) -> float:
    """A GPU's age in days at LAST + `hour` h (every GPU reports from T0)."""
    return DAYS - 1 + hour / 24


MODEL = schedule_model(tuple((_on_last_day(h), r) for h, r in ((1, 0.05), (3, 0.9), (9, 0.5), (13, 0.2), (17, 0.5))))
TH = Thresholds(ecc_demote_for_s=3 * 3600, thermal_heat_z=4.0, thermal_heat_for_s=3 * 3600, remap_hold_risk=0.3,
                remap_hold_for_s=2 * 3600)  # fmt: skip
QUESTIONS = ("drained", "demoted", "released", "risk_since", "heat_since", "ecc_since")
"""In the order `gpuhealth score` is best asked (the longest span first: the replay keeps its hours)."""
SPANS: dict[str, Callable[[Thresholds], pd.Timedelta]] = {
    "risk_since": lambda th: th.longest_wait,
    "heat_since": lambda th: th.heat_hold,
    "ecc_since": lambda th: pd.Timedelta(seconds=th.remap_hold_for_s),
}
"""The span each run's question reads: a run begun before it is answered at its start, by either."""


def samples() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    n, t = DAYS * 288, np.arange(DAYS * 288)
    hour = (t - (DAYS - 1) * 288) / 12  # hours since LAST
    parts = []
    for g in range(4):
        power = 350 + 120 * np.sin(2 * np.pi * t / 288 + g) + rng.normal(0, 15, n)
        temp = 30 + 0.08 * power + rng.normal(0, 0.8, n)
        if g == 0:  # its cooler failing from LAST, ramping over 6 h
            temp += np.clip(hour / 6, 0, 1) * 12.0
        pending = ((hour >= 5) & (hour < 11)) | (hour >= 15) if g == 1 else np.zeros(n, dtype=bool)
        parts.append(pd.DataFrame({
            "timestamp": pd.date_range(T0, periods=n, freq="5min"), "hostname": "n1", "gpu_uuid": f"GPU-{g}",
            "gpu_index": g, "model_name": "NVIDIA H100 80GB HBM3", "gpu_temp_c": np.round(temp), "power_w": power,
            "row_remap_pending": pending.astype(float),
        }))  # fmt: skip
    return pd.concat(parts, ignore_index=True)


def asked(past: PastRounds, cutoff: pd.Timestamp) -> dict[str, Any]:
    """Every question of `past` about every GPU at the cutoff, each answer made comparable: a run's start
    no earlier than its question's span, a set of GPUs sorted."""
    out: dict[str, Any] = {}
    for q in QUESTIONS:
        answer = getattr(past, q)(UUIDS, cutoff)
        if q == "drained":
            out[q] = sorted(answer)
            continue
        since = {u: pd.Timestamp(t) for u, t in answer.items()}
        if q in SPANS:
            since = {u: max(t, cutoff - SPANS[q](TH)) for u, t in since.items()}
        out[q] = since
    return out


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[pd.DataFrame, dict[int, dict[str, Any]], list[str]]:
    """The history; what the service's stored rounds answered before each of its rounds; its decisions
    (on SQLite, and on PostgreSQL, whose stored rounds are read through the driver: `store.round_rows`)."""
    frame = samples()
    if request.param == "sqlite":
        url = f"sqlite:///{Path(tmp_path_factory.mktemp('past')) / 'p.db'}"
    else:
        url = request.getfixturevalue("postgres_server").create_database("past_rounds")
    store = Store.open(url)
    store.samples.ingest(frame)
    scorer = Scorer(store, MODEL, TH, 300)
    answers, decisions = {}, []
    for h in HOURS:
        at = LAST + timedelta(hours=h)
        answers[h] = asked(StoredRounds(store, TH), pd.Timestamp(at))
        decisions += [f"{h} {r['gpu_uuid']} {r['decision']}" for r in scorer.run_once(at=at)]
    return frame.assign(timestamp=pd.to_datetime(frame["timestamp"], utc=True)), answers, decisions


def test_the_stored_rounds_and_the_replayed_hours_answer_alike(
    served: tuple[pd.DataFrame, dict[int, dict[str, Any]], list[str]],
) -> None:
    frame, stored, _ = served
    for h in HOURS:
        cutoff = pd.Timestamp(LAST + timedelta(hours=h))
        assert asked(HistoryRounds(MODEL, frame, TH), cutoff) == stored[h], f"at LAST + {h} h"
    # Not alike by saying nothing: every question has an answer at some cutoff (the history is built so).
    for q in QUESTIONS:
        assert any(stored[h][q] for h in HOURS), q
    assert stored[12]["heat_since"] == {"GPU-0": pd.Timestamp(LAST + timedelta(hours=9))}  # clipped: began 07:00
    assert stored[12]["released"] == {"GPU-1": pd.Timestamp(LAST + timedelta(hours=11))}


def test_the_service_and_gpuhealth_score_decide_alike_from_them(
    served: tuple[pd.DataFrame, dict[int, dict[str, Any]], list[str]],
) -> None:
    frame, _, decisions = served
    replayed = []
    for h in HOURS:
        out = score(MODEL, frame, at=pd.Timestamp(LAST + timedelta(hours=h)), thresholds=TH,
                    past=HistoryRounds(MODEL, frame, TH))  # fmt: skip
        replayed += [f"{h} {u} {d}" for u, d in zip(out["gpu_uuid"], out["decision"], strict=True)]
    assert sorted(replayed) == sorted(decisions)
    # Every standing decision the past makes shows: the wait, the hold, the heat alone, a drain, a probation.
    assert {d.split()[2] for d in decisions} == {"ok", "watch", "demote", "drain"}
    assert "16 GPU-0 demote" in decisions and "12 GPU-1 demote" in decisions and "4 GPU-2 watch" in decisions
