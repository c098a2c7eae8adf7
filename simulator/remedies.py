"""Faults a GPU reset cures, the reset itself, and the remedied GPUs whose fault comes back.

Two injected faults need a GPU reset and nothing more; each ripens at its time into one event,
and neither is a failure (no label, the GPU keeps answering):

- `remap`: a weak HBM row remapped from correctable errors: a few SBEs, one more correctable
  remapped row, `row_remap_pending` 1 and XID 63. NVIDIA's memory error management guide: unaffected
  work goes on, new work may launch, the remap applies at the next GPU reset; the driver's recovery
  action, raised for uncorrectable errors, stays none.
- `gsp-reset`: a GSP RPC timeout (XID 119): the driver asks for a GPU reset (recovery action 1), the
  work on the GPU is lost (its utilisation drops to 0) and every probe errors until the reset.

A GPU reset (`FleetSim.reset`) does what NVML's does: the volatile ECC counters restart, a pending
remap is applied, the recovery action goes back to none; it cannot reach a GPU off the bus. A fault
that persists (wearing HBM, a failing link or fan) goes on after it. A node's reboot cures the same.

A share of the GPUs so remedied fault again (`SimConfig.refault_share`, within `refault_days`): the
same fault, drawn per GPU slot and remedy from the seed alone, so a seed gives the same refaults
whatever else happens in the fleet and in whatever order GPUs are reset.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

from simulator.config import _CODE_MODE, _MODE_CODE, DAY, RESET_CURED_MODES, XID_GSP_TIMEOUT, XID_REMAP, FaultMode

if TYPE_CHECKING:
    from simulator.fleet import FleetSim

_REMAP = _MODE_CODE[FaultMode.REMAP]
CURED_CODES = np.array([_MODE_CODE[m] for m in RESET_CURED_MODES])
"""Mode codes of the faults a reset cures: they never fail a GPU (`FleetSim._fail` leaves them here)."""
_EVENT_KEY, _REFAULT_KEY = 0xE7, 0x5EF
"""Keys of the per-GPU generators: an event's size and a remedy's refault draw (not the fleet's stream)."""
RECOVERY_GPU_RESET = 1.0
"""NVML's nvmlDeviceGpuRecoveryAction_t: 1 is NVML_GPU_RECOVERY_ACTION_GPU_RESET."""
REMAP_SBES = (2, 20)
"""SBEs (low, high) before a `remap` fault's row is remapped: a weak row, not a wearing stack."""


class Remedies:
    """Per GPU: the fault a reset would cure (open until remedied), what the driver asks, how many remedies."""

    def __init__(self, n: int) -> None:
        self.open = np.zeros(n, dtype=np.int64)
        """Mode code of the fault awaiting a remedy (0: none)."""
        self.recovery = np.zeros(n)
        """The driver's recovery action an open fault asks for (0: none)."""
        self.hung = np.zeros(n, dtype=bool)
        """The GSP stopped answering: no work runs, probes error, until a reset."""
        self.remedies = np.zeros(n, dtype=np.int64)
        """How many open faults each slot has had remedied (the refault draw's counter)."""
        self.refaults = 0
        """How many refaults have been drawn so far."""

    def ripen(self, fleet: FleetSim) -> None:
        """Each fault a reset cures whose time has come happens: its event, its XID, an open remedy."""
        due = (fleet.time >= fleet.fault_at) & np.isin(fleet.fault_mode, CURED_CODES) & ~fleet.failed & ~fleet.lost
        for i in np.flatnonzero(due):
            code = int(fleet.fault_mode[i])
            if code == _REMAP:
                lo, hi = REMAP_SBES
                sbe = int(
                    np.random.default_rng([fleet.cfg.seed, _EVENT_KEY, int(i), int(self.remedies[i])]).integers(
                        lo, hi + 1
                    )
                )
                fleet.sbe_vol[i] += sbe
                fleet.sbe_agg[i] += sbe
                fleet.remap_corr[i] += 1
                fleet.remap_pending[i] = 1.0
                xid = XID_REMAP
            else:
                self.recovery[i] = RECOVERY_GPU_RESET
                self.hung[i] = True
                xid = XID_GSP_TIMEOUT
            self.open[i] = code
            fleet._xid(np.arange(fleet.n) == i, xid)
            fleet._arm_next(int(i))  # the slot goes on to its next drawn fault, if any

    def recovery_action(self, remap_pending: np.ndarray) -> np.ndarray:
        """The driver's recovery action per GPU: a reset for a pending remap (but a `remap` fault's, from
        correctable errors alone: the driver raises it for uncorrectable ones) or an open fault's ask."""
        derived = np.where((remap_pending > 0) & (self.open != _REMAP), RECOVERY_GPU_RESET, 0.0)
        return np.maximum(derived, self.recovery)

    def reset(self, fleet: FleetSim, i: int) -> None:
        """Reset GPU `i` as NVML does; ValueError when it is off the bus (a reset cannot reach it)."""
        if fleet.lost[i]:
            raise ValueError(f"simulated GPU {i} ({fleet.gpus[i].uuid}) is off the bus: a GPU reset cannot reach it")
        for arr in (fleet.sbe_vol, fleet.dbe_vol, fleet.remap_pending):
            arr[i] = 0.0
        self.remedied(fleet, np.array([i]))

    def remedied(self, fleet: FleetSim, idx: np.ndarray) -> None:
        """GPUs `idx` were reset (or their node rebooted): their open faults close; a share comes back."""
        for i in (int(k) for k in idx if self.open[k]):
            mode = _CODE_MODE[int(self.open[i])]
            self.open[i], self.recovery[i], self.hung[i] = 0, 0.0, False
            draw = np.random.default_rng([fleet.cfg.seed, _REFAULT_KEY, i, int(self.remedies[i])])
            self.remedies[i] += 1
            again, delay = draw.random() < fleet.cfg.refault_share, draw.uniform(0.0, fleet.cfg.refault_days)
            if again:
                self.refaults += 1
                _arm_or_queue(fleet, i, mode, fleet.time + max(delay * DAY, 1.0))

    def forget(self, i: int) -> None:
        """A new GPU took slot `i`: nothing of its predecessor's is open."""
        self.open[i], self.recovery[i], self.hung[i] = 0, 0.0, False


def _arm_or_queue(fleet: FleetSim, i: int, mode: FaultMode, at: float) -> None:
    """A slot holds one fault at a time: the refault is armed now, or, behind one already armed, queued."""
    if fleet.fault_mode[i] == 0:
        fleet.fault_mode[i] = _MODE_CODE[mode]
        fleet.fault_at[i] = fleet.fault_onset[i] = at
    else:
        bisect.insort(fleet._fault_queue[i], (at, mode, 0.0), key=lambda e: e[0])
