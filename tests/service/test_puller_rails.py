"""Fleet mode: each GPU's InfiniBand rail (gpuhealth_infiniband_port_gpu_info) reaches the store, and a
flapping rail's reason names its port, as on a node whose collector feeds the service directly."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import httpx
import pytest

from core.prom_import import RAIL_METRIC
from predictor.score import load_model
from predictor.thresholds import Thresholds
from service.scorer import Scorer
from store import Store
from tests.core.test_prom_import import FakePrometheus, gpu_labels, ok
from tests.service.test_puller import Clock, at, ms, puller

STEPS = 40
"""Twenty minutes of 30 s steps: the rail of GPU 1 goes down once a minute, 20 times, more than 3 an hour."""


@dataclass
class RailPrometheus(FakePrometheus):
    """The fake Prometheus, answering the instant query for the ports' ties too."""

    ties: list[dict[str, str]] = field(default_factory=list)
    queries: list[str] = field(default_factory=list)

    def handler(self, req: httpx.Request) -> httpx.Response:
        query = req.url.params.get("query", "")
        if req.url.path == "/api/v1/query" and RAIL_METRIC in query and self.fail(req) is None:
            self.queries.append(query)
            result = [{"metric": labels, "value": [float(req.url.params["time"]), "1"]} for labels in self.ties]
            return ok({"resultType": "vector", "result": result})
        return super().handler(req)


def fleet() -> RailPrometheus:
    p = RailPrometheus()
    for i in range(2):
        p.add("DCGM_FI_DEV_GPU_TEMP", gpu_labels(i), {ms(k): 40.0 for k in range(STEPS)})
        p.add("DCGM_FI_DEV_XID_ERRORS", gpu_labels(i), {ms(k): 0.0 for k in range(STEPS)})
        flaps = {ms(k): (k // 2 if i == 1 else 0.0) for k in range(STEPS)}
        p.add("gpuhealth_ib_rail_link_downed_total", gpu_labels(i), flaps)
    # As collector.infiniband exports them: GPU 0 on mlx5_0's switch, GPU 1 on mlx5_3's.
    for i, dev in ((0, "mlx5_0"), (1, "mlx5_3")):
        host = {k: v for k, v in gpu_labels(i).items() if k not in ("modelName", "pci_bus_id", "device")}
        p.ties.append({**host, "device": dev, "port": "1", "affinity": "pcie_switch"})
    return p


def test_a_pull_keeps_each_gpus_rail_and_the_round_names_the_flapping_port(store: Store) -> None:
    prom, clock = fleet(), Clock(STEPS - 1)
    p = puller(store, prom, clock, backfill_steps=STEPS)
    assert p.pull_once() > 0
    assert prom.queries and "UUID" in prom.queries[0]
    frame = store.samples.scoring_history(since=None, until=at(STEPS))
    assert frame.attrs["gpuhealth_ib_rails"] == {"GPU-0": "mlx5_0/1", "GPU-1": "mlx5_3/1"}
    # pandas deep-copies attrs into every frame and column taken from this one: the names are shared, not
    # copied (a dict of 10,000 names cost 6 ms per column taken; the features take thousands).
    assert frame["gpu_uuid"].attrs["gpuhealth_ib_rails"] is frame.attrs["gpuhealth_ib_rails"]
    records = Scorer(store, load_model(), Thresholds(), 300).run_once(at=at(STEPS - 1) + timedelta(seconds=1))
    by_gpu = {str(r["gpu_uuid"]): r for r in records}
    assert "InfiniBand rail flapping: its rail mlx5_3/1 went down" in " ".join(by_gpu["GPU-1"]["reasons"])
    assert any(x.startswith("InfiniBand rail flapping: the rail mlx5_3/1 of GPU 1 of node-a")
               for x in by_gpu["GPU-0"]["reasons"])  # fmt: skip


def test_a_failed_rail_query_costs_the_names_only(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    prom, clock = fleet(), Clock(STEPS - 1)
    prom.fail = lambda req: httpx.Response(503, text="down") if RAIL_METRIC in req.url.params.get("query", "") else None
    p = puller(store, prom, clock, backfill_steps=STEPS)
    assert p.pull_once() > 0  # the samples are stored
    assert "InfiniBand rails not updated" in caplog.text
    assert store.samples.scoring_history(since=None, until=at(STEPS)).attrs["gpuhealth_ib_rails"] == {}
