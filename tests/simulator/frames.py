"""A history frame from stepping a live FleetSim (the sim backend's view), for tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from core import history
from simulator.fleet import FleetSim


def stepped_history(fleet: FleetSim, steps: int, step_s: float) -> pd.DataFrame:
    """Step the fleet `steps` times and collect every GPU's values as a validated history."""
    parts = []
    for _ in range(steps):
        fleet.step(step_s)
        parts.append(
            pd.DataFrame(
                {
                    "timestamp": pd.to_datetime(np.full(fleet.n, fleet.time), unit="s", utc=True),
                    "hostname": [g.node for g in fleet.gpus],
                    "gpu_uuid": [g.uuid for g in fleet.gpus],
                    "gpu_index": [g.index for g in fleet.gpus],
                    "model_name": [g.model.name for g in fleet.gpus],
                    **fleet.values(),
                }
            )
        )
    return history.validate(pd.concat(parts, ignore_index=True))
