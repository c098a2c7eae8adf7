"""The remedy beside each decision: what brings the GPU back (none, reset, reboot, replace) and when.

A decision says what is done to the GPU's work (`policy.decide`); the remedy says what is done to
the GPU. Its sources are the rules that fired (`rules.RULE_REMEDIES`, each citing its source): NVIDIA's
and DCGM's criteria, the driver's own recovery action and the XIDs whose documented resolution is a
reset or a reboot; the rules' actions make the decision follow the remedy (a reset or reboot now
drains, a reset at idle watches). Where several apply, the strongest wins (replace > reboot > reset >
none), and of equal remedies the most urgent (now > idle). A decision the model alone set asks for
none. `repeat_offender` says when a GPU's next remedy is a replacement instead; a slot that lost as many
GPUs is named as the slot (`slot_lines`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from core.decisions import REMEDIES, REMEDY_WHEN
from core.history import BUS_IDS_ATTR
from predictor.features.history import SLOT_WINDOW_DAYS
from predictor.rules import REPEAT_REMEDIES, REPEAT_WINDOW_DAYS, RULE_REMEDIES, WORN_REMAP_REMEDY, RemedyRef

REMEDY_COLUMNS = ("remedy", "remedy_when")
"""Columns `remedies` adds beside the decision (and `gpuhealth score`'s JSON carries)."""
NONE = RemedyRef("none", "idle", "")
SLOT_LOST = "slot_gpus_failed_60d"
"""The feature `slot_lines` reads: the GPUs the slot lost within SLOT_WINDOW_DAYS."""


def repeat_offender(
    remedied_at: Sequence[datetime], now: datetime, times: int = REPEAT_REMEDIES, days: float = REPEAT_WINDOW_DAYS
) -> bool:
    """Whether a remedy opening for a GPU at `now` is its `times`-th within `days` (`rules.REPEAT_REMEDIES`,
    `REPEAT_WINDOW_DAYS`): then the GPU goes to RMA (replace) instead. `remedied_at`: when each of its
    earlier remedies opened (any order; those after `now` or older than the window do not count).
    Times are compared as given: all aware or all naive."""
    since = now - timedelta(days=days)
    return sum(1 for t in remedied_at if since < t <= now) + 1 >= times


def strongest(refs: Iterable[RemedyRef]) -> RemedyRef:
    """Of several remedies, the strongest, then the most urgent (the first of equals): NONE if none."""
    best = NONE
    for ref in refs:
        if (REMEDIES.index(ref.remedy), REMEDY_WHEN.index(ref.when)) > (
            REMEDIES.index(best.remedy),
            REMEDY_WHEN.index(best.when),
        ):
            best = ref
    return best


def _sources(hits: pd.DataFrame, index: pd.Index) -> list[list[RemedyRef]]:
    """Per features row: every remedy a rule that fired asks for (in RULES order)."""
    refs: list[list[RemedyRef]] = [[] for _ in range(len(index))]
    rows = index.get_indexer(pd.Index(hits["row"]))
    for pos, rule in zip(rows.tolist(), hits["rule"].astype(str).tolist(), strict=True):
        if rule in RULE_REMEDIES and pos >= 0:
            refs[pos].append(RULE_REMEDIES[rule])
    return refs


def slot_lines(features: pd.DataFrame) -> list[list[str]]:
    """Per features row: the line naming its slot where the slot (its host and PCI bus id, or GPU index:
    `features.slots`) lost REPEAT_REMEDIES or more GPUs within SLOT_WINDOW_DAYS (`slot_gpus_failed_60d`),
    as a GPU that needed a remedy that often is a repeat offender: there the slot is, whichever GPU sits
    in it now. The bus id is the features' `history.BUS_IDS_ATTR`, where the history had one."""
    if SLOT_LOST not in features.columns:
        return [[] for _ in range(len(features))]
    lost = features[SLOT_LOST].to_numpy(dtype=float)
    buses = features.attrs.get(BUS_IDS_ATTR) or {}
    out: list[list[str]] = [[] for _ in range(len(features))]
    with np.errstate(invalid="ignore"):
        rows = np.flatnonzero(lost >= REPEAT_REMEDIES)  # NaN: none lost that we know of
    for k in rows.tolist():
        u = str(features["gpu_uuid"].iat[k]) if "gpu_uuid" in features.columns else ""
        h, i, n = str(features["hostname"].iat[k]), features["gpu_index"].iat[k], lost[k]
        slot = f"slot {buses[u]} of {h}" if u in buses else f"slot of GPU {i} on {h}" if i >= 0 else ""
        if slot:  # an unknown index names no slot
            out[k] = [f"{slot} has lost {n:.0f} GPUs in {SLOT_WINDOW_DAYS} days: check its riser, cable and slot"]
    return out


def remedies(hits: pd.DataFrame, index: pd.Index, features: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per features row (`index`): `remedy`, `remedy_when` and `remedy_reasons` (list[str]: the line a
    person reads beside the decision's reasons; empty where nothing is asked and nothing is to say).

    `hits` is `rules.evaluate_rules`' output over the features of `index`; `features` (those rows), where
    given, adds the line of a slot that keeps losing GPUs (`slot_lines`)."""
    remedy, when, lines = [], [], []
    slots = slot_lines(features) if features is not None else [[] for _ in range(len(index))]
    for refs, slot in zip(_sources(hits, index), slots, strict=True):
        best = strongest(refs)
        remedy.append(best.remedy)
        when.append(best.when)
        said = [f"remedy: {best.remedy} {best.when} ({best.why})"] if best.remedy != "none" else []
        # A source that asks for no remedy yet still says why (drain P2P, IMEX), unless one stronger did.
        said += [f"remedy: none ({r.why})" for r in refs if r.remedy == "none" and best.remedy == "none"]
        lines.append(said + slot)
    out = pd.DataFrame({"remedy": remedy, "remedy_when": when}, index=index)
    out["remedy_reasons"] = pd.Series(lines, index=index, dtype=object)
    return out


def with_decisions(fix: pd.DataFrame, decision: pd.Series) -> pd.DataFrame:
    """`remedies`' frame once the decisions are made: a pending remap's reset at idle where the GPU is
    drained (its memory wears, `policy.remap_drain_rows`) is due now (`rules.WORN_REMAP_REMEDY`), its
    reason line replaced."""
    worn = (decision.astype(str) == "drain").to_numpy() & (fix["remedy"] == "reset").to_numpy()
    worn &= (fix["remedy_when"] == "idle").to_numpy()
    if not worn.any():
        return fix
    out = fix.copy()
    out.loc[worn, "remedy_when"] = WORN_REMAP_REMEDY.when
    line = f"remedy: {WORN_REMAP_REMEDY.remedy} {WORN_REMAP_REMEDY.when} ({WORN_REMAP_REMEDY.why})"
    kept = [[r for r in said if not r.startswith("remedy: ")] for said in out.loc[worn, "remedy_reasons"]]
    out.loc[worn, "remedy_reasons"] = pd.Series([[line, *k] for k in kept], index=out.index[worn], dtype=object)
    return out


def _rank(remedy: Any, when: Any) -> tuple[int, int]:
    """A record's remedy and when as `strongest` orders them (unknown or absent: none)."""
    r = REMEDIES.index(remedy) if remedy in REMEDIES else 0
    return r, REMEDY_WHEN.index(when) if when in REMEDY_WHEN else 0


def raise_remedy(rec: dict[str, Any], ref: RemedyRef) -> None:
    """Give a round's record (`score.to_records`' dict) `ref`'s remedy where it is stronger than the
    record's, its reason line replacing the record's own remedy line; never lowers one."""
    if _rank(ref.remedy, ref.when) <= _rank(rec.get("remedy"), rec.get("remedy_when")):
        rec.setdefault("remedy", "none")
        rec.setdefault("remedy_when", "idle")
        return
    rec["remedy"], rec["remedy_when"] = ref.remedy, ref.when
    kept = [r for r in rec.get("reasons", []) if not str(r).startswith("remedy: ")]
    rec["reasons"] = [*kept, f"remedy: {ref.remedy} {ref.when} ({ref.why})"]
