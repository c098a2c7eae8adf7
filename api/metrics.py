"""The service's /metrics: risk and decision per GPU, node findings, scoring, store and buffer health.

Risk comes from the scoring loop's latest round held in memory, so a scrape never
queries the database.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from core import remediation_metrics as rm
from core.history import FAILURE_MODES
from predictor.node import cooling_suspected
from predictor.policy import DECISIONS
from service.actuator import Actuator
from service.ingest import IngestBuffer
from service.remediation import DURATION_BUCKETS, RemediationStats
from service.scorer import Scorer, decision_counts
from store import Store, StoreError

MODES = ("overall", "ecc", "thermal", "pcie")
RISK_COLUMN = {"overall": "risk", "ecc": "risk_ecc", "thermal": "risk_thermal", "pcie": "risk_pcie"}
FAILURE_KINDS = ("failure", "rma")
REASONS_MAX = 500
"""Longest reasons label value: long enough for three reasons, short enough for any TSDB."""
PING_CACHE_S = 5.0


class ApiMetrics(Collector):
    """Collects the service's series from memory (no database query per scrape, except a cached ping)."""

    def __init__(
        self,
        store: Store,
        scorer: Scorer | None,
        buffer: IngestBuffer | None,
        host_label: str,
        actuator: Actuator | None = None,
    ) -> None:
        self.store = store
        self.actuator = actuator
        self.scorer = scorer
        self.buffer = buffer
        self.host_label = host_label
        self._failures = {(m, k): 0 for m in FAILURE_MODES for k in FAILURE_KINDS}
        self._lock = threading.Lock()
        self._ping: tuple[float, bool] = (0.0, True)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def failure_recorded(self, mode: str, kind: str) -> None:
        with self._lock:
            self._failures[(mode, kind)] = self._failures.get((mode, kind), 0) + 1

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _store_up(self) -> bool:
        if self.buffer is not None:
            return self.buffer.store_up
        at, up = self._ping
        if time.monotonic() - at > PING_CACHE_S:
            try:
                self.store.ping()
                up = True
            except StoreError:
                up = False
            self._ping = (time.monotonic(), up)
        return up

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "gpuhealth_store_up", "1 when the database answered recently", value=float(self._store_up())
        )
        fails = CounterMetricFamily(
            "gpuhealth_failures_recorded", "Failures and RMAs recorded through the API", labels=["mode", "kind"]
        )
        with self._lock:
            for (m, k), n in sorted(self._failures.items()):
                fails.add_metric([m, k], n)
        yield fails
        if self.buffer is not None:
            yield from _buffer(self.buffer)
        if self.actuator is not None:
            yield from _actuator(self.actuator)
            if self.actuator.remediator is not None:
                yield from _remediations(self.actuator.remediator.stats)
        if self.scorer is not None:
            yield from self._scoring(self.scorer)

    def _scoring(self, scorer: Scorer) -> Iterator[Metric]:
        """The scoring loop's series: rounds, risk and decision per GPU, node findings."""
        hl = self.host_label
        state = scorer.state
        yield CounterMetricFamily("gpuhealth_score_runs", "Scoring rounds completed", value=state.runs)
        yield CounterMetricFamily("gpuhealth_score_failures", "Scoring rounds that failed", value=state.failures)
        if state.last_run is not None:
            yield GaugeMetricFamily(
                "gpuhealth_score_last_run_timestamp_seconds",
                "When the last scoring round finished",
                value=state.last_run,
            )
            yield GaugeMetricFamily(
                "gpuhealth_score_duration_seconds",
                "How long the last scoring round took",
                value=state.last_duration_s or 0,
            )
        labels = ["UUID", hl, "gpu", "modelName"]
        risk = GaugeMetricFamily("gpuhealth_risk", "Failure risk in the lead window, 0..1", labels=[*labels, "mode"])
        decision = GaugeMetricFamily(
            "gpuhealth_decision", "1 for the GPU's current decision, 0 for the others", labels=[*labels, "decision"]
        )
        reasons = GaugeMetricFamily(
            "gpuhealth_decision_reasons_info", "Why the GPU has its decision (always 1)",
            labels=["UUID", hl, "gpu", "decision", "reasons"],
        )  # fmt: skip
        records = state.records
        for r in records:
            uuid = str(r["gpu_uuid"])
            gpu = state.identities.get(uuid, {}).get("gpu_index")
            base = [uuid, str(r["hostname"]), "" if gpu is None else str(gpu), str(r["model_name"])]
            for mode in MODES:
                v = r.get(RISK_COLUMN[mode])
                if v is not None and v == v:
                    risk.add_metric([*base, mode], float(v))
            current = str(r["decision"])
            for d in DECISIONS:
                decision.add_metric([*base, d], 1.0 if d == current else 0.0)
            text = "; ".join(r.get("reasons") or [])
            reasons.add_metric([*base[:3], current, text[:REASONS_MAX]], 1.0)
        yield risk
        yield decision
        yield reasons
        yield _node_cooling(records, hl)
        by = GaugeMetricFamily("gpuhealth_gpus_by_decision", "GPUs per current decision", labels=["decision"])
        for d, n in decision_counts(records).items():
            by.add_metric([d], n)
        yield by


