"""A collector that reads its hardware at each scrape and reports that read's health (node_exporter's way).

`collect()` times `read()`; an error is logged and said in `gpuhealth_collector_success{collector=NAME}`
through SelfCollector, never raised into the scrape; `read()` returning None means no such hardware here:
no series and no status. Subclasses: collector.infiniband.InfinibandCollector, collector.nvlink.NvlinkCollector.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from collector.sampler import CollectorStatus

log = logging.getLogger(__name__)


class ScrapedCollector(Collector):
    """Reads at each scrape; its last read's status is for SelfCollector (register it before SelfCollector)."""

    name: str
    """The `collector` label of its status."""
    what: str
    """What a failed read could not read, for the log ("NVLink links")."""

    def __init__(self) -> None:
        self.status: dict[str, CollectorStatus] = {}
        """Its last read's status; empty where the hardware is absent."""

    def statuses(self) -> Mapping[str, CollectorStatus]:
        """This collector's status after its last scrape."""
        return dict(self.status)

    def read(self) -> Sequence[Metric] | None:
        """The families of one scrape, or None where there is no such hardware."""
        raise NotImplementedError

    def collect(self) -> Iterator[Metric]:
        t0 = time.perf_counter()
        try:
            families = self.read()
        except Exception as err:  # a scrape never raises: the status says why
            log.warning("reading %s failed: %s", self.what, err)
            self.status = {self.name: CollectorStatus(False, time.perf_counter() - t0, str(err))}
            return
        if families is None:
            self.status = {}
            return
        # Set before yielding: a reader may stop early (get_sample_value), and SelfCollector reads it next.
        self.status = {self.name: CollectorStatus(True, time.perf_counter() - t0)}
        yield from families
