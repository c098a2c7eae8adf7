"""`gpuhealth serve` wired up: the service's loops (`service.assemble`) and the API over them.

This module (with the rest of the command line) is the only place that joins the
collector and the API.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from fastapi import FastAPI

from api.app import ApiConfig, create_app
from service.assemble import Loops


@dataclass
class Service:
    """The loops and the API over them (tests drive the loops directly)."""

    app: FastAPI
    loops: Loops


def build_service(loops: Loops, api: ApiConfig | None = None) -> Service:
    """The API over assembled (not started) loops; it starts and stops them with the app.

    `api` gives the API's own options (the token, which reads are open, the request limits); the
    host label, the scorer, the buffer, the actuator, the health and the series come from `loops`."""
    cfg = replace(
        api or ApiConfig(),
        host_label=loops.config.hostname_label,
        scorer=loops.scorer,
        buffer=loops.buffer,
        actuator=loops.actuator,
        collector_health=loops.health,
        extra_metrics=loops.extra_metrics,
        on_start=[loops.start],
        on_stop=[loops.stop],
    )
    return Service(create_app(loops.store, cfg), loops)
