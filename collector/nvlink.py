"""gpuhealth_nvlink_* and gpuhealth_fabric_* series: each NVLink link and the fabric, read at each scrape.

The source is collector.backends.nvml_links.NvmlLinks on the nvml backend, DcgmBackend.read_links on the
dcgm backend; the names are core.nvlink's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from collector.backends.nvml_links import GpuLinks, links_of
from collector.scraped import ScrapedCollector
from core.labels import HOSTNAME
from core.nvlink import COUNTERS, FABRIC_INFO, FABRIC_STATE, FABRIC_STATUS, LINK_LABEL, LINK_UP, NAME, PREFIX

log = logging.getLogger(__name__)


def link_reader(backend: object) -> Callable[[], Sequence[GpuLinks]] | None:
    """The backend's reader of links and fabric: its own `read_links` (dcgm), NVML's (nvml), else None."""
    own = getattr(backend, "read_links", None)
    if callable(own):
        return own
    links = links_of(backend)
    return None if links is None else links.read


class NvlinkCollector(ScrapedCollector):
    """Per-link state and error counters and the fabric registration of each GPU."""

    name = NAME
    what = "NVLink links"

    def __init__(self, read: Callable[[], Sequence[GpuLinks]], hostname_label: str = HOSTNAME) -> None:
        super().__init__()
        self._read = read
        self._host_label = hostname_label

    def read(self) -> list[Metric] | None:
        gpus = list(self._read())
        if not any(g.links or g.fabric for g in gpus):
            return None
        return [*self._link_families(gpus), *self._fabric_families(gpus)]

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
