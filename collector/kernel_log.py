"""XIDs and NVSwitch SXIDs counted from the kernel log, and their Prometheus collector.

One source counts each XID (docs/decisions/0073-xids-from-the-kernel-log.md): the kernel log
when it can be read, NVML's event stream only when it cannot. The choice is made once, at the
first poll, so a counter never changes source (and so never jumps) while the collector runs.
The kernel log is /dev/kmsg (collector.kmsg) or the systemd journal (collector.journal), chosen
at start by GPUHEALTH_KERNEL_LOG_SOURCE (docs/decisions/0081-the-kernel-log-through-the-journal.md).
gpuhealth_xid_errors_total (NVML events since start) stays as it was.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Generic

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from collector.backends.base import GpuInfo, GpuReading
from collector.exporter import LABELS, gpu_labels
from collector.kernel_log_source import JournalOptions, KernelLogOptions, LogCursor, LogReader, R, open_reader
from collector.kmsg import KmsgCursor, KmsgError, KmsgReader
from collector.nvswitch import SwitchInfo, list_switches
from collector.sampler import Sampler
from collector.xid_log import XidLine, parse_line, pci_key, xid_message
from core.kernel_log import OVERRUNS, READABLE, SXID, SXID_LABELS, XID, family
from core.labels import HOSTNAME
from core.worker import Worker

log = logging.getLogger(__name__)

Pci = tuple[int, int, int]
NvmlCounts = Callable[[], Mapping[str, Mapping[int, int]]]
"""NVML's XID events per GPU UUID and code since start (the sampler's Snapshot.xid_counts)."""


def pci_text(pci: Pci) -> str:
    """A PCI id as NVML spells it (00000000:41:00.0), the function taken as 0."""
    return f"{pci[0]:08X}:{pci[1]:02X}:{pci[2]:02X}.0"


class KernelLog(Worker, Generic[R]):
    """Polls the kernel log for XID and SXID lines and counts them per device and code."""

    thread_name = "gpuhealth-kmsg"
    stop_timeout_s = 2.0

    def __init__(
        self,
        reader: LogReader[R],
        cursor: LogCursor[R],
        gpus: Sequence[GpuInfo],
        interval_s: float = 5.0,
        switches: Sequence[SwitchInfo] = (),
    ) -> None:
        super().__init__()
        self.reader = reader
        self.cursor = cursor
        self.interval_s = interval_s
        self.gpus = {k: g for g in gpus if (k := pci_key(g.pci_bus_id)) is not None}
        self.switches = {k: sw for sw in switches if (k := pci_key(sw.pci_bus_id)) is not None}
        """The backend's NVSwitches by PCI id: an SXID of one carries its id and UUID."""
        self.readable: bool | None = None
        """None before the first poll; False: the log could not be read (said once), NVML counts."""
        self.xids: dict[tuple[Pci, int], int] = {}
        self.sxids: dict[tuple[str, Pci, int, str], int] = {}
        self.last: dict[Pci, int] = {}
        """The newest XID code counted per GPU (by PCI id): the last-seen gauge the log gives (`LogXids`)."""
        self._lock = threading.Lock()
        self._polling = threading.Lock()
        """One read of the log at a time: its own thread and the sampler's (`LogXids`) share the cursor."""

    def poll(self) -> int:
        """Read what the log has now; returns how many XID/SXID lines were newly counted."""
        with self._polling:
            return self._poll()

    def _poll(self) -> int:
        if self.readable is False:
            return 0
        try:
            new = [x for rec in self.reader.records() if self.cursor.is_new(rec) and (x := parse_line(rec.message))]
        except KmsgError as err:
            self._unreadable(err)
            return 0
        self.readable = True
        with self._lock:
            for x in new:
                self._count(x)
        self.cursor.save()
        return len(new)

    def _count(self, x: XidLine) -> None:
        if x.kind == "xid":
            self.xids[(x.pci, x.code)] = self.xids.get((x.pci, x.code), 0) + 1
            self.last[x.pci] = x.code
        else:
            key = (x.device, x.pci, x.code, _severity(x.detail))
            self.sxids[key] = self.sxids.get(key, 0) + 1

    def _unreadable(self, err: KmsgError) -> None:
        """Say once, in one line, why the log is not read and what that costs; then go on without it."""
        first = self.readable is None
        self.readable = False
        self.reader.close()
        if not first:
            log.warning("%s; XIDs are no longer read from the kernel log", err)
            return
        need = f" (needs {self.reader.access})" if err.errno in (errno.EACCES, errno.EPERM, errno.ENOENT) else ""
        log.warning("cannot read the kernel log: %s%s; XIDs are counted from NVML events, SXIDs not at all", err, need)

    def last_codes(self) -> dict[Pci, int]:
        """A copy of the newest XID code counted per GPU (by PCI id)."""
        with self._lock:
            return dict(self.last)

    def snapshot(self) -> tuple[dict[tuple[Pci, int], int], dict[tuple[str, Pci, int, str], int]]:
        """Copies of the XID and SXID counts, for a scrape."""
        with self._lock:
            return dict(self.xids), dict(self.sxids)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except Exception:  # a bad record must not end counting
                log.exception("reading the kernel log failed")
            self._stop.wait(self.interval_s)

    def stop(self, timeout: float | None = None) -> None:
        super().stop(timeout)
        self.reader.close()


