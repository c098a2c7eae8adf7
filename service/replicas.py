"""Several `serve --source prometheus` on one PostgreSQL: this replica's share of the fleet.

The fleet's hostnames fall into `store.SHARDS` shards (CRC-32 of the name). Every lease/3
this loop heartbeats and renews, claims and gives back shards through the store
(`store.leases`: the database decides, by its own clock); the scorer scores, and the puller
pulls and marks lost, only the hosts of the shards held. When a replica dies, its leases
expire and the others claim them within one lease period; a clean stop gives them back at once.

A scoring round takes the shards that stay held for at least `round_margin` (a third of the
lease) and writes through a `RoundFence`: in its write transaction the store admits only the
shards still held and not yet written in that round (rounds are the scoring interval's
multiples on the database's clock), so no GPU is scored twice in one round.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from core.worker import Worker
from store import SHARDS, LeaseTick, RoundFence, Store, StoreError, shard_of

log = logging.getLogger(__name__)

DEFAULT_LEASE_S = 60.0
"""How long a shard stays with a replica that stopped renewing: the longest a dead replica's
hosts wait for another one. Renewed every third of it, so two missed heartbeats are survived."""


def default_replica_id() -> str:
    """hostname-pid: unique per process (the pod name in Kubernetes), readable in logs and metrics."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Share:
    """The shards a round or a pull works on."""

    shards: frozenset[int]
    shard_count: int = SHARDS

    def has(self, hostname: str) -> bool:
        """Whether `hostname` belongs to the share."""
        return shard_of(hostname, self.shard_count) in self.shards

    def hosts(self, hostnames: Collection[str]) -> list[str]:
        """The names in `hostnames` that belong to the share, sorted."""
        return sorted(h for h in set(hostnames) if self.has(h))

    def only(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The rows of a history frame whose hostname belongs to the share (order kept)."""
        if len(frame) == 0:
            return frame
        names = frame["hostname"].astype(str)
        mine = {h: self.has(h) for h in names.unique()}
        return frame[names.map(mine).to_numpy(dtype=bool)].reset_index(drop=True)


@dataclass
class ReplicaState:
    """How the leases go, for /metrics and /healthz (replaced field by field by the loop)."""

    held: dict[int, datetime] = field(default_factory=dict)
    """Shard -> expires_at (database time) after the last successful tick."""
    live: int = 0
    target: int = 0
    ticks: int = 0
    failures: int = 0
    claimed: int = 0
    released: int = 0
    dropped: int = 0
    """Shards whose scored rows were not written: the lease was lost or the round already written."""
    hostnames: int | None = None
    """Hosts in the share at the last scoring round."""
    offset_s: float = 0.0
    """The database's clock minus ours, measured at the last tick."""
    last_success: float | None = None
    last_error: str | None = None


class Replica(Worker):
    """Heartbeats, claims and renews this replica's shard leases every lease/3; gives them back on stop."""

    thread_name = "gpuhealth-replica"
    stop_timeout_s = 10.0

    def __init__(
        self,
        store: Store,
        replica_id: str | None = None,
        lease_s: float = DEFAULT_LEASE_S,
        *,
        shards: int = SHARDS,
        info: Mapping[str, Any] | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        if lease_s <= 0:
            raise ValueError(f"the lease must be positive, got {lease_s:g}s")
        self.store = store
        self.replica_id = replica_id or default_replica_id()
        self.lease_s = lease_s
        self.shards = shards
        self.info = dict(info or {})
        self.clock = clock
        """A time source to use instead of the database's (tests); None: the database's."""
        self.state = ReplicaState()
        self._lock = threading.Lock()
        super().__init__()

    @property
    def round_margin(self) -> timedelta:
        """A round starts only on shards held at least this much longer: a third of the lease."""
        return timedelta(seconds=self.lease_s / 3)

    @property
    def write_margin(self) -> timedelta:
        """A round's rows are written only for shards held at least this much longer."""
        return timedelta(seconds=self.lease_s / 10)

    def now(self) -> datetime:
        """The database's time, estimated from our clock and the offset seen at the last tick."""
        if self.clock is not None:
            return self.clock()
        return datetime.now(UTC) + timedelta(seconds=self.state.offset_s)

    def tick(self) -> LeaseTick:
        """One heartbeat (claims, renewals, fair share); StoreError propagates and the leases stay as they were."""
        with self._lock:
            before = time.time()
            try:
                got = self.store.leases.tick(
                    self.replica_id,
                    timedelta(seconds=self.lease_s),
                    shards=self.shards,
                    info=self.info,
                    now=self.clock() if self.clock is not None else None,
                )
            except StoreError as err:
                self.state.failures += 1
                self.state.last_error = str(err)
                raise
            st = self.state
            if self.clock is None:
                st.offset_s = got["now"].timestamp() - (before + time.time()) / 2
            st.held, st.live, st.target = got["held"], got["live"], got["target"]
            st.ticks += 1
            st.claimed += len(got["claimed"])
            st.released += len(got["released"])
            st.last_success, st.last_error = time.time(), None
        if got["claimed"] or got["released"]:
            log.info(
                "replica %s: claimed %d shard(s), gave back %d; holds %d of %d, %d live replica(s)",
                self.replica_id, len(got["claimed"]), len(got["released"]), len(got["held"]), self.shards,
                got["live"],
            )  # fmt: skip
        return got

    def held(self, margin: timedelta = timedelta(0)) -> frozenset[int]:
        """The shards held for at least `margin` more, by the last tick (none once they expired)."""
        limit = self.now() + margin
        return frozenset(s for s, until in self.state.held.items() if until > limit)

    def share(self, margin: timedelta | None = None) -> Share:
        """The shards to work on now: held for at least `margin` (default: `round_margin`) more."""
        return Share(self.held(self.round_margin if margin is None else margin), self.shards)

    def fence(self, share: Share, round_no: int) -> RoundFence:
        """What the store admits of a round that scored `share` (see `store.RoundFence`)."""
        return RoundFence(
            self.replica_id,
            round_no,
            share.shards,
            margin=self.write_margin,
            now=self.clock() if self.clock is not None else None,
            shard_count=self.shards,
        )

    def note_round(self, share: Share, fence: RoundFence, hostnames: int) -> None:
        """Record what a round wrote (the shards it could not write are counted and logged)."""
        self.state.hostnames = hostnames
        lost = share.shards - fence.admitted
        if lost:
            self.state.dropped += len(lost)
            log.warning(
                "replica %s: round %d not written for %d shard(s) (lease lost, or written by another replica): %s",
                self.replica_id, fence.round, len(lost), ", ".join(map(str, sorted(lost))),
            )  # fmt: skip

    def release(self) -> None:
        """Give every shard back (clean shutdown): the others claim them at their next tick."""
        try:
            n = self.store.leases.release(self.replica_id)
        except StoreError as err:
            log.warning("replica %s: could not give back its shards (they expire in %gs): %s",
                        self.replica_id, self.lease_s, err)  # fmt: skip
            return
        self.state.held = {}
        log.info("replica %s: gave back %d shard(s)", self.replica_id, n)

    def stop(self, timeout: float | None = None) -> None:
        """End the loop and give the shards back."""
        super().stop(timeout)
        self.release()

    def _run(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.tick()
            except StoreError as err:
                log.warning("replica %s: heartbeat failed (shards expire unless renewed): %s", self.replica_id, err)
            except Exception:  # one bad tick must not end the loop
                self.state.failures += 1
                log.exception("replica %s: heartbeat failed", self.replica_id)

    def health(self) -> str:
        """What this replica holds, in words (for /healthz's detail)."""
        st = self.state
        held = len(self.held())
        if st.last_success is None:
            return f"replica {self.replica_id}: no heartbeat yet ({st.last_error or 'starting'})"
        if not held:
            return f"replica {self.replica_id} holds no shard ({st.live} live replica(s), {self.shards} shards)"
        return f"replica {self.replica_id} holds {held} of {self.shards} shards, {st.live} live replica(s)"

    def collect(self) -> Iterator[Metric]:
        """The replica's own series (a prometheus_client collector)."""
        st = self.state
        info = GaugeMetricFamily("gpuhealth_replica_info", "This replica of the service (always 1)", labels=["replica"])
        info.add_metric([self.replica_id], 1.0)
        yield info
        held = self.held()
        yield GaugeMetricFamily(
            "gpuhealth_replica_shards", f"Shards (of {self.shards}) whose lease this replica holds", value=len(held)
        )
        if st.hostnames is not None:
            yield GaugeMetricFamily(
                "gpuhealth_replica_hostnames", "Hosts this replica scored at its last round", value=st.hostnames
            )
        yield GaugeMetricFamily(
            "gpuhealth_replicas_live", "Replicas whose heartbeat is younger than the lease", value=st.live
        )
        if held:
            soonest = min(st.held[s] for s in held)
            yield GaugeMetricFamily(
                "gpuhealth_replica_lease_remaining_seconds",
                "Until the first of this replica's leases expires unless renewed",
                value=(soonest - self.now()).total_seconds(),
            )
        yield CounterMetricFamily("gpuhealth_replica_heartbeats", "Heartbeats that succeeded", value=st.ticks)
        yield CounterMetricFamily("gpuhealth_replica_heartbeat_failures", "Heartbeats that failed", value=st.failures)
        yield CounterMetricFamily("gpuhealth_replica_shards_claimed", "Shards claimed", value=st.claimed)
        yield CounterMetricFamily(
            "gpuhealth_replica_shards_released", "Shards given back to make room for others", value=st.released
        )
        yield CounterMetricFamily(
            "gpuhealth_replica_shards_dropped",
            "Shards a round scored but did not write: the lease was lost or another replica wrote that round",
            value=st.dropped,
        )


def round_of(t: datetime, interval_s: float) -> int:
    """The scoring round `t` falls in: its multiple of the interval since the epoch."""
    return int(t.timestamp() // interval_s)


def until_next_round(t: datetime, interval_s: float) -> float:
    """Seconds from `t` to the start of the next round."""
    return interval_s - t.timestamp() % interval_s
