"""A flagged GPU's reasons in words: its what-if drops (`RiskModel.explain`) turned into the sentences
its score carries, each with the GPU's value and the fleet's usual one."""

from __future__ import annotations

import numpy as np
import pandas as pd

from predictor.features import feature_label


def _fmt(v: float, unit: str) -> str:
    if v != v:
        return "n/a"
    if unit == "" and 0 < abs(v) <= 1 and v != int(v):
        return f"{v:.2f}"
    if abs(v) >= 100:
        return f"{v:,.0f}{unit}"
    return f"{v:.1f}{unit}" if v != int(v) else f"{int(v)}{unit}"


WEEK_OF = {"sbe_rate_1d": "sbe_rate_7d", "replay_rate_1d": "replay_rate_7d"}
"""A daily rate shown against its 7-day average."""


def reasons_in_words(
    names: list[str], mine: np.ndarray, matrix: np.ndarray, features: pd.DataFrame, usual: pd.DataFrame, top: int
) -> dict[int, list[str]]:
    """The reasons of the rows `mine` from their what-if drops (`matrix`, one row each, a column per name):
    the `top` biggest drops over 0.01, else the biggest one. Values are read as arrays, not rows."""
    order = np.argsort(-matrix, axis=1, kind="quicksort")
    value = {n: features[n].to_numpy() for n in names}
    fleet = {n: usual[n].to_numpy() for n in names}
    week = {w: features[w].to_numpy() for w in WEEK_OF.values() if w in features.columns}
    out: dict[int, list[str]] = {}
    for j, pos in enumerate(mine.tolist()):
        ranked = order[j]
        picked = [names[k] for k in ranked[:top] if matrix[j, k] > 0.01] or [names[ranked[0]]]
        out[pos] = [describe(n, value[n][pos], fleet[n][pos], _week(week, n, pos)) for n in picked]
    return out


def _week(week: dict[str, np.ndarray], name: str, pos: int) -> float:
    """The 7-day average `name` is shown against at row `pos` (0 when it has none)."""
    w = WEEK_OF.get(name)
    return 0.0 if w is None or w not in week else week[w][pos]


def describe(name: str, value: float, usual: float, week: float = 0) -> str:
    """One reason, e.g. "SBE rate 340/day, 12x its 7-day average (fleet usual 0/day)"."""
    spec = feature_label(name)
    text = f"{spec.label} {_fmt(float(value), spec.unit)}"
    if name in WEEK_OF and week > 0:
        text += f", {value / week:.1f}x its 7-day average"
    return f"{text} (fleet usual {_fmt(float(usual), spec.unit)})"
