"""Fleet mode: each GPU's PCI bus id (dcgm-exporter's `pci_bus_id` label) reaches the store, so the scoring
frame keys a GPU's slot by host and bus id there too (decision 0089)."""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
import pytest

from core.history import BUS_IDS_ATTR
from core.prom_import import BUS_METRIC
from store import Store
from tests.core.test_prom_import import FakePrometheus, gpu_labels, ok
from tests.service.test_puller import Clock, at, ms, puller

STEPS = 10


@dataclass
class BusPrometheus(FakePrometheus):
    """The fake Prometheus, answering the instant query for the GPUs' bus ids too."""

    queries: list[str] = field(default_factory=list)

    def handler(self, req: httpx.Request) -> httpx.Response:
        query = req.url.params.get("query", "")
        if req.url.path == "/api/v1/query" and BUS_METRIC in query and self.fail(req) is None:
            self.queries.append(query)
            by = [s.strip() for s in query.split("(", 2)[1].split(")")[0].split(",")]
            result = [
                {"metric": {k: v for k, v in labels.items() if k in by}, "value": [float(req.url.params["time"]), "1"]}
                for labels, _ in self.series.get(BUS_METRIC, [])
                if labels.get("pci_bus_id")
            ]
            return ok({"resultType": "vector", "result": result})
        return super().handler(req)


def fleet() -> BusPrometheus:
    p = BusPrometheus()
    for i in range(2):
        labels = gpu_labels(i) if i == 0 else {k: v for k, v in gpu_labels(i).items() if k != "pci_bus_id"}
        p.add(BUS_METRIC, labels, {ms(k): 40.0 for k in range(STEPS)})
    return p


def test_a_pull_keeps_each_gpus_bus_id(store: Store) -> None:
    prom, clock = fleet(), Clock(STEPS - 1)
    assert puller(store, prom, clock, backfill_steps=STEPS).pull_once() > 0
    assert prom.queries and "pci_bus_id" in prom.queries[0]
    assert store.gpus.get("GPU-0")["pci_bus_id"] == "00000000:18:00.0"
    assert store.gpus.get("GPU-1")["pci_bus_id"] is None, "an exporter without the label: no bus id"
    frame = store.samples.scoring_history(since=None, until=at(STEPS))
    assert frame.attrs[BUS_IDS_ATTR] == {"GPU-0": "00000000:18:00.0"}


def test_a_failed_bus_id_query_costs_the_bus_ids_only(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    prom, clock = fleet(), Clock(STEPS - 1)
    prom.fail = lambda req: (
        httpx.Response(503, text="down") if "pci_bus_id" in req.url.params.get("query", "") else None
    )
    assert puller(store, prom, clock, backfill_steps=STEPS).pull_once() > 0  # the samples are stored
    assert "PCI bus ids not updated" in caplog.text
    assert store.gpus.get("GPU-0")["pci_bus_id"] is None
