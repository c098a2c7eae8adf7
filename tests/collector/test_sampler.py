from __future__ import annotations

import threading

import pytest

from collector.backends.base import XidEvent
from collector.sampler import Sampler
from tests.collector.helpers import FakeClock, ScriptedBackend


def test_snapshot_holds_readings_and_status() -> None:
    b = ScriptedBackend(2)
    s = Sampler(b, 10.0, clock=FakeClock())
    snap = s.sample_once()
    assert snap.seq == 1 and s.latest is snap
    assert [r.values["gpu_temp_c"] for r in snap.readings] == [40.0, 41.0]
    assert snap.status["sample"].success and snap.status["xid"].success


def test_xid_events_are_counted_per_code_and_last_value_kept() -> None:
    b = ScriptedBackend(2)
    s = Sampler(b, 10.0, clock=FakeClock())
    u0, u1 = b.infos[0].uuid, b.infos[1].uuid
    b.events = [XidEvent(u0, 48, 1.0), XidEvent(u0, 48, 2.0), XidEvent(u0, 79, 3.0)]
    snap = s.sample_once()
    assert snap.xid_counts[u0] == {48: 2, 79: 1}
    assert u1 not in snap.xid_counts
    assert snap.readings[0].values["xid"] == 79.0
    assert snap.readings[1].values["xid"] == 0.0
    b.events = [XidEvent(u0, 48, 4.0)]
    snap = s.sample_once()
    assert snap.xid_counts[u0] == {48: 3, 79: 1}, "counts are cumulative"
    assert snap.readings[0].values["xid"] == 48.0


def test_failed_read_is_reported_not_raised() -> None:
    b = ScriptedBackend(1)
    clock = FakeClock()
    s = Sampler(b, 10.0, clock=clock)
    b.fail_with = RuntimeError("driver went away")
    snap = s.sample_once()
    assert not snap.status["sample"].success
    assert snap.status["sample"].error == "driver went away"
    assert snap.readings == ()
    ok, reason = s.health()
    assert not ok and "driver went away" in reason


def test_health_reasons() -> None:
    b = ScriptedBackend(2)
    clock = FakeClock()
    s = Sampler(b, 10.0, clock=clock)
    assert s.health() == (False, "no sample taken yet")
    s.sample_once()
    assert s.health() == (True, "ok: 2 GPU(s)")
    clock.t += 31
    ok, reason = s.health()
    assert not ok and reason.startswith("sampling stalled")
    b.lost = {0, 1}
    s.sample_once()
    assert s.health() == (False, "no GPU visible")


def test_hung_backend_never_blocks_readers() -> None:
    b = ScriptedBackend(1)
    s = Sampler(b, 0.05)
    s.start()
    assert s.wait_first(2.0)
    first = s.latest
    b.gate = threading.Event()  # the next read hangs like a stuck NVML call
    # The loop is now stuck in read(); the snapshot stays readable and unchanged.
    threading.Event().wait(0.2)
    assert s.latest is not None and s.latest.seq >= (first.seq if first else 0)
    stuck = s.latest
    threading.Event().wait(0.2)
    assert s.latest is stuck
    b.gate.set()
    s.stop()


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Sampler(ScriptedBackend(1), 0)
