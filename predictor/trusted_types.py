"""The types a model file may hold beyond skops' own safe defaults, by full name.

skops rebuilds every object in a file by its type name, and functions by their name
too; a type it does not trust by default must be named on load. A gpuhealth model
needs exactly the types below, and `RiskModel.load` refuses a file that holds any
other. They are generated from the shipped model: after `make model`, print what it
needs with

    python -m predictor.trusted_types predictor/models/default.skops

and paste the list below if it changed (a test compares them). Each new entry widens
what a model file can make Python do: add classes the model truly holds, never a
function (numpy functions chained in FunctionTransformers run arbitrary code).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

# A constant, not a data file: the list is a property of the code that builds a model
# (`make_head`, `train`), it is read before anything is loaded, and a change to it is a
# security decision that should show up in review as a code change.
TRUSTED_TYPES: tuple[str, ...] = (
    "predictor.model.ColumnSelector",
    "predictor.model.MeanOfHeads",
    "sklearn.calibration._CalibratedClassifier",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
)


def needed_types(path: str | Path) -> list[str]:
    """The types outside skops' defaults that a model file holds, sorted."""
    # skops imports scipy and every estimator: only when a model is read or checked.
    import skops.io as sio

    return sorted(sio.get_untrusted_types(file=Path(path)))


def render(types: Sequence[str]) -> str:
    """`types` as the TRUSTED_TYPES assignment of this module."""
    lines = "".join(f'    "{t}",\n' for t in sorted(types))
    return f"TRUSTED_TYPES: tuple[str, ...] = (\n{lines})\n"


def main(argv: Sequence[str]) -> int:
    """Print the TRUSTED_TYPES a model file needs, and whether this module's list matches."""
    if len(argv) != 1:
        print("usage: python -m predictor.trusted_types MODEL.skops", file=sys.stderr)
        return 2
    needed = needed_types(argv[0])
    print(render(needed), end="")
    if needed == sorted(TRUSTED_TYPES):
        print(f"# predictor/trusted_types.py already has this list for {argv[0]}", file=sys.stderr)
        return 0
    print("# differs from predictor/trusted_types.py: review each new type, then paste the above", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
