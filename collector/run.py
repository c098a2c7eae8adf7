"""Wiring of a running collector: backend -> sampler -> collectors -> HTTP server."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client.registry import CollectorRegistry

from collector.backends.base import Backend, GpuInfo, ProbeRunner
from collector.exporter import ExporterServer, GpuCollector, SelfCollector
from collector.infiniband import InfinibandCollector, RailCounts
from collector.kernel_log import FleetKernelLogs, LogXids, simulated_kernel_logs
from collector.nvlink import NvlinkCollector, link_reader
from collector.nvswitch import NvswitchCollector, switch_reader
from collector.sampler import Sampler
from core.catalog import Field, LabelField
from core.labels import HOSTNAME

if TYPE_CHECKING:
    from collector.attribution import Attributor
    from collector.nfd import NfdConfig, NfdLabeler
    from collector.probes import ProbeConfig, ProbeScheduler
    from collector.remediate import RemedyAgent
    from collector.remedy import Resetter
    from collector.webconfig import WebConfigFile


@dataclass
class RunningCollector:
    """A running collector's parts, for the CLI, the service and tests."""

    backend: Backend
    sampler: Sampler
    registry: CollectorRegistry
    server: ExporterServer
    probes: ProbeScheduler | None = None
    """The probe scheduler, when probing is on."""
    nfd: NfdLabeler | None = None
    """The loop writing Node Feature Discovery labels, when on (`--nfd-features-dir`)."""
    resetter: Resetter | None = None
    """Resets this node's GPUs when allowed (`--allow-reset`), refuses otherwise (collector.remedy)."""
    remedies: RemedyAgent | None = None
    """The loop carrying out the service's remedies on this node's GPUs, when on (collector.remediate)."""

    def start(self) -> None:
        self.sampler.start()
        self.server.start()
        if self.probes is not None:
            self.probes.start()
        if self.nfd is not None:
            self.nfd.start()
        if self.remedies is not None:
            self.remedies.start()

    def stop(self) -> None:
        if self.remedies is not None:
            self.remedies.stop()
        if self.nfd is not None:
            self.nfd.stop()
        if self.probes is not None:
            self.probes.stop()
        self.server.stop()
        self.sampler.stop()
        self.backend.close()


@dataclass
class Sampling:
    """A backend's sampler, the registry of its series and (optionally) its probe scheduler."""

    sampler: Sampler
    registry: CollectorRegistry
    probes: ProbeScheduler | None = None


