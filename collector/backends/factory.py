"""Pick and open a backend by name; `auto` prefers DCGM, then NVML."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from collector.backends.base import Backend, BackendError, BackendUnavailable
from core.catalog import Field
from simulator.fleet import FaultSpec

log = logging.getLogger(__name__)

BACKENDS = ("auto", "nvml", "dcgm", "sim", "replay")
NO_GPU_LIBRARY = "no GPU library found; use --backend sim to try a simulated fleet"


def open_backend(
    name: str,
    *,
    hostname: str,
    fields: Sequence[Field],
    interval_s: float,
    sim_nodes: int = 1,
    sim_gpus: int = 8,
    sim_seed: int = 0,
    sim_model: str | None = None,
    sim_speed: float = 1.0,
    sim_faults: Sequence[FaultSpec] = (),
    sim_start: float | None = None,
    sim_spare_nodes: int = 0,
    history: Path | None = None,
    replay_speed: float = 1.0,
    replay_loop: bool = True,
) -> Backend:
    """Open the named backend or raise BackendError with a one-line reason."""
    if name == "auto":
        reasons = []
        for candidate in ("dcgm", "nvml"):
            try:
                return open_backend(candidate, hostname=hostname, fields=fields, interval_s=interval_s)
            except BackendUnavailable as err:
                log.debug("backend %s unavailable: %s", candidate, err)
                reasons.append(f"{candidate}: {err}")
        log.info("auto backend: %s", "; ".join(reasons))
        raise BackendUnavailable(NO_GPU_LIBRARY)
    if name == "nvml":
        from collector.backends.nvml import NvmlBackend

        return NvmlBackend(hostname=hostname)
    if name == "dcgm":
        from collector.backends.dcgm import DcgmBackend

        return DcgmBackend(hostname=hostname, fields=fields, interval_s=interval_s)
    if name == "sim":
        from collector.backends.sim import SimBackend
        from simulator.models import DEFAULT_MODEL

        return SimBackend(
            nodes=sim_nodes,
            gpus_per_node=sim_gpus,
            seed=sim_seed,
            step_s=interval_s * sim_speed,
            model=sim_model or DEFAULT_MODEL,
            faults=sim_faults,
            start=sim_start,
            spare_nodes=sim_spare_nodes,
        )
    if name == "replay":
        from collector.backends.replay import ReplayBackend
        from core.history import HistoryError

        if history is None:
            raise BackendError("the replay backend needs a history file (--history)")
        try:
            return ReplayBackend.from_file(history, speed=replay_speed, loop=replay_loop)
        except HistoryError as err:
            raise BackendError(str(err)) from err
    raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
