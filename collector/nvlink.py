"""gpuhealth_nvlink_* and gpuhealth_fabric_* series: each NVLink link and the fabric, read at each scrape.

The source is collector.backends.nvml_links.NvmlLinks on the nvml backend; the names are core.nvlink's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collector.backends.nvml_links import GpuLinks
from collector.sampler import CollectorStatus
from core.labels import HOSTNAME
from core.nvlink import COUNTERS, FABRIC_INFO, FABRIC_STATE, FABRIC_STATUS, LINK_LABEL, LINK_UP, NAME, PREFIX

log = logging.getLogger(__name__)


class NvlinkCollector(Collector):
    """Per-link state and error counters and the fabric registration of each GPU."""

    def __init__(self, read: Callable[[], Sequence[GpuLinks]], hostname_label: str = HOSTNAME) -> None:
        self._read = read
        self._host_label = hostname_label
        self.status: dict[str, CollectorStatus] = {}
        """Its last run's status, for SelfCollector's gpuhealth_collector_success; empty without NVLink."""

    def statuses(self) -> Mapping[str, CollectorStatus]:
        """This collector's status after its last scrape (register it before SelfCollector)."""
        return dict(self.status)

    def collect(self) -> Iterator[Metric]:
        t0 = time.perf_counter()
        try:
            gpus = list(self._read())
        except Exception as err:  # a scrape never raises: the status says why
            log.warning("reading NVLink links failed: %s", err)
            self.status = {NAME: CollectorStatus(False, time.perf_counter() - t0, str(err))}
            return
        if not any(g.links or g.fabric for g in gpus):
            self.status = {}
            return
        families = [*self._link_families(gpus), *self._fabric_families(gpus)]
        self.status = {NAME: CollectorStatus(True, time.perf_counter() - t0)}
        yield from families

    def _labels(self, g: GpuLinks) -> dict[str, str]:
        host = {self._host_label: g.info.hostname} if g.info.hostname else {}
        return {"gpu": str(g.info.index), "UUID": g.info.uuid, **host}

    def _link_families(self, gpus: Sequence[GpuLinks]) -> Iterator[Metric]:
        up = GaugeMetricFamily(LINK_UP, "1 if the NVLink link is active, 0 if it is down.")
        counters = {n: CounterMetricFamily(PREFIX + s, h) for n, (s, h) in COUNTERS.items()}
        for g in gpus:
            base = self._labels(g)
            for r in g.links:
                labels = {**base, LINK_LABEL: str(r.link)}
                up.add_sample(LINK_UP, labels, 1.0 if r.up else 0.0)
                for name, value in r.counters.items():
                    counters[name].add_sample(counters[name].name + "_total", labels, float(value))
        families: list[Metric] = [up, *counters.values()]
        yield from (f for f in families if f.samples)

    def _fabric_families(self, gpus: Sequence[GpuLinks]) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            FABRIC_STATE, "Registration with the NVLink fabric: 1 not started, 2 in progress, 3 completed."
        )
        status = GaugeMetricFamily(FABRIC_STATUS, "The fabric registration's NVML return code (0: success).")
        info = GaugeMetricFamily(FABRIC_INFO, "1, labelled with the GPU's fabric clique and cluster ids.")
        for g in gpus:
            if g.fabric is None:
                continue
            labels = self._labels(g)
            state.add_sample(FABRIC_STATE, labels, float(g.fabric.state))
            status.add_sample(FABRIC_STATUS, labels, float(g.fabric.status))
            ids = {"clique_id": str(g.fabric.clique_id), "cluster_uuid": g.fabric.cluster_uuid}
            info.add_sample(FABRIC_INFO, {**labels, **ids}, 1.0)
        for fam in (state, status, info):
            if fam.samples:
                yield fam