def build_sampling(
    backend: Backend,
    fields: Sequence[Field],
    interval_s: float,
    hostname_label: str = HOSTNAME,
    *,
    probes: ProbeConfig | None = None,
    probe_runner: ProbeRunner | None = None,
    on_probe_results: Callable[[list[dict[str, Any]]], None] | None = None,
    attributors: Sequence[Attributor] = (),
    label_fields: Sequence[LabelField] | None = None,
    sysfs_root: Path | None = None,
) -> Sampling:
    """The sampler and its Prometheus collectors (no HTTP server): `collect` and `serve` both start here.

    With `probes` (enabled), a probe scheduler runs on idle GPUs and gpuhealth_probe_*
    series are exported; its results also go to `on_probe_results` (Store rows).
    `attributors` (collector.attribution) put the pods and jobs on each GPU into its series' labels.
    `label_fields` (DCGM_FI_DRIVER_VERSION, ...) go on every series of a GPU; None: the catalogue's defaults.
    With `sysfs_root` (/sys on a real node), InfiniBand/RoCE ports are exported (collector.infiniband).
    """
    rails = (RailCounts(sysfs_root),) if sysfs_root is not None else ()  # each GPU's ib_rail_link_downed
    logs = simulated_kernel_logs(backend)  # a simulated fleet's: its XIDs, those NVML's events miss too
    augment = (*rails, LogXids(logs)) if logs else rails
    sampler = Sampler(backend, interval_s, attributors=attributors, augment=augment)
    report = on_probe_results

    if on_probe_results is not None:

        def report(rows: list[dict[str, Any]]) -> None:
            # A simulated or replayed fleet files its probe results under its own clock, as its samples.
            snap = sampler.latest
            if snap is not None and snap.data_time is not None:
                at = datetime.fromtimestamp(snap.sample_time, UTC)
                rows = [{**r, "ran_at": at} for r in rows]
            on_probe_results(rows)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(lambda: sampler.latest, fields, hostname_label, label_fields))
    if logs:  # a simulated fleet's XIDs and SXIDs, as a live node's `attach_kernel_log` exports them
        registry.register(FleetKernelLogs(logs, lambda: _xid_counts(sampler), hostname_label))
    extra = []
    if sysfs_root is not None:
        # Registered before SelfCollector, which reports the status of this scrape's read.
        ib = InfinibandCollector(sysfs_root, lambda: _infos(sampler), hostname_label)
        registry.register(ib)
        extra.append(ib.statuses)
    read_links = link_reader(backend)
    if read_links is not None:  # nvml and dcgm: each NVLink link and the fabric, read at scrape time
        nv = NvlinkCollector(read_links, hostname_label)
        registry.register(nv)
        extra.append(nv.statuses)
    read_switches = switch_reader(backend)
    if read_switches is not None:  # dcgm: each NVSwitch
        host = next((g.hostname for g in backend.gpus()), "")
        sw = NvswitchCollector(read_switches, host, hostname_label)
        registry.register(sw)
        extra.append(sw.statuses)
    registry.register(SelfCollector(sampler, extra=extra))
    scheduler = None
    if probes is not None and probes.enabled:
        from collector.probes import ProbeCollector, build_scheduler

        scheduler = build_scheduler(
            backend, probes, runner=probe_runner, on_results=report,
            latest=lambda: sampler.latest, interval_s=interval_s,
        )  # fmt: skip
        if scheduler is not None:
            registry.register(ProbeCollector(scheduler, hostname_label))
    return Sampling(sampler, registry, scheduler)


def _xid_counts(sampler: Sampler) -> Mapping[str, Mapping[int, int]]:
    snap = sampler.latest
    return {} if snap is None else snap.xid_counts


def _infos(sampler: Sampler) -> list[GpuInfo]:
    snap = sampler.latest
    return [] if snap is None else [r.info for r in snap.readings]


def build_collector(
    backend: Backend,
    fields: Sequence[Field],
    interval_s: float,
    host: str = "0.0.0.0",
    port: int = 9400,
    hostname_label: str = HOSTNAME,
    *,
    probes: ProbeConfig | None = None,
    probe_runner: ProbeRunner | None = None,
    on_probe_results: Callable[[list[dict[str, Any]]], None] | None = None,
    web: WebConfigFile | None = None,
    nfd: NfdConfig | None = None,
    attributors: Sequence[Attributor] = (),
    label_fields: Sequence[LabelField] | None = None,
    sysfs_root: Path | None = None,
) -> RunningCollector:
    """Assemble (but do not start) a collector serving `backend` on host:port (see `build_sampling`).

    With `web` (a loaded `--web-config-file`), the endpoint serves TLS and/or basic auth as it says.
    With `nfd`, a loop writes the node's decision from the service as NFD feature labels
    (`collector.nfd`), and its gpuhealth_nfd_* series join the collector's.
    """
    s = build_sampling(
        backend, fields, interval_s, hostname_label, probes=probes, probe_runner=probe_runner,
        on_probe_results=on_probe_results, attributors=attributors, label_fields=label_fields,
        sysfs_root=sysfs_root,
    )  # fmt: skip
    labeler = None
    if nfd is not None:
        from collector.nfd import NfdCollector, NfdLabeler

        labeler = NfdLabeler(nfd)
        s.registry.register(NfdCollector(labeler))
    server = ExporterServer(s.registry, s.sampler.health, host, port, web)
    return RunningCollector(backend, s.sampler, s.registry, server, s.probes, labeler)


def run_until_signalled(collector: RunningCollector) -> None:
    """Start, block until SIGINT/SIGTERM, stop cleanly."""
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    collector.start()
    try:
        done.wait()
    finally:
        collector.stop()
