"""Replicas in the service: the scorer and the puller work on their share, a round is written once.

Two replicas in one process on one SQLite store, with a clock passed in (the leases' logic on
PostgreSQL is tested in tests/store/test_leases.py, three real processes in
tests/integration/test_replicas.py).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import httpx
import pandas as pd
import pytest
from prometheus_client import CollectorRegistry

from core.prom_import import host_selector, import_history
from predictor.thresholds import Thresholds
from service.puller import PrometheusPuller
from service.replicas import Replica, Share, round_of, until_next_round
from service.scorer import Scorer
from simulator.fleet import SimConfig
from simulator.run import simulate
from store import Store, shard_of
from tests.core.test_prom_import import URL, FakePrometheus, gpu_labels, ok
from tests.service.tiny_model import tiny_model

ROUND_S = 300.0


class Clock:
    def __init__(self, t: datetime) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@pytest.fixture(scope="module")
def history() -> pd.DataFrame:
    """4 nodes × 2 GPUs, 6 hours at 10 minutes: sim-node-00..03 fall in shards 55, 33, 27 and 13."""
    frame, _ = simulate(SimConfig(nodes=4, gpus_per_node=2, seed=5), days=0.25, interval_s=600)
    return frame


def two_replicas(store: Store, clock: Clock) -> tuple[Replica, Replica]:
    """a, then b: a keeps shards 0..31 (sim-node-02, -03), b gets 32..63 (sim-node-00, -01)."""
    a, b = Replica(store, "a", 60, clock=clock), Replica(store, "b", 60, clock=clock)
    for r in (a, b, a, b):
        r.tick()
    return a, b


def scored_hosts(records: list[dict[str, object]]) -> set[str]:
    return {str(r["hostname"]) for r in records}


def test_each_replica_scores_its_share_and_a_round_is_written_once(store: Store, history: pd.DataFrame) -> None:
    store.samples.ingest(history)
    end = pd.Timestamp(history["timestamp"].max()).to_pydatetime()
    # a round boundary just before the data's end, so that a lease period later is the same round
    clock = Clock(datetime.fromtimestamp((end.timestamp() // ROUND_S) * ROUND_S + 10, end.tzinfo))
    a, b = two_replicas(store, clock)
    assert (len(a.held()), len(b.held())) == (32, 32)
    model = tiny_model()
    sa, sb = (Scorer(store, model, Thresholds(), ROUND_S, now=clock, replica=r) for r in (a, b))
    got_a, got_b = sa.run_once(), sb.run_once()
    assert scored_hosts(got_a) == {"sim-node-02", "sim-node-03"}
    assert scored_hosts(got_b) == {"sim-node-00", "sim-node-01"}
    assert a.state.hostnames == 2 and a.state.dropped == 0
    everyone = sorted(history["gpu_uuid"].unique())
    assert sorted(str(r["gpu_uuid"]) for r in got_a + got_b) == everyone
    assert {u: len(store.decisions.risk_history(u)) for u in everyone} == dict.fromkeys(everyone, 1)

    # a dies; a lease later b holds everything, but this round is written already: nothing twice
    clock.advance(61)
    b.tick()
    assert len(b.held()) == 64 and round_of(clock(), ROUND_S) == round_of(clock.t - timedelta(seconds=61), ROUND_S)
    assert sb.run_once() == []
    assert b.state.dropped == 64
    assert {u: len(store.decisions.risk_history(u)) for u in everyone} == dict.fromkeys(everyone, 1)
    assert sb.state.records == [], "/metrics shows what the round wrote"

    # the next round b scores the whole fleet
    clock.advance(ROUND_S)
    b.tick()
    assert scored_hosts(sb.run_once()) == {f"sim-node-0{i}" for i in range(4)}
    assert {u: len(store.decisions.risk_history(u)) for u in everyone} == dict.fromkeys(everyone, 2)


def test_a_replica_without_shards_scores_nothing_and_shows_nothing(store: Store, history: pd.DataFrame) -> None:
    store.samples.ingest(history)
    clock = Clock(pd.Timestamp(history["timestamp"].max()).to_pydatetime())
    a = Replica(store, "a", 60, clock=clock, shards=64)
    s = Scorer(store, tiny_model(), Thresholds(), ROUND_S, now=clock, replica=a)
    s.state.records = [{"gpu_uuid": "GPU-old", "hostname": "gone"}]
    assert s.run_once() == [] and s.state.records == []  # no tick yet: no shard
    assert "holds no shard" in a.health() or "no heartbeat" in a.health()


def test_replica_metrics_and_health(store: Store) -> None:
    clock = Clock(datetime.fromisoformat("2026-03-01T00:00:10+00:00"))
    a = Replica(store, "a", 30, clock=clock)
    a.tick()
    reg = CollectorRegistry()
    reg.register(a)
    assert reg.get_sample_value("gpuhealth_replica_info", {"replica": "a"}) == 1.0
    assert reg.get_sample_value("gpuhealth_replica_shards") == 64.0
    assert reg.get_sample_value("gpuhealth_replicas_live") == 1.0
    assert reg.get_sample_value("gpuhealth_replica_lease_remaining_seconds") == 30.0
    assert reg.get_sample_value("gpuhealth_replica_heartbeats_total") == 1.0
    assert a.health() == "replica a holds 64 of 64 shards, 1 live replica(s)"
    clock.advance(31)  # not renewed: nothing is held any more, whatever the table says
    assert reg.get_sample_value("gpuhealth_replica_shards") == 0.0
    assert "holds no shard" in a.health()
    a.release()
    assert {x["owner"] for x in store.leases.shards()} == {None}
    assert until_next_round(clock(), 60) == pytest.approx(60 - 41)


def test_share_filters_hostnames_and_frames() -> None:
    share = Share(frozenset({shard_of("sim-node-00"), shard_of("sim-node-02")}))
    assert share.hosts(["sim-node-00", "sim-node-01", "sim-node-02", "sim-node-00"]) == ["sim-node-00", "sim-node-02"]
    frame = pd.DataFrame({"hostname": ["sim-node-01", "sim-node-00", "sim-node-02"], "x": [1, 2, 3]})
    assert share.only(frame)["x"].tolist() == [2, 3]


# -- the puller ------------------------------------------------------------------------------

STEP = 30
T0 = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
SELECTOR = re.compile(r"(\w*)\{([^}]*)\}|(\w+)")
MATCHER = re.compile(r'(\w+)(=~|!=|=)("(?:[^"\\]|\\.)*")')


def matches(labels: dict[str, str], matchers: str) -> bool:
    """Whether a series' labels satisfy `l="v"`, `l!="v"`, `l=~"rx"` matchers (PromQL's anchored regexes)."""
    for name, op, quoted in MATCHER.findall(matchers):
        want, have = json.loads(quoted), labels.get(name, "")
        if name == "__name__":
            continue
        ok_ = have == want if op == "=" else have != want if op == "!=" else re.fullmatch(want, have) is not None
        if not ok_:
            return False
    return True


class ShardedPrometheus(FakePrometheus):
    """The fake also answers label values with match[] and `max by (…) (m{…} or m{…})` selectors."""

    def handler(self, req: httpx.Request) -> httpx.Response:
        path, q = req.url.path, req.url.params
        if path.startswith("/api/v1/label/") and path != "/api/v1/label/__name__/values":
            self.requests.append(req)
            label = path.split("/")[4]
            m = SELECTOR.fullmatch(q["match[]"])
            assert m, q["match[]"]
            name = re.search(r'__name__="(\w+)"', m[2])[1]  # type: ignore[index]
            values = {lab.get(label, "") for lab, _ in self.series.get(name, []) if matches(lab, m[2])}
            return ok(sorted(v for v in values if v))
        if path == "/api/v1/query_range":
            self.requests.append(req)
            if req.method == "POST":  # long queries come form-encoded
                q = httpx.QueryParams(req.content.decode())
            outer = re.fullmatch(r"max by \((?P<by>[^)]*)\) \((?P<sel>.*)\)", q["query"])
            assert outer, q["query"]
            parts = [SELECTOR.fullmatch(p.strip()) for p in outer["sel"].split(" or ")]
            name = parts[0][1] or parts[0][3]  # type: ignore[index]
            kept = [(lab, pts) for lab, pts in self.series.get(name, [])
                    if any(p[3] or matches(lab, p[2]) for p in parts)]  # type: ignore[index]  # fmt: skip
            plain = FakePrometheus(series={name: kept})
            url = req.url.copy_merge_params(dict(q)).copy_set_param("query", f"max by ({outer['by']}) ({name})")
            inner = httpx.Request("GET", url)
            return plain.handler(inner)
        return super().handler(req)


def fleet_on(hosts: dict[str, str], steps: int) -> ShardedPrometheus:
    """One GPU per host, reporting its host under the label given ({host: label})."""
    p = ShardedPrometheus()
    for i, (host, label) in enumerate(hosts.items()):
        labels = gpu_labels(i) | {"UUID": f"GPU-{host}", "instance": f"{host}:9400"}
        labels.pop("Hostname")
        if label != "instance":
            labels[label] = host
        pts = {int((T0 + timedelta(seconds=STEP * k)).timestamp() * 1000): 40.0 + k for k in range(steps)}
        p.add("DCGM_FI_DEV_GPU_TEMP", labels, pts)
    return p


def test_host_selector_matches_the_label_each_host_reports_under() -> None:
    sel = host_selector("M", {"Hostname": {"a.b", "c"}, "hostname": set(), "instance": {"10.0.0.1"}})
    assert sel == 'M{Hostname=~"a\\\\.b|c"} or M{Hostname="",hostname="",instance=~"(10\\\\.0\\\\.0\\\\.1)(:[0-9]+)?"}'
    assert host_selector("M", None) == "M"


def test_the_puller_pulls_only_its_hosts(store: Store) -> None:
    hosts = {"node-a.example": "Hostname", "node-b": "hostname", "10.0.0.7": "instance", "node-d": "Hostname"}
    prom = fleet_on(hosts, steps=20)
    now = Clock(T0 + timedelta(seconds=STEP * 19 + 20))
    mine = Share(frozenset({shard_of("node-a.example"), shard_of("10.0.0.7")}))
    assert not mine.has("node-b") and not mine.has("node-d")
    replica = Replica(store, "a", 60, clock=now)
    replica.state.held = dict.fromkeys(mine.shards, now.t + timedelta(seconds=60))
    p = PrometheusPuller(store, URL, every_s=60, step_s=STEP, backfill=timedelta(seconds=STEP * 10),
                         client=prom.client(), now=now, replica=replica)  # fmt: skip
    assert p.pull_once() > 0
    assert sorted(g["hostname"] for g in store.gpus.find()[0]) == ["10.0.0.7", "node-a.example"]
    queried = [r.url.params["query"] for r in prom.requests if r.url.path.endswith("query_range")]
    assert queried and all("node-b" not in q and "node-d" not in q and "node-a" in q for q in queried)

    # gaining a shard reaches back over the handover (the lease and a pull), not just the last step
    replica.state.held[shard_of("node-b")] = now.t + timedelta(seconds=60)
    now.advance(STEP)
    prom = fleet_on(hosts, steps=21)
    p.client = prom.client()
    p.pull_once()
    (first,) = [r for r in prom.requests if r.url.path.endswith("query_range")][:1]
    span = float(first.url.params["end"]) - float(first.url.params["start"])
    assert span >= 60 + 2 * 60, span
    assert "node-b" in {g["hostname"] for g in store.gpus.find()[0]}
    assert "node-d" not in {g["hostname"] for g in store.gpus.find()[0]}


def test_a_long_share_is_asked_for_in_a_post_body() -> None:
    hosts = {f"gpu-node-{i:04d}.cluster.example": "Hostname" for i in range(300)}
    prom = fleet_on(hosts, steps=3)
    wanted = {h for i, h in enumerate(hosts) if i % 2 == 0}
    frame = import_history(URL, T0, T0 + timedelta(seconds=2 * STEP), STEP, client=prom.client(),
                           hosts={"Hostname": wanted})  # fmt: skip
    assert set(frame["hostname"]) == wanted and len(frame) == 3 * len(wanted)
    posts = [r for r in prom.requests if r.method == "POST"]
    assert posts and all(r.url.path == "/api/v1/query_range" for r in posts)
