"""The node's NVSwitches: who lists them (DCGM, else sysfs), so an SXID names its switch, and their series.

NVML has no call that lists NVSwitches; DCGM does (its switch entities, with their PCI ids in fields
866-869, DCGM_FI_DEV_NVSWITCH_PCIE_DOMAIN..FUNCTION). A backend that can list them has a `switches()`
method. On another (nvml), sysfs does: the nvidia-nvswitch driver binds every PCI function of vendor
NVIDIA (0x10de) and class 0x068000, "bridge, other" (its pci_device_id table in open-gpu-kernel-modules'
kernel-open/nvidia/linux_nvswitch.c: PCI_CLASS_BRIDGE_OTHER << 8, class_mask ~0), which is what lspci
shows as `Bridge [0680]: NVIDIA Corporation` on HGX A100/H100 baseboards. Without either, an SXID keeps
what its line says: the switch's kernel name and PCI id.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from prometheus_client.core import GaugeMetricFamily, Metric

from collector.backends.base import BackendError
from collector.scraped import ScrapedCollector
from core.labels import HOSTNAME
from core.nvlink import LINK_LABEL, SWITCH_FIELDS, SWITCH_HELP, SWITCH_LABEL, SWITCH_LINK_UP, SWITCH_NAME

log = logging.getLogger(__name__)

NVIDIA_VENDOR = 0x10DE
NVSWITCH_CLASS = 0x068000
"""PCI_CLASS_BRIDGE_OTHER << 8: the class the nvidia-nvswitch driver binds (exact, class_mask ~0)."""


@dataclass(frozen=True)
class SwitchInfo:
    """One NVSwitch as a backend knows it."""

    id: str
    """The backend's id of the switch (DCGM's switch entity id; on sysfs its place in PCI order): the
    `nvswitch` label."""
    pci_bus_id: str
    """As NVML spells a PCI id (00000000:05:00.0); the SXID line's PCI id is matched against it."""
    uuid: str = ""


@dataclass(frozen=True)
class SwitchReading:
    """One NVSwitch at one read: its watched values by metric name (core.nvlink.SWITCH_FIELDS), and its
    ports' states (port -> up)."""

    info: SwitchInfo
    values: dict[str, float]
    links: dict[int, bool]


@runtime_checkable
class SwitchLister(Protocol):
    """A backend that lists the node's NVSwitches."""

    def switches(self) -> list[SwitchInfo]: ...


def _hex(path: Path) -> int | None:
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError):
        return None


def _nvml_spelling(address: str) -> str:
    """sysfs's 0000:05:00.0 as NVML spells it, 00000000:05:00.0."""
    domain, _, rest = address.partition(":")
    return f"{int(domain, 16):08X}:{rest.upper()}" if rest else address


class SysfsSwitches:
    """The NVSwitches under `root`/bus/pci/devices (root is /sys on a node), in PCI address order.

    The id is the switch's place in that order (0, 1, ...): the order the nvidia-nvswitch driver probes
    them in and so, on the usual single-segment baseboard, the N of its `nvidia-nvswitchN` kernel name.
    sysfs has no UUID of a switch.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def switches(self) -> list[SwitchInfo]:
        """The NVSwitches sysfs shows; [] where it shows none (or there is no such folder)."""
        devices = self.root / "bus" / "pci" / "devices"
        try:
            entries = sorted(devices.iterdir(), key=lambda p: p.name)
        except OSError as err:
            log.debug("no PCI devices under %s: %s", devices, err)
            return []
        found = [e.name for e in entries if _hex(e / "vendor") == NVIDIA_VENDOR and _hex(e / "class") == NVSWITCH_CLASS]
        return [SwitchInfo(str(i), _nvml_spelling(name)) for i, name in enumerate(found)]


def list_switches(backend: object, sysfs_root: Path | None = None) -> list[SwitchInfo]:
    """The backend's NVSwitches, else those sysfs shows under `sysfs_root`; [] when neither can list them
    or listing fails (said at debug: no data)."""
    if isinstance(backend, SwitchLister):
        try:
            return list(backend.switches())
        except BackendError as err:
            log.debug("listing NVSwitches failed: %s", err)
            return []
    return [] if sysfs_root is None else SysfsSwitches(sysfs_root).switches()


class NvswitchCollector(ScrapedCollector):
    """Each NVSwitch's DCGM values and port states (the dcgm backend's `read_switches`)."""

    name = SWITCH_NAME
    what = "NVSwitches"

    def __init__(self, read: Callable[[], Sequence[SwitchReading]], hostname: str, host_label: str = HOSTNAME):
        super().__init__()
        self._read = read
        self._host = {host_label: hostname} if hostname else {}

    def read(self) -> list[Metric] | None:
        readings = list(self._read())
        if not readings:
            return None
        fams = {n: GaugeMetricFamily(n, SWITCH_HELP[n]) for n in SWITCH_FIELDS}
        up = GaugeMetricFamily(SWITCH_LINK_UP, "1 if the NVSwitch port's link is up, 0 if it is down.")
        for r in readings:
            labels = {SWITCH_LABEL: r.info.id, **self._host}
            for name, value in r.values.items():
                fams[name].add_sample(name, labels, value)
            for link, is_up in sorted(r.links.items()):
                up.add_sample(SWITCH_LINK_UP, {**labels, LINK_LABEL: str(link)}, 1.0 if is_up else 0.0)
        return [f for f in (*fams.values(), up) if f.samples]


def switch_reader(backend: object) -> Callable[[], Sequence[SwitchReading]] | None:
    """The backend's NVSwitch reader (the dcgm backend's `read_switches`); None for any other."""
    read = getattr(backend, "read_switches", None)
    return read if callable(read) else None
