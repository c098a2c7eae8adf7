"""InfiniBand and RoCE ports from sysfs, and the GPUs each port serves.

Reads `<root>/class/infiniband/<device>/ports/<port>/` as the kernel documents it
(Documentation/ABI/stable/sysfs-class-infiniband): `state` ("4: ACTIVE"), `phys_state`
("5: LinkUp"), `rate` ("400 Gb/sec (4X NDR)"), the IB port counters in `counters/` and the
driver's RDMA counters in `hw_counters/` (mlx5 RoCE). Counters are exported raw: a driver
reload sets them back to 0 and Prometheus's rate()/increase() treat that as a reset.

Names are node_exporter's infiniband collector's suffixes under our own prefix,
`gpuhealth_infiniband_*` (node_infiniband_link_downed_total becomes
gpuhealth_infiniband_link_downed_total): a node running both exporters would otherwise have
each port twice under one name, and every sum over the fabric would double. The table is
in `core.infiniband`, not in `core.catalog`, because the catalogue is per GPU (each field is
read from a GPU backend and becomes a history column); a port is not a GPU. Alerts and
dashboards take the names from there too.

Each port is tied to the GPUs that sit under the same PCIe switch (the resolved sysfs device
paths share more than their root port) or, failing that, on the same NUMA node:
`gpuhealth_infiniband_port_gpu_info{device,port,gpu,UUID,affinity}`.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from collector.backends.base import GpuInfo, GpuReading
from collector.scraped import ScrapedCollector
from core.infiniband import COUNTERS, HW_COUNTERS, NAME, PREFIX, rail_name
from core.labels import HOSTNAME

log = logging.getLogger(__name__)

RATE = re.compile(r"\s*([\d.]+)\s*Gb/sec")
"""`rate`: "400 Gb/sec (4X NDR)"; exported in bytes per second as node_exporter does."""
ID = re.compile(r"\s*(\d+)\s*:")
"""`state` and `phys_state`: "4: ACTIVE", "5: LinkUp"; the number is exported."""
BDF = re.compile(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")
"""A PCI address; NVML writes an 8-digit domain (00000000:41:00.0), sysfs a 4-digit one."""


@dataclass(frozen=True)
class Port:
    """One port of an RDMA device, as far as its files could be read."""

    device: str
    port: str
    state_id: float | None = None
    phys_state_id: float | None = None
    rate_bytes_per_second: float | None = None
    counters: Mapping[str, float] = field(default_factory=dict)
    """Suffix (node_exporter's name) -> raw counter value."""
    pci_path: str | None = None
    """The resolved sysfs path of the device's PCI function (/sys/devices/pci0000:00/...)."""
    numa_node: int | None = None


@dataclass(frozen=True)
class Tie:
    """A port and a GPU it serves: by a shared PCIe switch, or else a shared NUMA node."""

    device: str
    port: str
    gpu: GpuInfo
    affinity: str


def _read(path: Path) -> str | None:
    """A sysfs file's text; None when it is missing or unreadable (fewer samples, never an error)."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError as err:
        log.debug("%s: not read: %s", path, err)
        return None


def _number(path: Path, pattern: re.Pattern[str] | None = None) -> float | None:
    text = _read(path)
    if text is None:
        return None
    if pattern is None:
        try:
            return float(int(text))
        except ValueError:
            return None
    m = pattern.match(text)
    return float(m[1]) if m else None


def _counters(directory: Path, table: Mapping[str, tuple[str, str]]) -> dict[str, float]:
    out = {}
    for name, (suffix, _help) in table.items():
        value = _number(directory / name)
        if value is not None:
            out[suffix] = value
    return out


def _pci(device_dir: Path) -> tuple[str | None, int | None]:
    link = device_dir / "device"
    if not link.exists():
        return None, None
    numa = _number(link / "numa_node")
    return os.path.realpath(link), (int(numa) if numa is not None and numa >= 0 else None)


def read_ports(root: Path) -> list[Port]:
    """Every port under `<root>/class/infiniband`; [] without it. Raises OSError when it cannot be listed."""
    base = root / "class" / "infiniband"
    if not base.is_dir():
        return []
    ports = []
    for dev in sorted(base.iterdir(), key=lambda p: p.name):
        pci_path, numa = _pci(dev)
        try:
            port_dirs = sorted((dev / "ports").iterdir(), key=lambda p: p.name)
        except OSError as err:
            log.debug("%s: no ports read: %s", dev, err)
            continue
        for pd in port_dirs:
            rate = _number(pd / "rate", RATE)
            ports.append(
                Port(
                    device=dev.name,
                    port=pd.name,
                    state_id=_number(pd / "state", ID),
                    phys_state_id=_number(pd / "phys_state", ID),
                    rate_bytes_per_second=None if rate is None else rate * 1e9 / 8,
                    counters={**_counters(pd / "counters", COUNTERS), **_counters(pd / "hw_counters", HW_COUNTERS)},
                    pci_path=pci_path,
                    numa_node=numa,
                )
            )
    return ports


def sysfs_bdf(pci_bus_id: str) -> str | None:
    """NVML's bus id (00000000:41:00.0) as sysfs names the device (0000:41:00.0); None if it is none."""
    m = BDF.fullmatch(pci_bus_id.strip())
    if m is None:
        return None
    domain = int(m[1] or "0", 16)
    return f"{domain:04x}:{m[2]}:{m[3]}.{m[4]}".lower()


def _pci_chain(path: str) -> list[str]:
    """The host bridge (pci0000:00), then the PCI functions from the root port down to the device."""
    parts = path.split("/")
    start = next((i for i, part in enumerate(parts) if part.startswith("pci")), len(parts))
    return parts[start:]


def shares_switch(a: str, b: str) -> bool:
    """Whether two devices sit under one PCIe switch: their paths share more than the root port."""
    ca, cb = _pci_chain(a), _pci_chain(b)
    common = 0
    for x, y in zip(ca, cb, strict=False):
        if x != y:
            break
        common += 1
    # host bridge + root port + the switch's upstream port
    return ca != cb and common >= 3


def ties(root: Path, ports: Sequence[Port], gpus: Sequence[GpuInfo]) -> list[Tie]:
    """Each port and the GPUs it serves: those under its PCIe switch, else those on its NUMA node."""
    where: dict[str, tuple[str, int | None]] = {}
    for g in gpus:
        bdf = sysfs_bdf(g.pci_bus_id)
        if bdf is None:
            continue
        dev = root / "bus" / "pci" / "devices" / bdf
        if dev.exists():
            numa = _number(dev / "numa_node")
            where[g.uuid] = (os.path.realpath(dev), int(numa) if numa is not None and numa >= 0 else None)
    out = []
    for p in ports:
        if p.pci_path is None:
            continue
        for g in gpus:
            if g.uuid not in where:
                continue
            path, numa = where[g.uuid]
            if shares_switch(p.pci_path, path):
                out.append(Tie(p.device, p.port, g, "pcie_switch"))
            elif numa is not None and numa == p.numa_node:
                out.append(Tie(p.device, p.port, g, "numa"))
    return out


class InfinibandCollector(ScrapedCollector):
    """gpuhealth_infiniband_* series, read from sysfs at each scrape as node_exporter does."""

    name = NAME

    def __init__(
        self,
        root: Path,
        gpus: Callable[[], Sequence[GpuInfo]],
        hostname_label: str = HOSTNAME,
    ) -> None:
        super().__init__()
        self.root = Path(root)
        self.what = f"InfiniBand ports under {self.root}"
        self._gpus = gpus
        self._host_label = hostname_label
        self._absent_logged = False

    def read(self) -> list[Metric] | None:
        ports = read_ports(self.root)
        gpus = list(self._gpus())
        tied = ties(self.root, ports, gpus)
        if not ports:
            if not self._absent_logged:
                log.debug("no InfiniBand/RoCE ports under %s: no infiniband series", self.root)
                self._absent_logged = True
            return None
        host = {self._host_label: gpus[0].hostname} if gpus and gpus[0].hostname else {}
        return [*_port_families(ports, host), _tie_family(tied, host)]


def _port_families(ports: Sequence[Port], host: Mapping[str, str]) -> Iterator[Metric]:
    gauges = {
        "state_id": "State of the port (0: no change, 1: down, 2: init, 3: armed, 4: active, 5: act defer).",
        "physical_state_id": "Physical state of the port (1: sleep, 2: polling, 3: disabled, 4: training, "
        "5: link up, 6: link error recovery, 7: phy test).",
        "rate_bytes_per_second": "Signalling rate of the port in bytes per second.",
    }
    value_of: dict[str, Callable[[Port], float | None]] = {
        "state_id": lambda p: p.state_id,
        "physical_state_id": lambda p: p.phys_state_id,
        "rate_bytes_per_second": lambda p: p.rate_bytes_per_second,
    }
    for suffix, text in gauges.items():
        fam = GaugeMetricFamily(PREFIX + suffix, text)
        for p in ports:
            v = value_of[suffix](p)
            if v is not None:
                fam.add_sample(PREFIX + suffix, {"device": p.device, "port": p.port, **host}, v)
        if fam.samples:
            yield fam
    for suffix, text in [*COUNTERS.values(), *HW_COUNTERS.values()]:
        counter = CounterMetricFamily(PREFIX + suffix, text)
        for p in ports:
            if suffix in p.counters:
                counter.add_sample(PREFIX + suffix, {"device": p.device, "port": p.port, **host}, p.counters[suffix])
        if counter.samples:
            yield counter


def _tie_family(tied: Sequence[Tie], host: Mapping[str, str]) -> Metric:
    fam = GaugeMetricFamily(
        PREFIX + "port_gpu_info",
        "1 for each GPU a port serves; affinity: pcie_switch (one PCIe switch) or numa (one NUMA node).",
    )
    for t in tied:
        labels = {"device": t.device, "port": t.port, "gpu": str(t.gpu.index), "UUID": t.gpu.uuid}
        fam.add_sample(PREFIX + "port_gpu_info", {**labels, "affinity": t.affinity, **host}, 1.0)
    return fam


class RailCounts:
    """Adds each GPU's `ib_rail_link_downed` to a sample's readings: the link downs of the ports tied to
    it (`ties`), summed, and names those ports (`GpuReading.rail`, "mlx5_3/1"), which the store keeps with
    the GPU for the reasons. A GPU with no tied port, or a port without the counter, gets no value; a node
    without RDMA ports gets none at all (the sampler's hook, `Sampler(augment=...)`)."""

    name = "infiniband_rails"
    field = "ib_rail_link_downed"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def __call__(self, readings: Sequence[GpuReading]) -> None:
        live = [r for r in readings if not r.lost]
        ports = read_ports(self.root) if live else []
        if not ports:
            return
        downs = {(p.device, p.port): p.counters.get("link_downed_total") for p in ports}
        sums: dict[str, float] = {}
        tied: dict[str, list[tuple[str, str]]] = {}
        for t in ties(self.root, ports, [r.info for r in live]):
            tied.setdefault(t.gpu.uuid, []).append((t.device, t.port))
            value = downs[(t.device, t.port)]
            if value is not None:
                sums[t.gpu.uuid] = sums.get(t.gpu.uuid, 0.0) + value
        for r in live:
            if r.info.uuid in sums:
                r.values[self.field] = sums[r.info.uuid]
            if r.info.uuid in tied:
                r.rail = rail_name(tied[r.info.uuid])
