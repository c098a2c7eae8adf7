"""The NVSwitches a backend lists, so an SXID of the kernel log names its switch as the backend does.

NVML has no call that lists NVSwitches; DCGM does (its switch entities, with their PCI ids in fields
866-869, DCGM_FI_DEV_NVSWITCH_PCIE_DOMAIN..FUNCTION). A backend that can list them has a `switches()`
method; for one that cannot, an SXID keeps what its line says: the switch's kernel name and PCI id.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from collector.backends.base import BackendError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SwitchInfo:
    """One NVSwitch as a backend knows it."""

    id: str
    """The backend's id of the switch (DCGM's switch entity id): the `nvswitch` label."""
    pci_bus_id: str
    """As NVML spells a PCI id (00000000:05:00.0); the SXID line's PCI id is matched against it."""
    uuid: str = ""


@runtime_checkable
class SwitchLister(Protocol):
    """A backend that lists the node's NVSwitches."""

    def switches(self) -> list[SwitchInfo]: ...


def list_switches(backend: object) -> list[SwitchInfo]:
    """The backend's NVSwitches; [] when it cannot list them or listing fails (said at debug: no data)."""
    if not isinstance(backend, SwitchLister):
        return []
    try:
        return list(backend.switches())
    except BackendError as err:
        log.debug("listing NVSwitches failed: %s", err)
        return []
