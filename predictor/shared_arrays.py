"""A model's empty tree arrays made one object per dtype and shape, so that its archive holds one.

Each tree of a histogram gradient-boosting head keeps the bitsets of its categorical splits;
a model without categorical features has all of them empty, (0, 8) uint32: 1,800 of the
shipped model's 2,926 arrays. skops writes an object once per identity and, on load, builds
it once (its audit and numpy's header parse run per array), so shared they cost one array
instead of 1,800: loading the shipped model took a third less CPU (decision 0085). Nothing
reads or writes an empty array's elements, so predictions are the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor


def tree_predictors(root: Any) -> Iterator[TreePredictor]:
    """Every TreePredictor under `root` (estimators, lists, tuples, dicts, objects' attributes), each once."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, np.ndarray | str | bytes | int | float):
            continue
        seen.add(id(obj))
        if isinstance(obj, TreePredictor):
            yield obj
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple):
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())


def share_empty_arrays(root: Any) -> int:
    """Make the empty array attributes of every TreePredictor under `root` (estimators, lists, dicts)
    one object per dtype and shape, in place. Returns how many attributes now name a shared array."""
    shared: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}
    replaced = 0
    for tree in tree_predictors(root):
        for name, value in vars(tree).items():
            if isinstance(value, np.ndarray) and value.size == 0:
                setattr(tree, name, shared.setdefault((value.dtype.str, value.shape), value))
                replaced += 1
    return replaced
