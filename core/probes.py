"""The slow-GPU rule, one place for the collector's gpuhealth_probe_slow and the predictor's features.

A GPU whose GEMM TFLOP/s is more than 10 % below the median of its same-model peers
(the other GPUs of its model, itself left out) is slow: one such GPU stalls every
synchronous step of a training job (issue 7).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

SLOW_THRESHOLD = 0.10
"""More than 10 % below the same-model peers' median GEMM TFLOP/s is slow (issue 7; a
10-20 % slow GPU stalls whole synchronous training jobs)."""
MIN_PEERS = 2
"""Same-model GPUs, besides itself, a GPU needs before it can be called slow."""

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class PeerComparison:
    """One GPU's value against the median of its same-model peers."""

    value: float
    peer_median: float
    """Median of the peers' values; NaN without peers."""
    peers: int
    ratio: float | None
    """value / peer_median; None with fewer than the minimum peers or a median <= 0."""


def compare_to_peers(values: Mapping[K, float], min_peers: int = MIN_PEERS) -> dict[K, PeerComparison]:
    """Each GPU of one model (GPU -> value) against the median of the others' values."""
    out: dict[K, PeerComparison] = {}
    for gpu, v in values.items():
        peers = [x for g, x in values.items() if g != gpu]
        med = statistics.median(peers) if peers else math.nan
        ok = len(peers) >= min_peers and med > 0
        out[gpu] = PeerComparison(v, med, len(peers), v / med if ok else None)
    return out


def is_slow(ratio: float | None, threshold: float = SLOW_THRESHOLD) -> bool:
    """Whether a ratio to the peers' median is more than `threshold` below 1 (None: never)."""
    return ratio is not None and ratio < 1.0 - threshold
