"""Fleet mode's puller against a fake Prometheus (httpx.MockTransport) and a real SQLite store."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import httpx
import pandas as pd
import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry, generate_latest

from core.history import HistoryError
from service.puller import PrometheusPuller
from store import Store, StoreUnavailable
from store.schema import T_GPUS
from tests.core.test_prom_import import URL, FakePrometheus, gpu_labels

STEP = 30
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ms(step: int) -> int:
    return int(T0.timestamp() * 1000) + step * STEP * 1000


def at(step: int) -> datetime:
    return T0 + timedelta(seconds=step * STEP)


def fleet(steps: int, gpus: int = 2) -> FakePrometheus:
    """`gpus` GPUs on node-a reporting a temperature and the XID gauge at every step in 0..steps-1."""
    p = FakePrometheus()
    for i in range(gpus):
        p.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(i), {ms(k): 40.0 + i + k for k in range(steps)})
        p.add("DCGM_FI_DEV_XID_ERRORS", gpu_labels(i), {ms(k): 0.0 for k in range(steps)})
    return p


class Clock:
    def __init__(self, step: int) -> None:
        self.step = step

    def __call__(self) -> datetime:
        return at(self.step) + timedelta(seconds=20)  # past the 15 s scrape grace, before the next step


def puller(store: Store, prom: FakePrometheus, clock: Clock, backfill_steps: int = 10) -> PrometheusPuller:
    return PrometheusPuller(
        store, URL, every_s=60, step_s=STEP, backfill=timedelta(seconds=backfill_steps * STEP),
        client=prom.client(), now=clock,
    )  # fmt: skip


def stored(store: Store, uuid: str = "GPU-0") -> list[pd.Timestamp]:
    h = store.samples.history(uuids=[uuid])
    return list(h["timestamp"])


def temp_ranges(prom: FakePrometheus) -> list[tuple[datetime, datetime]]:
    return [
        (datetime.fromtimestamp(s / 1000, UTC), datetime.fromtimestamp(e / 1000, UTC))
        for s, e, _ in prom.ranges("DCGM_FI_DEV_GPU_TEMP")
    ]


def test_pulls_reach_back_the_backfill_then_only_new_steps(store: Store) -> None:
    prom, clock = fleet(40), Clock(20)
    p = puller(store, prom, clock)
    assert p.pull_once() == 2 * 11  # steps 10..20, both GPUs
    assert stored(store) == [pd.Timestamp(at(k)) for k in range(10, 21)]
    clock.step = 22
    assert p.pull_once() == 2 * 2  # steps 21 and 22: the repeated step 20 is not stored again
    assert temp_ranges(prom) == [(at(10), at(20)), (at(20), at(22))]  # one step of overlap
    assert p.pull_once() == 0  # nothing new yet
    assert stored(store) == [pd.Timestamp(at(k)) for k in range(10, 23)]
    assert p.state.watermark == at(22) and p.state.runs == 3 and p.state.samples == 26


def test_an_xid_at_the_first_step_of_a_window_counts_once(store: Store) -> None:
    prom, clock = FakePrometheus(), Clock(12)
    xid = {ms(k): (79.0 if k >= 13 else 0.0) for k in range(20)}  # the last-seen gauge turns 79 at step 13
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0), {ms(k): 50.0 for k in range(20)})
    prom.add("DCGM_FI_DEV_XID_ERRORS", gpu_labels(0), xid)
    p = puller(store, prom, clock)
    p.pull_once()
    for step in (13, 16):  # step 13 opens the next window; the overlap step 12 shows it changed
        clock.step = step
        p.pull_once()
    h = store.samples.history(uuids=["GPU-0"])
    assert dict(zip(h["timestamp"], h["xid"], strict=True)) == {
        pd.Timestamp(at(k)): (79.0 if k == 13 else 0.0) for k in range(3, 17)
    } | {pd.Timestamp(at(2)): 0.0}


def test_nothing_is_lost_while_the_database_is_down(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    prom, clock = fleet(60), Clock(20)
    p = puller(store, prom, clock)
    p.pull_once()

    def down(*_a: object, **_k: object) -> int:
        raise StoreUnavailable("cannot reach the database: connection refused")

    with monkeypatch.context() as m:
        m.setattr(store.samples, "ingest", down)
        for step in (22, 24):
            clock.step = step
            with pytest.raises(StoreUnavailable):
                p.pull_once()
            assert p.state.watermark == at(20)
    clock.step = 26
    assert p.pull_once() == 2 * 6  # 21..26: Prometheus kept what the database could not take
    assert stored(store) == [pd.Timestamp(at(k)) for k in range(10, 27)]


def test_prometheus_down_keeps_the_mark_and_says_why(store: Store) -> None:
    prom, clock = fleet(40), Clock(20)
    p = puller(store, prom, clock)
    p.pull_once()
    prom.fail = lambda _req: httpx.Response(503, text="Service Unavailable")
    clock.step = 25
    with pytest.raises(HistoryError, match="503"):
        p.pull_once()
    assert p.state.watermark == at(20)
    prom.fail = lambda _req: None
    assert p.pull_once() == 2 * 5


def test_a_new_puller_resumes_from_the_store(store: Store) -> None:
    prom, clock = fleet(40), Clock(20)
    puller(store, prom, clock).pull_once()
    clock.step = 23
    again = puller(store, prom, clock)
    assert again.pull_once() == 2 * 3
    assert temp_ranges(prom)[-1] == (at(20), at(23))
    assert len(stored(store)) == 14  # 10..23, each once


def test_an_empty_window_is_not_an_error(store: Store) -> None:
    prom, clock = fleet(5), Clock(40)  # nothing reported in the last 10 steps
    p = puller(store, prom, clock)
    assert p.pull_once() == 0
    assert p.state.watermark is None and p.state.last_error is None


def test_a_gpu_gone_from_its_host_is_marked_lost(store: Store) -> None:
    prom = FakePrometheus()
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0), {ms(k): 50.0 for k in range(40)})
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(1), {ms(k): 50.0 for k in range(21)})  # falls off at step 21
    other = {"UUID": "GPU-x", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-b"}
    prom.add("DCGM_FI_DEV_GPU_TEMP", other, {ms(k): 50.0 for k in range(21)})  # its whole node goes quiet
    clock = Clock(20)
    p = puller(store, prom, clock)
    p.pull_once()
    clock.step = 24
    p.pull_once()
    states = {g["uuid"]: g["state"] for g in store.gpus.find()[0]}
    assert states == {"GPU-0": "active", "GPU-1": "lost", "GPU-x": "active"}  # a silent node is not a lost GPU
    assert p.state.lost == 1
    reg = CollectorRegistry(auto_describe=False)
    reg.register(p)
    text = generate_latest(reg).decode()
    assert "gpuhealth_pull_lost_gpus_total 1.0" in text and "gpuhealth_pull_runs_total 2.0" in text


def test_a_step_is_asked_for_only_after_the_scrape_grace(store: Store) -> None:
    prom, clock = fleet(40), Clock(20)
    p = puller(store, prom, clock)
    p.now = lambda: at(21) + timedelta(seconds=10)  # step 21 is due, but a scrape may still land before it
    p.pull_once()
    assert temp_ranges(prom)[-1][1] == at(20)


def test_the_loop_survives_a_failing_pull(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    prom, clock = fleet(40), Clock(20)
    p = puller(store, prom, clock)
    calls: list[int] = []

    def boom() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("a bug, not a Prometheus or database error")
        p._stop.set()
        return 0

    monkeypatch.setattr(p, "pull_once", boom)
    monkeypatch.setattr(p, "every_s", 0.01)
    p._run()
    assert len(calls) == 2 and p.state.failures == 1 and "KeyError" in (p.state.last_error or "")


def test_settings_are_checked(store: Store) -> None:
    with pytest.raises(ValueError, match="positive"):
        PrometheusPuller(store, URL, every_s=0)
    with pytest.raises(ValueError, match="at least one step"):
        PrometheusPuller(store, URL, step_s=60, backfill=timedelta(seconds=30))


def _sample_at(t: datetime, uuid: str = "GPU-0") -> pd.DataFrame:
    return pd.DataFrame([{"timestamp": t, "hostname": "node-a", "gpu_uuid": uuid, "gpu_index": 0,
                          "model_name": "NVIDIA H100 80GB HBM3", "gpu_temp_c": 50.0}])  # fmt: skip


def test_a_sample_from_the_future_does_not_stop_the_pulls(store: Store) -> None:
    """Issue 12.5: one future sample in the store put the watermark past now and no pull ran again."""
    prom, clock = fleet(40), Clock(20)
    future = at(20) + timedelta(days=365)
    assert store.samples.ingest(_sample_at(future)) == 1  # an older store, or a tool with a wrong clock, let it in
    p = puller(store, prom, clock)
    assert p.pull_once() == 2 * 11  # steps 10..20, as for an empty store: not "nothing until next year"
    clock.step = 23
    assert p.pull_once() == 2 * 3
    ok, detail = p.health()
    assert ok and f"samples dated up to {future.isoformat()}" in detail
    reg = CollectorRegistry()
    reg.register(p)
    ahead = reg.get_sample_value("gpuhealth_pull_store_ahead_seconds")
    assert ahead is not None and ahead > 364 * 86400


def test_future_samples_are_refused_at_ingest(store: Store) -> None:
    now = at(20)
    frame = pd.concat([_sample_at(now), _sample_at(now + timedelta(hours=2), uuid="GPU-1")], ignore_index=True)
    assert store.samples.ingest(frame, not_after=now + timedelta(minutes=5)) == 1
    assert store.samples.newest_time() == now
    assert store.samples.newest_time(until=now - timedelta(seconds=1)) is None


def test_a_bad_series_is_skipped_counted_and_named_once(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 55.2: one series with `gpu="²"` stopped every pull; nothing was stored for any GPU."""
    prom, clock = fleet(40), Clock(20)
    odd = gpu_labels(7) | {"gpu": "\u00b2"}
    prom.add("DCGM_FI_DEV_GPU_TEMP", odd, {ms(k): 50.0 for k in range(40)})
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(8) | {"Hostname": "h" * 300}, {ms(k): 50.0 for k in range(40)})
    p = puller(store, prom, clock)
    with caplog.at_level(logging.WARNING, logger="service.puller"):
        assert p.pull_once() == 2 * 11
        clock.step = 22
        assert p.pull_once() == 2 * 2
    assert sorted(g["uuid"] for g in store.gpus.find()[0]) == ["GPU-0", "GPU-1"]
    reg = CollectorRegistry()
    reg.register(p)
    skipped = "gpuhealth_pull_series_skipped_total"
    assert reg.get_sample_value(skipped, {"reason": "bad_index"}) == 2, "counted at every pull"
    assert reg.get_sample_value(skipped, {"reason": "label_too_long"}) == 2
    assert reg.get_sample_value(skipped, {"reason": "nul_byte"}) == 0, "every reason has its series"
    assert caplog.text.count("GPU-7") == 1 and caplog.text.count("GPU-8") == 1, "named once, not every pull"
    assert p.state.last_error is None and p.state.failures == 0