def _node_cooling(records: list[dict[str, Any]], host_label: str) -> GaugeMetricFamily:
    """Per scored node: 1 when its GPUs carry a node-wide heat finding (check the node's cooling), else 0.

    Read from the GPUs' reasons, which the store keeps: after a restart `Scorer.load_latest` brings
    them back, and with them the finding.
    """
    family = GaugeMetricFamily(
        "gpuhealth_node_cooling_suspected",
        "1 when the node's GPUs run hot together (node-wide heat: check its cooling), 0 otherwise",
        labels=[host_label],
    )
    suspected = cooling_suspected((str(r["hostname"]), r.get("reasons") or []) for r in records)
    for host, yes in sorted(suspected.items()):
        family.add_metric([host], float(yes))
    return family


def _actuator(act: Actuator) -> Iterator[Metric]:
    """The actuator's series: breaker, actions by result, nodes per state of ours, passes."""
    st = act.state
    target = act.target.name
    breaker = GaugeMetricFamily(
        "gpuhealth_actuator_breaker_open",
        "1 while the actuator's breaker is open (it acts no more until POST /v1/actuator/reset)",
        labels=["target"],
    )
    breaker.add_metric([target], float(st.breaker_open))
    yield breaker
    mode = GaugeMetricFamily("gpuhealth_actuator_mode", "1 for the actuator's mode", labels=["target", "mode"])
    for m in ("dry-run", "on"):
        mode.add_metric([target, m], float(act.mode == m))
    yield mode
    actions = CounterMetricFamily(
        "gpuhealth_actions", "Node actions planned or applied, by result", labels=["target", "action", "result"]
    )
    for (action, result), n in sorted(st.actions.items()):
        actions.add_metric([target, action, result], n)
    yield actions
    nodes = GaugeMetricFamily(
        "gpuhealth_actuator_nodes",
        "Nodes per state of ours, from the last look at the scheduler",
        labels=["target", "state"],
    )
    for d in DECISIONS:
        nodes.add_metric([target, d], st.nodes_by_state.get(d, 0))
    yield nodes
    yield CounterMetricFamily("gpuhealth_actuator_passes", "Reconciliation passes completed", value=st.passes)
    yield CounterMetricFamily(
        "gpuhealth_actuator_failures", "Passes that failed (scheduler or database unreachable)", value=st.failures
    )
    if st.last_pass is not None:
        yield GaugeMetricFamily(
            "gpuhealth_actuator_last_pass_timestamp_seconds", "When the last pass finished", value=st.last_pass
        )


def _remediations(st: RemediationStats) -> Iterator[Metric]:
    """The remediation loop's series: closed by result, time to return, open and stuck by stage."""
    closed = CounterMetricFamily(
        rm.TOTAL.removesuffix("_total"), "Remediations closed, by remedy and result (returned, rma, cancelled)",
        labels=["remedy", "result"],
    )  # fmt: skip
    for remedy in rm.REMEDIES:
        for result in rm.RESULTS:
            closed.add_metric([remedy, result], st.closed.get((remedy, result), 0))
    yield closed
    seconds = HistogramMetricFamily(
        rm.SECONDS, "Seconds from detection to return to service (returned remediations)",
        labels=["remedy"],
    )  # fmt: skip
    for remedy in rm.REMEDIES:
        counts = st.buckets.get(remedy, [0] * len(DURATION_BUCKETS))
        buckets = [(f"{b:g}", n) for b, n in zip(DURATION_BUCKETS, counts, strict=True)]
        seconds.add_metric([remedy], [*buckets, ("+Inf", st.counts.get(remedy, 0))], st.sums.get(remedy, 0.0))
    yield seconds
    for name, doc, values in (
        (rm.OPEN, "Remediations under way, by remedy and stage", st.open),
        (rm.STUCK, "Remediations past their stage's deadline, by remedy and stage", st.stuck),
    ):
        g = GaugeMetricFamily(name, doc, labels=["remedy", "stage"])
        for remedy in rm.REMEDIES:
            for stage in rm.STAGES:
                g.add_metric([remedy, stage], values.get((remedy, stage), 0))
        yield g


def _buffer(buffer: IngestBuffer) -> Iterator[Metric]:
    """The ingest buffer's series."""
    st = buffer.stats
    yield GaugeMetricFamily("gpuhealth_buffer_samples", "Samples waiting to be written", value=len(buffer))
    yield GaugeMetricFamily(
        "gpuhealth_buffer_capacity", "Samples the buffer holds before dropping", value=buffer.capacity
    )
    yield CounterMetricFamily(
        "gpuhealth_buffer_dropped_samples", "Samples dropped: buffer full while the database was down",
        value=st.dropped,
    )  # fmt: skip
    yield CounterMetricFamily(
        "gpuhealth_buffer_received_samples", "Samples the collector handed over", value=st.received
    )
    yield CounterMetricFamily("gpuhealth_buffer_written_samples", "Samples written to the store", value=st.written)
    yield GaugeMetricFamily(
        "gpuhealth_buffer_probe_results", "Probe results waiting to be written", value=buffer.probes_held()
    )
    yield CounterMetricFamily(
        "gpuhealth_buffer_dropped_probe_results",
        "Probe results dropped: buffer full while the database was down, or rejected by it",
        value=st.probes_dropped,
    )
