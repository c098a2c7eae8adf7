"""Path and query parameters that several routes share."""

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator, WithJsonSchema

from core.decisions import DECISIONS

Uuid = Annotated[str, Path(min_length=1, max_length=200, description="GPU UUID, e.g. GPU-5f0c…")]
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0, le=10_000_000)]

_ONE = "(" + "|".join(DECISIONS) + ")"


def _known_decisions(value: str) -> str:
    """A comma-separated list of decisions, each one we know (ValueError naming the one we do not)."""
    for name in value.split(","):
        if name not in DECISIONS:
            raise ValueError(
                f"unknown decision {name!r}; expected one or more of {', '.join(DECISIONS)}, comma-separated"
            )
    return value


DecisionList = Annotated[
    str,
    AfterValidator(_known_decisions),
    WithJsonSchema({"type": "string", "pattern": f"^{_ONE}(,{_ONE})*$"}),
]
"""One `decision=` value: a decision, or several separated by commas (`rma,drain`)."""
Decisions = Annotated[
    list[DecisionList] | None,
    Query(
        description="only GPUs with one of these decisions: `decision=rma,drain` (the parameter may also be"
        " repeated: `decision=rma&decision=drain`)",
        max_length=5,
    ),
]


def decisions(values: list[str] | None) -> list[str] | None:
    """The decisions a `Decisions` parameter names, each once, in the order given (None: not filtered)."""
    if values is None:
        return None
    return list(dict.fromkeys(name for value in values for name in value.split(",")))
