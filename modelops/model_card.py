"""A model's card: what it was trained on, how it scored, and promote's comparison, as plain JSON.

`gpuhealth train --db` writes a card next to each stored model; `gpuhealth model promote`
adds its comparison to it; `GET /v1/model` answers with it. A model that comes from a file
(the shipped one, or `serve --model`) has no stored card: `card_from_meta` makes one from
the metadata every model carries. Keys an older card carries that no longer mean anything (the
fleet verdict's `remap_hold` and `remap_hold_history`, removed: docs/decisions/0082) stay stored as they
were and are never read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

CARD_FORMAT = 1
"""Version of the card's layout (a later layout can still read older cards)."""


def json_safe(o: Any) -> Any:
    """`o` as plain JSON: NaN and infinities as null (JSON has neither), numpy and pandas values as Python's."""
    if isinstance(o, Mapping):
        return {str(k): json_safe(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [json_safe(v) for v in o]
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, pd.Timestamp | datetime):
        return o.isoformat()
    if isinstance(o, pd.Timedelta):
        return str(o)
    return o


def trained_on(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What a model learned from, out of its metadata: the sets (name, weight, GPUs, span, failures) and totals."""
    sets = meta.get("training_sets")
    if not sets:  # a model trained before training sets existed: one history
        window = meta.get("training_window")
        sets = [{"name": "history", "weight": 1.0, "gpus": meta.get("gpus"), "span": window,
                 "failures": meta.get("failures", {})}]  # fmt: skip
    return json_safe(
        {
            "sets": sets,
            "window": meta.get("training_window"),
            "gpus": meta.get("gpus"),
            "rows": meta.get("rows"),
            "failures": meta.get("failures", {}),
            "model_names": meta.get("model_names", []),
        }
    )


def card_from_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The card of a model without a stored one (a file): what its metadata says."""
    return json_safe(
        {
            "format": CARD_FORMAT,
            "trained_on": trained_on(meta),
            "holdout": None,
            "validation": meta.get("validation", {}),
            "promotion": None,
            "meta": meta,
        }
    )


def describe(
    card: Mapping[str, Any],
    *,
    source: str,
    version: str | None,
    created_at: datetime | None = None,
    activated_at: datetime | None = None,
    loaded_at: datetime | None = None,
    pending_version: str | None = None,
    load_error: str | None = None,
) -> dict[str, Any]:
    """What `GET /v1/model` answers: the card's parts and where the model came from."""
    meta = card.get("meta") or {}
    return {
        "version": version,
        "source": source,
        "created_at": created_at,
        "activated_at": activated_at,
        "loaded_at": loaded_at,
        "pending_version": pending_version,
        "load_error": load_error,
        "trained_by": card.get("trained_by"),
        "added_from": card.get("source"),
        "trained_on": card.get("trained_on") or trained_on(meta),
        "holdout": card.get("holdout"),
        "validation": json_safe(card.get("validation") or meta.get("validation") or {}),
        "promotion": card.get("promotion"),
        "sklearn_version": meta.get("sklearn_version"),
        "data_hash": meta.get("data_hash"),
    }