def _severity(detail: str) -> str:
    """The driver's word after an SXID's code: "fatal", "non-fatal", or "" when the line has none."""
    head = detail.split(",", 1)[0].strip().lower()
    return head if head in ("fatal", "non-fatal") else ""


def open_kernel_log(
    path: Path,
    cursor_path: Path | None,
    gpus: Sequence[GpuInfo],
    interval_s: float = 5.0,
    *,
    source: str = "kmsg",
    journal: JournalOptions | None = None,
    switches: Sequence[SwitchInfo] = (),
) -> KernelLog[Any]:
    """A KernelLog over /dev/kmsg at `path` (cursor at `cursor_path`; None: not kept), or over the journal.

    `source` is kmsg, journal, or auto (kmsg when it can be opened, else the journal when journalctl can
    read it); the choice is made here, once.
    """
    reader, cursor = open_reader(source, path, cursor_path, journal or JournalOptions())
    return KernelLog(reader, cursor, gpus, interval_s, switches)


class KernelLogCollector(Collector):
    """gpuhealth_kernel_xid_errors_total{err_code, err_msg, source} and the SXID and reader series."""

    def __init__(
        self,
        kernel_log: KernelLog[Any],
        nvml_counts: NvmlCounts,
        hostname: str,
        hostname_label: str = HOSTNAME,
    ) -> None:
        self.kernel_log = kernel_log
        self.nvml_counts = nvml_counts
        self.hostname = hostname
        self.host_label = hostname_label

    def collect(self) -> Iterator[Metric]:
        kl = self.kernel_log
        if kl.readable is None:
            return
        xid = CounterMetricFamily(
            family(XID),
            "XIDs per GPU and code, from the kernel log (source=kmsg or journal), or NVML events when it cannot "
            "be read.",
            labels=(*LABELS, self.host_label, "err_code", "err_msg", "source"),
        )
        xids, sxids = kl.snapshot()
        if kl.readable:
            for (pci, code), n in sorted(xids.items()):
                xid.add_metric([*self._gpu_values(pci), str(code), xid_message(code), kl.reader.name], n)
        else:
            by_uuid = {g.uuid: (k, g) for k, g in kl.gpus.items()}
            for uuid, codes in sorted(self.nvml_counts().items()):
                if uuid in by_uuid:
                    for code, n in sorted(codes.items()):
                        xid.add_metric([*self._gpu_values(by_uuid[uuid][0]), str(code), xid_message(code), "nvml"], n)
        yield xid
        yield self._sxids(sxids)
        yield GaugeMetricFamily(
            READABLE,
            "1 when the collector reads XIDs from the kernel log, 0 when it cannot (NVML events only).",
            value=1.0 if kl.readable else 0.0,
        )
        yield CounterMetricFamily(
            family(OVERRUNS),
            "Times the kernel's ring buffer overtook the reader (records lost unread).",
            value=kl.reader.overrun,
        )

    def _sxids(self, sxids: Mapping[tuple[str, Pci, int, str], int]) -> Metric:
        """The SXID counter; a switch the backend lists carries its id and UUID, another its bus id alone."""
        counter = CounterMetricFamily(
            family(SXID),
            "NVSwitch SXIDs per switch and code, from the kernel log.",
            labels=(*SXID_LABELS, self.host_label, "err_code", "severity"),
        )
        for (dev, pci, code, sev), n in sorted(sxids.items()):
            sw = self.kernel_log.switches.get(pci)
            listed = [sw.id, sw.uuid] if sw is not None else ["", ""]
            counter.add_metric([dev, *listed, pci_text(pci), self.hostname, str(code), sev], n)
        return counter

    def _gpu_values(self, pci: Pci) -> list[str]:
        """dcgm-exporter's GPU labels of the GPU at `pci`; only pci_bus_id (and the host) when none is there."""
        g = self.kernel_log.gpus.get(pci)
        if g is None:
            return ["", "", "", "", pci_text(pci), self.hostname]
        labels = gpu_labels(g.index, g.uuid, g.model_name, g.pci_bus_id, g.hostname, self.host_label)
        return [labels[k] for k in (*LABELS, self.host_label)]


