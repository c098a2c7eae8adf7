"""The decisions and their order, one place for the predictor, the store, the collector and the CLI.

ok < watch < demote < drain < rma (docs/architecture.md, "Decisions"): a GPU's decision is the
worst that applies, and so is a node's.
"""

from __future__ import annotations

from collections.abc import Iterable

DECISIONS = ("ok", "watch", "demote", "drain", "rma")
"""Decisions, least severe first."""
SEVERITY = {d: i for i, d in enumerate(DECISIONS)}
"""Each decision's place in `DECISIONS` (0 for ok)."""
OUT_OF_SERVICE = ("drain", "rma")
"""The decisions that take a GPU out of service (its work moved off it); the rest leave it running."""
REMEDIES = ("none", "reset", "reboot", "replace")
"""What brings a GPU back, beside its decision (`predictor.remedy`), weakest first."""
REMEDY_WHEN = ("idle", "now")
"""When a remedy is due, least urgent first: the next moment the GPU has no work (or a maintenance
window), or as soon as its work is drained."""


def worst(decisions: Iterable[str | None]) -> str:
    """The most severe of `decisions`; None (a GPU not scored yet) counts as ok, and so does none at all.

    A name outside `DECISIONS` is a ValueError, not silently ok.
    """
    worst_seen = 0
    for d in decisions:
        if d is None:
            continue
        try:
            worst_seen = max(worst_seen, SEVERITY[d])
        except KeyError:
            raise ValueError(f"unknown decision {d!r}; expected one of {', '.join(DECISIONS)}") from None
    return DECISIONS[worst_seen]
