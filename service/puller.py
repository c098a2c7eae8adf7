"""Fleet mode: the fleet's GPU telemetry pulled from Prometheus into the store.

`gpuhealth collect` (or dcgm-exporter) runs on every node, Prometheus scrapes them, and
one `gpuhealth serve --source prometheus` pulls what it needs with range queries
(`core.prom_import`), keeps it in the store and scores it like locally collected
samples. Prometheus is the buffer: the watermark moves only once the store has taken a
window, so while the database or Prometheus is down nothing is lost; the next pull
catches up (at most `backfill` back, which is also how far the first pull reaches).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pandas as pd
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from core import identity
from core.history import HistoryError
from core.prom_import import NoSeries, SkippedSeries, bus_ids_at, import_history, list_hosts, rails_at, workloads_at
from core.worker import Worker
from service.replicas import Replica, Share
from service.scorer import all_gpus
from store import CLOCK_SKEW, GpuRow, Store, StoreError

log = logging.getLogger(__name__)


SCRAPE_GRACE_S = 15.0
"""How long after a step the puller waits before asking for it (at most one step)."""
NAMED_SERIES = 1000
"""Skipped series remembered as named in the log; past it the memory starts again (bounded)."""


@dataclass
class PullState:
    """What the puller did since start (exported as metrics)."""

    runs: int = 0
    failures: int = 0
    samples: int = 0
    lost: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(identity.REASONS, 0))
    """Series left out of a pull, by reason (`identity.REASONS`), counted at every pull that saw them."""
    watermark: datetime | None = None
    """The newest step stored: the next pull starts here (one step of overlap)."""
    last_success: float | None = None
    last_error: str | None = None
    future: datetime | None = None
    """The newest sample in the store when it lies past our clock (a wrong clock somewhere), else None."""


def check_settings(every_s: float, step_s: float, backfill: timedelta) -> None:
    """ValueError unless the pull interval and step are positive and the backfill holds a step."""
    if every_s <= 0 or step_s <= 0:
        raise ValueError(f"pull interval and step must be positive, got {every_s:g}s and {step_s:g}s")
    if backfill < timedelta(seconds=step_s):
        raise ValueError(f"backfill must be at least one step ({step_s:g}s), got {backfill}")


class PrometheusPuller(Worker):
    """Pulls every `every_s` the steps since the watermark, at `step_s`, into the store.

    Steps are aligned to multiples of `step_s`, so a window pulled twice gives the same
    rows and the store ignores the repeats. Each pull asks for one step it already has:
    DCGM's XID gauge holds the last code seen, and a code counts where it changed, which
    the first step of a window cannot tell on its own. That step is dropped before storing.

    A GPU missing from a whole window while its host still reports is marked lost, so the
    scoring loop drains it (a GPU that falls off the bus leaves the exporter's output).
    """

    thread_name = "gpuhealth-pull"
    stop_timeout_s = 10.0

    def __init__(
        self,
        store: Store,
        url: str,
        *,
        every_s: float = 60.0,
        step_s: float = 300.0,
        backfill: timedelta = timedelta(days=2),
        client: httpx.Client | None = None,
        now: Callable[[], datetime] | None = None,
        replica: Replica | None = None,
    ) -> None:
        check_settings(every_s, step_s, backfill)
        self.store = store
        self.url = url
        self.every_s = every_s
        self.step_s = step_s
        self.backfill = backfill
        self.client = client
        self.now = now or (lambda: datetime.now(UTC))
        self.replica = replica
        """Several replicas: pull (and mark lost) only the hosts of this one's shards."""
        self._held: frozenset[int] = frozenset()
        self._named: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        """Skipped series already named in the log: each is named once, not at every pull."""
        self.state = PullState()
        self._lock = threading.Lock()
        super().__init__()

    def _aligned(self, t: datetime) -> datetime:
        return datetime.fromtimestamp(math.floor(t.timestamp() / self.step_s) * self.step_s, UTC)

    def pull_once(self) -> int:
        """Pull the steps since the watermark; returns the samples newly stored.

        Raises StoreError (StoreUnavailable when the database is down) or HistoryError
        (Prometheus unreachable or refusing); the watermark then stays where it was.
        """
        with self._lock:
            # A scrape is stamped when it starts: one in flight at a step lands after it.
            end = self._aligned(self.now() - timedelta(seconds=min(self.step_s, SCRAPE_GRACE_S)))
            mark = self.state.watermark
            if mark is not None and mark > end:  # our clock went back (an NTP step): re-read the store
                log.warning("the watermark %s is ahead of the clock; resuming from the store", mark.isoformat())
                mark = None
            self._check_future(end)
            if mark is None:
                # Never from a sample dated in the future: no pull would run again until then.
                newest = self.store.samples.newest_time(until=end)
                mark = None if newest is None else self._aligned(newest)
            share = self.replica.share(timedelta(0)) if self.replica is not None else None
            if share is not None:
                mark = self._after_handover(share, mark, end)
            oldest = end - self.backfill
            if mark is not None and mark < oldest:
                log.warning("catching up from %s only (the backfill): %s of history not pulled",
                            oldest.isoformat(), oldest - mark)  # fmt: skip
            start = oldest if mark is None or mark < oldest else mark
            frame = None
            if start < end and (share is None or share.shards):  # else no new step yet, or nothing of ours
                with contextlib.suppress(NoSeries):  # no GPU reported in the window: the mark stays
                    frame = self._fetch(start, end, share)
            n = 0
            if share is not None and not share.shards:
                self.state.watermark = end  # nothing of ours to pull: a share gained later starts from here
            if frame is not None:
                new = frame if mark is None else frame[frame["timestamp"] > pd.Timestamp(mark)]
                if len(new):
                    n = self.store.samples.ingest(new.reset_index(drop=True), not_after=end + CLOCK_SKEW)
                    self._mark_lost(new, end)
                    self._pull_workloads(end, share)
                    self._pull_rails(end, share)
                    self._pull_bus_ids(end, share)
                self.state.watermark = end
            if share is not None:  # pulled: what was gained is caught up with
                self._held = share.shards
            st = self.state
            st.runs += 1
            st.samples += n
            st.last_success, st.last_error = time.time(), None
            return n

    def _after_handover(self, share: Share, mark: datetime | None, end: datetime) -> datetime | None:
        """The watermark for a share that gained shards since the last successful pull: far enough back to
        cover the time they were another replica's that stopped pulling (its last pull, the lease, our
        next tick and pull)."""
        gained = share.shards - self._held
        if not gained or mark is None or self.replica is None:
            return mark
        handover = timedelta(seconds=self.every_s + 2 * self.replica.lease_s + self.step_s)
        return min(mark, self._aligned(end - handover))

    def _fetch(self, start: datetime, end: datetime, share: Share | None) -> pd.DataFrame:
        """The steps of [start, end] from Prometheus: the whole fleet, or the share's hosts only.

        A share's hosts are listed first (the label-values API) and asked for by a label
        matcher on the label each reports under, so a replica's queries carry its part of the
        fleet only; the frame is filtered again by hostname, which costs nothing.
        """
        if share is None:
            return import_history(self.url, start, end, self.step_s, client=self.client, on_skip=self._skipped)
        found = list_hosts(self.url, start, end, client=self.client)
        hosts = {label: set(share.hosts(names)) for label, names in found.items()}
        frame = import_history(
            self.url, start, end, self.step_s, client=self.client, hosts=hosts, on_skip=self._skipped
        )
        return share.only(frame)

    def _skipped(self, series: SkippedSeries) -> None:
        """Count a series this pull left out; name it in the log the first time only."""
        st = self.state
        st.skipped[series.reason] = st.skipped.get(series.reason, 0) + 1
        key = (series.reason, series.labels)
        if key in self._named:
            return
        if len(self._named) >= NAMED_SERIES:
            self._named.clear()
        self._named.add(key)
        log.warning(
            "series %s left out of the pull: %s (%s; counted in gpuhealth_pull_series_skipped_total, named once)",
            series.name(), series.why, series.reason,
        )  # fmt: skip

    def _pull_workloads(self, end: datetime, share: Share | None) -> None:
        """What runs on the pulled GPUs (the exporters' pod and job labels), kept per GPU; a failure here
        costs only that (the samples are stored), and the next pull asks again."""
        try:
            found = workloads_at(self.url, end, client=self.client)
            mine = {u: sets for u, (host, sets) in found.items() if share is None or share.has(host)}
            self.store.workloads.replace(mine, end)
        except (HistoryError, StoreError) as err:
            log.warning("workloads on the GPUs not updated this pull: %s", err)

    def _pull_rails(self, end: datetime, share: Share | None) -> None:
        """Each pulled GPU's InfiniBand/RoCE ports (`gpuhealth_infiniband_port_gpu_info`), kept with the GPU
        so a flapping rail's reason names its port; a failure costs only the names, asked again next pull."""
        try:
            found = rails_at(self.url, end, client=self.client)
            self.store.gpus.set_rails(
                {u: rail for u, (host, rail) in found.items() if share is None or share.has(host)}
            )
        except (HistoryError, StoreError) as err:
            log.warning("the GPUs' InfiniBand rails not updated this pull: %s", err)

    def _pull_bus_ids(self, end: datetime, share: Share | None) -> None:
        """Each pulled GPU's PCI bus id (its series' `pci_bus_id`), kept with the GPU: with the host, its slot,
        whose link habit a replacement inherits (decision 0089); a failure costs only the ids, asked again next pull."""
        try:
            found = bus_ids_at(self.url, end, client=self.client)
            self.store.gpus.set_bus_ids(
                {u: bus for u, (host, bus) in found.items() if share is None or share.has(host)}
            )
        except (HistoryError, StoreError) as err:
            log.warning("the GPUs' PCI bus ids not updated this pull: %s", err)

    def _check_future(self, end: datetime) -> None:
        """Note (log, /healthz, a metric) samples in the store dated past our clock."""
        newest = self.store.samples.newest_time()
        future = newest if newest is not None and newest > end + CLOCK_SKEW else None
        if future is not None and future != self.state.future:
            log.error(
                "the store holds samples dated up to %s, %s ahead of this clock: a clock is wrong (ours or a node's);"
                " pulls go on from the newest sample before now",
                future.isoformat(), future - end,
            )  # fmt: skip
        self.state.future = future

    def _mark_lost(self, frame: pd.DataFrame, at: datetime) -> None:
        """GPUs the store knows on a host in `frame` (the new steps) that the frame does not have: lost."""
        hosts = set(frame["hostname"].astype(str).unique())
        present = set(frame["gpu_uuid"].astype(str).unique())
        # Only the state changes: an identity left out is kept as stored (which may be what an older
        # release wrote, such as an index of -1, that a sighting would refuse).
        gone: list[GpuRow] = [
            {"uuid": g["uuid"], "hostname": g["hostname"], "state": "lost", "seen_at": at}
            for g in all_gpus(self.store)
            if g["hostname"] in hosts and g["uuid"] not in present and g["state"] != "lost"
        ]
        if gone:
            self.store.gpus.upsert(gone)
            self.state.lost += len(gone)
            log.warning("%d GPU(s) no longer reported by their host: marked lost: %s",
                        len(gone), ", ".join(g["uuid"] for g in gone))  # fmt: skip

    def health(self) -> tuple[bool, str]:
        """Healthy while pulls succeed (the first pull may still be running); says so when the store is ahead."""
        st = self.state
        ahead = (
            f"; warning: the store holds samples dated up to {st.future.isoformat()}, past this clock"
            if st.future is not None
            else ""
        )
        if st.last_success is None:
            return (st.failures == 0, (st.last_error or "first pull from Prometheus pending") + ahead)
        age = time.time() - st.last_success
        if age > 3 * self.every_s + 60:
            return False, f"no successful pull from Prometheus for {age:.0f}s: {st.last_error or 'still running'}"
        return True, f"pulled from {self.url} {age:.0f}s ago{ahead}"

    def collect(self) -> Iterator[Metric]:
        """The puller's own series (a prometheus_client collector)."""
        st = self.state
        yield CounterMetricFamily("gpuhealth_pull_runs", "Pulls from Prometheus that succeeded", value=st.runs)
        yield CounterMetricFamily("gpuhealth_pull_failures", "Pulls from Prometheus that failed", value=st.failures)
        yield CounterMetricFamily(
            "gpuhealth_pull_samples", "Samples pulled from Prometheus and stored", value=st.samples
        )
        yield CounterMetricFamily(
            "gpuhealth_pull_lost_gpus", "GPUs marked lost: missing while their host still reports", value=st.lost
        )
        skipped = CounterMetricFamily(
            "gpuhealth_pull_series_skipped",
            "Series left out of pulls because they cannot be stored (an odd label or value), by reason",
            labels=["reason"],
        )
        for reason, n in sorted(st.skipped.items()):
            skipped.add_metric([reason], float(n))
        yield skipped
        yield GaugeMetricFamily(
            "gpuhealth_pull_store_ahead_seconds",
            "How far the newest stored sample lies past this clock (0 unless a clock is wrong)",
            value=0.0 if st.future is None else (st.future - self.now()).total_seconds(),
        )
        if st.watermark is not None:
            yield GaugeMetricFamily(
                "gpuhealth_pull_watermark_timestamp_seconds",
                "The newest step pulled and stored",
                value=st.watermark.timestamp(),
            )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                n = self.pull_once()
                log.debug("pulled %d sample(s) from Prometheus", n)
            except (StoreError, HistoryError) as err:
                self.state.failures += 1
                self.state.last_error = str(err)
                log.warning("pull from Prometheus failed (retried in %gs): %s", self.every_s, err)
            except Exception as err:  # one bad pull must not end the loop (the watermark stays)
                self.state.failures += 1
                self.state.last_error = f"{type(err).__name__}: {err}"
                log.exception("pull from Prometheus failed")
            self._stop.wait(self.every_s)
