"""Small history frames for tests: one GPU's samples at given minutes."""

from __future__ import annotations

import pandas as pd

from core import history

T0 = pd.Timestamp("2026-03-01", tz="UTC")


def rows(minutes: list[int], **metrics: list[float]) -> pd.DataFrame:
    """GPU-a on node-a (index 3, an A100), sampled `minutes` after T0, with these metric columns."""
    n = len(minutes)
    return history.validate(
        pd.DataFrame(
            {
                "timestamp": [T0 + pd.Timedelta(minutes=m) for m in minutes],
                "hostname": ["node-a"] * n,
                "gpu_uuid": ["GPU-a"] * n,
                "gpu_index": [3] * n,
                "model_name": ["NVIDIA A100-SXM4-80GB"] * n,
                **metrics,
            }
        )
    )
