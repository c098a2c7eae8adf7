"""The sampling loop: reads a backend on its own thread and keeps the latest snapshot.

A scrape only ever renders the latest snapshot, so a hanging driver call stalls
sampling (visible as a growing sample age and a failing /healthz), never a scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from collector.attribution import Attributor, DeviceKey, LabelSet, Workloads, merge
from collector.backends.base import Backend, GpuReading
from core.worker import Worker

log = logging.getLogger(__name__)


class Augmenter(Protocol):
    """Adds catalogue values to a sample's readings in place (collector.infiniband.RailCounts)."""

    name: str

    def __call__(self, readings: Sequence[GpuReading]) -> None: ...


STALL_FACTOR = 3.0
"""Sampling counts as stalled when the snapshot is older than this many intervals."""


@dataclass(frozen=True)
class CollectorStatus:
    """Outcome of one run of a collector step ("sample", "xid")."""

    success: bool
    duration_s: float
    error: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """Everything a scrape renders, taken at one moment; never mutated once published."""

    seq: int
    taken_at: float
    readings: tuple[GpuReading, ...]
    xid_counts: Mapping[str, Mapping[int, int]] = field(default_factory=dict)
    """Cumulative XID events per GPU UUID and code since the collector started."""
    status: Mapping[str, CollectorStatus] = field(default_factory=dict)
    data_time: float | None = None
    """The time the readings describe, when the backend keeps its own clock (sim, replay);
    None for live GPUs, whose readings are as of `taken_at`."""
    workloads: Workloads = field(default_factory=dict)
    """The pods and jobs on each GPU and MIG instance (collector.attribution), asked once per sample."""

    @property
    def sample_time(self) -> float:
        """The time to store the readings under."""
        return self.taken_at if self.data_time is None else self.data_time


