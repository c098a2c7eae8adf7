"""The driver's kernel log of a simulated fleet, and an XID only it has (issue 58).

The driver writes every XID to the kernel log (`NVRM: Xid (PCI:0000:41:00): 79, pid=…, name=…, …`);
NVML's event stream, which the nvml backend and DCGM read, does not deliver all of them: "the DCGM
version can't report XID 79, 119, and 120 due to limitations in the NVML library" (a DCGM maintainer,
NVIDIA/DCGM issue 162, 2024). So a collector that reads only NVML's events misses them.

- Every XID the fleet raises (`FleetSim._xid`, which NVML's events and the `xid` gauge also carry) is
  logged here too, as the driver does.
- `log-xid`: at the fault's time the GPU logs XID 120 (GSP Error) here and nowhere else: no NVML event,
  no change of the `xid` gauge, nothing else on the GPU (no failure label, it keeps answering). Only a
  collector reading the kernel log counts it; NVIDIA's catalogue then says reset the GPU (the rules
  drain it). It fires once and does not come back.

The log keeps records only while something reads them (`keep`, set by the sim backend when it writes
a kernel log file), so a batch simulation does not grow a list it never reads. Nothing is drawn from
the fleet's generator: a seed's fleet is the same with or without this fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.config import HOUR, XID_GSP_ERROR, FaultMode, FaultSpec

if TYPE_CHECKING:
    from simulator.fleet import FleetSim

LOG_MODES = (FaultMode.LOG_XID,)
"""Faults seen in the kernel log only, injected here rather than into a GPU's fault slot."""
LOG_ONLY_XID = XID_GSP_ERROR
"""XID 120, GSP Error: one of the codes NVML's event stream does not deliver (DCGM issue 162)."""
DETAILS = {
    48: "DBE (double bit error) ECC error has been detected on GPU in the framebuffer.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap a row.",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate.",
    94: "Contained: SM (0x1). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL).",
    120: "GSP task timeout @ pc:0x1a2b3c4, task: 1",
}
"""The text after `name=` in the simulated lines, after the driver's for each code (the parsers read
only the code: collector.xid_log)."""
SIM_PID = 100_000
"""The simulated process blamed for an XID: SIM_PID + the GPU's index (as the sim backend's)."""


def driver_line(pci_bus_id: str, index: int, code: int) -> str:
    """The driver's kernel log line for XID `code` on the GPU at NVML's `pci_bus_id` (00000000:41:00.0):
    the log names domain:bus:device, without the function."""
    domain, bus, rest = pci_bus_id.split(":")
    return (
        f"NVRM: Xid (PCI:{int(domain, 16):04x}:{bus.lower()}:{rest.split('.')[0].lower()}): {code}, "
        f"pid={SIM_PID + index}, name=python3, {DETAILS.get(code, 'Xid error')}"
    )


class KernelLog:
    """Per GPU, when its log-only XID fires; the XIDs logged since the last `drain` (gpu, code, time)."""

    def __init__(self, n: int) -> None:
        self.at = np.full(n, np.inf)
        self.keep = False
        """Keep records for a reader (the sim backend's kernel log file); off: nothing is kept."""
        self._records: list[tuple[int, int, float]] = []

    def inject(self, fleet: FleetSim, fault: FaultSpec) -> None:
        """GPU `fault.gpu` logs its log-only XID `fault.hours` from now."""
        self.at[fault.gpu] = min(self.at[fault.gpu], fleet.time + fault.hours * HOUR)

    def logged(self, gpus: np.ndarray, code: int, t: float) -> None:
        """The driver logs XID `code` on `gpus` (every XID the fleet raises)."""
        if self.keep:
            self._records.extend((int(i), code, t) for i in gpus)

    def ripen(self, fleet: FleetSim) -> None:
        """A GPU whose log-only XID is due logs it (unless it is off the bus), once."""
        due = (fleet.time >= self.at) & ~fleet.lost
        self.logged(np.flatnonzero(due), LOG_ONLY_XID, fleet.time)
        self.at[due] = np.inf

    def drain(self) -> list[tuple[int, int, float]]:
        """The XIDs logged since the last call, oldest first."""
        out, self._records = self._records, []
        return out