@pytest.mark.parametrize("legacy", [False, True], ids=["pulled", "stored-as-minus-one-before"])
def test_a_gpu_of_unknown_index_that_goes_quiet_is_marked_lost(store: Store, legacy: bool) -> None:
    """Issue 55.3: a GPU stored with index -1 made marking it lost fail (StoreError), and so every pull."""
    prom = FakePrometheus()
    prom.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(0), {ms(k): 50.0 for k in range(40)})
    nameless = {k: v for k, v in gpu_labels(1).items() if k not in ("gpu", "device")}  # neither gpu nor device
    prom.add("DCGM_FI_DEV_GPU_TEMP", nameless, {ms(k): 50.0 for k in range(21)})
    clock = Clock(20)
    p = puller(store, prom, clock)
    p.pull_once()
    assert store.gpus.get("GPU-1")["gpu_index"] is None, "unknown is NULL, not -1"
    if legacy:  # what an older release (or `db import` of a history with -1) left in the store
        with store._db.tx(write=True) as conn:
            conn.execute(sa.update(T_GPUS).where(T_GPUS.c.uuid == "GPU-1").values(gpu_index=-1))
    clock.step = 24
    assert p.pull_once() == 4
    assert store.gpus.get("GPU-1")["state"] == "lost" and p.state.failures == 0