class Sampler(Worker):
    """Reads a backend every `interval_s` seconds on a background thread."""

    thread_name = "gpuhealth-sampler"
    stop_timeout_s = 5.0

    def __init__(
        self,
        backend: Backend,
        interval_s: float,
        clock: Callable[[], float] = time.time,
        attributors: Sequence[Attributor] = (),
        augment: Sequence[Augmenter] = (),
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"sampling interval must be positive, got {interval_s}")
        self.backend = backend
        self.attributors = tuple(attributors)
        """Sources of the workloads on each GPU (Kubernetes pods, Slurm jobs), asked after each read."""
        self.augment = tuple(augment)
        """Sources of catalogue values the backend does not read (the IB rail's flaps), run on each read's readings."""
        self._failing: set[str] = set()
        self.interval_s = interval_s
        self.clock = clock
        self._latest: Snapshot | None = None
        self._seq = 0
        self._xid_counts: dict[str, dict[int, int]] = {}
        self._last_xid: dict[str, int] = {}
        super().__init__()
        self._first = threading.Event()
        self._listeners: list[Callable[[Snapshot], None]] = []

    def subscribe(self, listener: Callable[[Snapshot], None]) -> None:
        """Call `listener` with every new snapshot, on the sampling thread (keep it quick)."""
        self._listeners.append(listener)

    @property
    def latest(self) -> Snapshot | None:
        """The most recent snapshot (a plain attribute read: safe without a lock)."""
        return self._latest

    def sample_once(self) -> Snapshot:
        """Read the backend once, publish and return the snapshot."""
        status: dict[str, CollectorStatus] = {}
        t0 = time.perf_counter()
        try:
            readings = self.backend.read()
            status["sample"] = CollectorStatus(True, time.perf_counter() - t0)
        except Exception as err:  # a failed read must not end the loop
            log.warning("reading %s backend failed: %s", self.backend.name, err)
            readings = []
            status["sample"] = CollectorStatus(False, time.perf_counter() - t0, str(err))
        self._augment(readings, status)
        t1 = time.perf_counter()
        try:
            for ev in self.backend.drain_xid_events():
                per_gpu = self._xid_counts.setdefault(ev.gpu_uuid, {})
                per_gpu[ev.xid] = per_gpu.get(ev.xid, 0) + 1
                self._last_xid[ev.gpu_uuid] = ev.xid
            status["xid"] = CollectorStatus(True, time.perf_counter() - t1)
        except Exception as err:
            log.warning("draining XID events of %s backend failed: %s", self.backend.name, err)
            status["xid"] = CollectorStatus(False, time.perf_counter() - t1, str(err))
        for r in readings:
            # DCGM_FI_DEV_XID_ERRORS semantics: the last XID seen, 0 before any.
            # A backend that reads the field itself (DCGM, sim) keeps its own value.
            if "xid" not in r.values and not r.lost:
                r.values["xid"] = float(self._last_xid.get(r.info.uuid, 0))
        workloads = self._attribute(readings, status)
        self._seq += 1
        snap = Snapshot(
            seq=self._seq,
            taken_at=self.clock(),
            readings=tuple(readings),
            xid_counts=MappingProxyType({u: dict(c) for u, c in self._xid_counts.items()}),
            status=MappingProxyType(status),
            data_time=self.backend.data_time(),
            workloads=MappingProxyType(workloads),
        )
        self._latest = snap
        self._first.set()
        for listener in self._listeners:
            try:
                listener(snap)
            except Exception:  # a listener's bug must not stop sampling
                log.exception("snapshot listener failed")
        return snap

    def _augment(self, readings: list[GpuReading], status: dict[str, CollectorStatus]) -> None:
        """Let each augmenter add its values; one that fails adds none this time and its status says why."""
        for a in self.augment:
            t0 = time.perf_counter()
            try:
                a(readings)
            except Exception as err:  # a value from elsewhere must never cost the sample
                status[a.name] = CollectorStatus(False, time.perf_counter() - t0, str(err))
                if a.name not in self._failing:  # once until it answers again, as an attributor
                    self._failing.add(a.name)
                    log.warning("%s: no values until it answers: %s", a.name, err)
                continue
            status[a.name] = CollectorStatus(True, time.perf_counter() - t0)
            self._failing.discard(a.name)

    def _attribute(
        self, readings: list[GpuReading], status: dict[str, CollectorStatus]
    ) -> dict[DeviceKey, tuple[LabelSet, ...]]:
        """The workloads of every attributor that answers; one that fails gives none this time, its status
        says why, and it is logged once until it answers again (a node without pods logs it once, not per sample)."""
        found = []
        for a in self.attributors:
            t0 = time.perf_counter()
            try:
                found.append(a.lookup(readings))
            except Exception as err:  # a source of labels must never cost the sample
                status[a.name] = CollectorStatus(False, time.perf_counter() - t0, str(err))
                if a.name not in self._failing:
                    self._failing.add(a.name)
                    log.warning("%s: no workload labels until it answers: %s", a.name, err)
                continue
            status[a.name] = CollectorStatus(True, time.perf_counter() - t0)
            if a.name in self._failing:
                self._failing.discard(a.name)
                log.info("%s answers again: workload labels are back", a.name)
        return merge(found)

    def health(self) -> tuple[bool, str]:
        """(healthy, reason) for /healthz."""
        snap = self._latest
        if snap is None:
            return False, "no sample taken yet"
        age = self.clock() - snap.taken_at
        if age > STALL_FACTOR * self.interval_s:
            return (
                False,
                f"sampling stalled: last sample {age:.0f}s ago (interval {self.interval_s:g}s)",
            )
        if not snap.status["sample"].success:
            return False, f"last sample failed: {snap.status['sample'].error}"
        if not any(not r.lost for r in snap.readings):
            return False, "no GPU visible"
        return True, f"ok: {sum(not r.lost for r in snap.readings)} GPU(s)"

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def wait_first(self, timeout: float) -> bool:
        """Wait until the first snapshot is published; False on timeout."""
        return self._first.wait(timeout)
