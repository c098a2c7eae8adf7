"""Remedies the node agent carries out on its own GPUs; today: a GPU reset, refused unless it is safe.

A reset is refused unless it was allowed (`gpuhealth collect --allow-reset`), the GPU is on the bus,
the driver shows no compute or graphics process on it, and nvidia-smi's NVLink rule lets this GPU be
reset by itself. That rule, from nvidia-smi(1) under `-r, --gpu-reset`:

- a GPU without NVLink, or an Ampere-or-newer GPU with direct NVLink: each GPU can be reset by itself;
- NVSwitch systems: Ampere needs Fabric Manager running for that, Hopper and later do not;
- otherwise (pre-Ampere with NVLink; Ampere NVSwitch without Fabric Manager) every NVLink peer must be
  reset in the same command, and no compute application may run on any other GPU of the system.

This agent resets one GPU at a time, so where the rule asks for the peers too it refuses. It cannot
tell whether Fabric Manager runs, so an Ampere NVSwitch GPU is refused as well (docs/decisions/).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from collector.backends.base import BackendError, GpuInfo, GpuLostError, ResetFacts, Resettable
from collector.backends.nvml import NvmlBackend
from collector.backends.nvml_reset import NvidiaSmi, NvmlReset

log = logging.getLogger(__name__)

ResetResult = Literal["done", "refused", "failed"]

NOT_ALLOWED = "GPU reset is off: start gpuhealth collect with --allow-reset (GPUHEALTH_ALLOW_RESET=true)"


@dataclass(frozen=True)
class ResetOutcome:
    """What one reset request came to: done, refused (nothing was touched) or failed (it ran, and did not work)."""

    gpu: str
    """The GPU as asked for (UUID or index)."""
    result: ResetResult
    reason: str
    """Why it was refused or failed; on success, what the tool said."""
    duration_s: float
    """From the request to its outcome, the checks included."""
    gpu_uuid: str = ""
    gpu_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The outcome as the service will receive it."""
        return asdict(self)


def individual_reset_blocker(facts: ResetFacts) -> str | None:
    """Why nvidia-smi's NVLink rule does not let this GPU be reset by itself; None when it does."""
    if not facts.nvlink:
        return None
    if facts.generation == "unknown":
        return "the GPU's architecture is unknown, so whether its NVLink peers must be reset with it is too"
    if facts.generation == "pre-ampere":
        return "a GPU before Ampere with NVLink: nvidia-smi resets it only together with all its NVLink peers"
    if facts.nvswitch and facts.generation == "ampere":
        return (
            "an Ampere GPU on NVSwitches: it can be reset alone only while Fabric Manager runs, which NVML does"
            " not tell; otherwise all its NVLink peers must be reset with it"
        )
    return None


class Resetter:
    """Resets one GPU of this node at a time, when allowed and safe; every request ends in a ResetOutcome."""

    def __init__(self, backend: Resettable | None, *, allow: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.allow = allow
        self._clock = clock
        self._lock = threading.Lock()

    def reset(self, gpu: str | int) -> ResetOutcome:
        """Reset the GPU named by UUID or index, or say why not; never raises for the GPU's trouble."""
        start = self._clock()
        with self._lock:
            info, result, reason = self._attempt(gpu)
        outcome = ResetOutcome(
            gpu=str(gpu), result=result, reason=reason, duration_s=round(self._clock() - start, 3),
            gpu_uuid=info.uuid if info else "", gpu_index=info.index if info else None,
        )  # fmt: skip
        level = logging.WARNING if result == "failed" else logging.INFO
        log.log(level, "GPU reset of %s: %s (%s) in %.1fs", gpu, result, reason, outcome.duration_s)
        return outcome

    def _attempt(self, gpu: str | int) -> tuple[GpuInfo | None, ResetResult, str]:
        if not self.allow:
            return None, "refused", NOT_ALLOWED
        if self.backend is None:
            return None, "refused", "this backend cannot reset GPUs (nvml and sim can)"
        info = next((g for g in self.backend.gpus() if str(gpu) in (g.uuid, str(g.index))), None)
        if info is None:
            return None, "refused", f"no GPU {gpu} on this node"
        why = self._unsafe(info)
        if why is not None:
            return info, "refused", why
        try:
            said = self.backend.reset_gpu(info)
        except GpuLostError as err:
            return info, "failed", f"the GPU is lost: {err}"
        except BackendError as err:
            return info, "failed", str(err)
        return info, "done", said or "reset done"

    def _unsafe(self, info: GpuInfo) -> str | None:
        """Why resetting `info` now is not safe; None when it is."""
        assert self.backend is not None
        try:
            facts = self.backend.reset_facts(info)
        except GpuLostError as err:
            return f"the GPU has fallen off the bus, a reset cannot reach it (the node needs a reboot): {err}"
        except BackendError as err:
            return f"cannot tell whether the GPU is idle: {err}"
        if facts.processes:
            pids = ", ".join(str(p) for p in facts.processes[:5])
            return f"{len(facts.processes)} process(es) on the GPU (pid {pids})"
        return individual_reset_blocker(facts)


def resettable(backend: object, smi: NvidiaSmi | None = None) -> Resettable | None:
    """Reset access to `backend`'s GPUs: nvidia-smi for NVML, the simulator's own; None for the others."""
    if isinstance(backend, NvmlBackend):
        return NvmlReset(backend, smi or NvidiaSmi())
    if isinstance(backend, Resettable):
        return backend
    return None
