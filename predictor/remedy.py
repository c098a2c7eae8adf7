"""The remedy beside each decision: what brings the GPU back (none, reset, reboot, replace) and when.

A decision says what is done to the GPU's work (`policy.decide`); the remedy says what is done to
the GPU. Its sources, each cited in `predictor.rules`: the rules that fired (`RULE_REMEDIES`), the
driver's own recovery action (`RECOVERY_REMEDIES`) and XIDs whose documented resolution is a reset
(`XID_REMEDIES`). Where several apply, the strongest wins (replace > reboot > reset > none), and of
equal remedies the most urgent (now > idle). A decision the model alone set asks for none. The
remedy never changes the decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from core.decisions import REMEDIES, REMEDY_WHEN
from predictor.rules import RECOVERY_REMEDIES, RULE_REMEDIES, XID_REMEDIES, XID_REMEDY_DAYS, RemedyRef

REMEDY_INPUTS = ("recovery_action",)
"""History columns the remedy reads besides the features' (`xid` is one of theirs)."""
REMEDY_COLUMNS = ("remedy", "remedy_when")
"""Columns `remedies` adds beside the decision (and `gpuhealth score`'s JSON carries)."""
NONE = RemedyRef("none", "idle", "")


def driver_inputs(seen: pd.DataFrame, index: pd.Index, uuids: pd.Series, cutoff: pd.Timestamp) -> pd.DataFrame:
    """Per features row (`index`, GPU `uuids`): the driver's latest `recovery_action` (NaN: none read)
    and, per code of `XID_REMEDIES`, how often it was seen within `XID_REMEDY_DAYS` before `cutoff`."""
    out = pd.DataFrame(index=index)
    key = uuids.astype(str).to_numpy()
    if "recovery_action" in seen.columns and len(seen):
        last = seen.sort_values("timestamp", kind="stable").groupby("gpu_uuid", observed=True)["recovery_action"]
        latest = last.last()  # the newest known value per GPU
        out["recovery_action"] = latest.reindex(key).to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        out["recovery_action"] = np.nan
    recent = seen.loc[seen["timestamp"] > cutoff - pd.Timedelta(days=XID_REMEDY_DAYS)] if len(seen) else seen
    for code in XID_REMEDIES:
        if "xid" in recent.columns and len(recent):
            n = recent.loc[recent["xid"] == code].groupby("gpu_uuid", observed=True).size()
            out[f"xid_{code}_recent"] = n.reindex(key, fill_value=0).to_numpy()
        else:
            out[f"xid_{code}_recent"] = 0
    return out


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


def _sources(hits: pd.DataFrame, driver: pd.DataFrame, index: pd.Index) -> list[list[RemedyRef]]:
    """Per features row: every remedy a source asks for (rules in RULES order, then the driver's)."""
    refs: list[list[RemedyRef]] = [[] for _ in range(len(index))]
    rows = index.get_indexer(pd.Index(hits["row"]))
    for pos, rule in zip(rows, hits["rule"].astype(str), strict=True):
        if rule in RULE_REMEDIES and pos >= 0:
            refs[pos].append(RULE_REMEDIES[rule])
    action = driver["recovery_action"].to_numpy(dtype=np.float64, na_value=np.nan)
    for i in np.flatnonzero(np.isin(action, list(RECOVERY_REMEDIES))):
        refs[i].append(RECOVERY_REMEDIES[int(action[i])])
    for code, ref in XID_REMEDIES.items():
        for i in np.flatnonzero(driver[f"xid_{code}_recent"].to_numpy() > 0):
            refs[i].append(ref)
    return refs


def remedies(hits: pd.DataFrame, driver: pd.DataFrame, index: pd.Index) -> pd.DataFrame:
    """Per features row (`index`): `remedy`, `remedy_when` and `remedy_reasons` (list[str]: the line a
    person reads beside the decision's reasons; empty where nothing is asked and nothing is to say).

    `hits` is `rules.evaluate_rules`' output, `driver` is `driver_inputs`' (same index)."""
    remedy, when, lines = [], [], []
    for refs in _sources(hits, driver, index):
        best = strongest(refs)
        remedy.append(best.remedy)
        when.append(best.when)
        said = [f"remedy: {best.remedy} {best.when} ({best.why})"] if best.remedy != "none" else []
        # A source that asks for no remedy yet still says why (drain P2P, IMEX), unless one stronger did.
        said += [f"remedy: none ({r.why})" for r in refs if r.remedy == "none" and best.remedy == "none"]
        lines.append(said)
    out = pd.DataFrame({"remedy": remedy, "remedy_when": when}, index=index)
    out["remedy_reasons"] = pd.Series(lines, index=index, dtype=object)
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