class FleetKernelLogs(Collector):
    """The kernel logs of a simulated fleet's nodes (`simulated_kernel_logs`) in one exporter, as each node's
    own collector would export them: the XIDs and SXIDs under each node's Hostname; one reader gauge, 1
    while every node's log is read, and one overrun counter, the nodes' sum (a name exported twice would
    make a scraper reject the page)."""

    def __init__(self, logs: Mapping[str, KernelLog[Any]], nvml_counts: NvmlCounts, hostname_label: str) -> None:
        self.parts = [KernelLogCollector(kl, nvml_counts, host, hostname_label) for host, kl in sorted(logs.items())]

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, Metric] = {}
        for part in self.parts:
            for fam in part.collect():
                have = merged.setdefault(fam.name, fam)
                if have is fam:
                    continue
                if fam.name == READABLE:
                    have.samples[0] = min(have.samples[0], fam.samples[0], key=lambda x: x.value)
                elif fam.name == family(OVERRUNS):
                    have.samples[0] = have.samples[0]._replace(value=have.samples[0].value + fam.samples[0].value)
                else:
                    have.samples.extend(fam.samples)
        yield from merged.values()


def attach_kernel_log(
    registry: CollectorRegistry,
    sampler: Sampler,
    gpus: Sequence[GpuInfo],
    path: str,
    cursor_path: str,
    hostname_label: str = HOSTNAME,
    *,
    source: str = "kmsg",
    journal: JournalOptions | None = None,
    switches: Sequence[SwitchInfo] = (),
) -> KernelLog[Any] | None:
    """Count XIDs from the kernel log (`source`: kmsg at `path`, journal, auto) into `registry` (not started),
    and make it the source of each reading's `xid` while it can be read (`LogXids`).

    None when `path` is "": the kernel log is off.
    """
    if not path:
        return None
    cursor = Path(cursor_path) if cursor_path else None
    kl = open_kernel_log(Path(path), cursor, gpus, source=source, journal=journal, switches=switches)
    host = gpus[0].hostname if gpus else socket.gethostname()

    def nvml_counts() -> Mapping[str, Mapping[int, int]]:
        snap = sampler.latest
        return {} if snap is None else snap.xid_counts

    registry.register(KernelLogCollector(kl, nvml_counts, host, hostname_label))
    sampler.augment = (*sampler.augment, LogXids({host: kl}))  # one tuple assigned: a running sampler sees it whole
    return kl


def attach_for_backend(
    registry: CollectorRegistry,
    sampler: Sampler,
    backend: Any,
    options: KernelLogOptions,
    hostname_label: str = HOSTNAME,
    sysfs_root: Path | None = None,
) -> KernelLog[Any] | None:
    """`attach_kernel_log` for live GPUs (`collect`, and `serve` with its in-process collector); None for a
    simulated or replayed fleet, whose logs are its own (`simulated_kernel_logs`). An SXID names its switch
    as the backend lists it (dcgm), else as `sysfs_root` shows it (nvml)."""
    if backend.name in ("sim", "replay"):
        return None
    return attach_kernel_log(
        registry, sampler, backend.gpus(), options.path, options.cursor_path, hostname_label,
        source=options.source, journal=options.journal, switches=list_switches(backend, sysfs_root),
    )  # fmt: skip


class LogXids:
    """Makes the kernel log the source of each reading's `xid` (the last code seen, the gauge DCGM and
    /metrics carry), as 0073 makes it the one source of the XID counter: it reads each node's log at each
    sample (the sampler's hook, `Sampler(augment=...)`), so an XID logged during the backend's read is in
    the same sample, and one NVML's events never deliver (XID 79, 119, 120: DCGM issue 162) reaches the
    history. A GPU whose node's log cannot be read keeps the backend's gauge."""

    name = "kernel_log"

    def __init__(self, logs: Mapping[str, KernelLog[Any]]) -> None:
        self.logs = dict(logs)
        """Hostname -> its kernel log: PCI ids repeat from node to node."""

    def __call__(self, readings: Sequence[GpuReading]) -> None:
        last: dict[str, dict[Pci, int]] = {}
        for host, kl in self.logs.items():
            kl.poll()
            if kl.readable:
                last[host] = kl.last_codes()
        for r in readings:
            key = pci_key(r.info.pci_bus_id)
            if not r.lost and key is not None and r.info.hostname in last:
                r.values["xid"] = float(last[r.info.hostname].get(key, 0))


def simulated_kernel_logs(backend: object) -> dict[str, KernelLog[Any]]:
    """Each simulated node's kernel log (a backend's `kernel_logs`: hostname -> a file of /dev/kmsg's records,
    collector.backends.sim), for `LogXids`; {} for any other backend, whose kernel log is the node's own
    (`attach_kernel_log`)."""
    files: Mapping[str, Path] = getattr(backend, "kernel_logs", None) or {}
    gpus = getattr(backend, "gpus", None)
    if not files or not callable(gpus):
        return {}
    infos: list[GpuInfo] = list(gpus())
    return {
        host: KernelLog(KmsgReader(Path(path)), KmsgCursor(None, ""), [g for g in infos if g.hostname == host])
        for host, path in files.items()
    }
