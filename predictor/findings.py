"""What the service adds to a round's decisions from outside the history: GPUs the collector reports
lost, and probe findings. Pure functions over the round's records (`score.to_records`' dicts), as
`policy.decide` is over its frames: the scoring loop hands them the store's GPUs and probe results.

A lost GPU is drained (NVIDIA: XID 79, drain and reset or reseat); a failed memtest or GEMM, or a
GEMM more than 10 % slower than its same-model peers, raises the GPU to watch. Neither ever lowers a
decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pandas as pd

from core.decisions import SEVERITY
from predictor.probes import slow_gpus
from predictor.remedy import raise_remedy
from predictor.rules import LOST_REMEDY


def with_lost_gpus(records: list[dict[str, Any]], gpus: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Drain GPUs the collector reports lost (fallen off the bus), whatever their history says; their
    remedy is a reboot now (`rules.LOST_REMEDY`) unless a stronger one stands.

    A lost GPU has no readings, so its history stops without a trace of why; the
    collector's lost state is the evidence (NVIDIA: XID 79, drain and reset or reseat).
    """
    by_uuid = {str(r["gpu_uuid"]): r for r in records}
    for g in gpus:
        if g.get("state") != "lost":
            continue
        seen = g.get("last_seen")
        since = f" since {seen:%Y-%m-%d %H:%M} UTC" if isinstance(seen, datetime) else ""
        reason = f"GPU lost: the driver has not seen it{since} (fell off the bus, XID 79): drain, then reset or reseat"
        rec = by_uuid.get(str(g["uuid"]))
        if rec is None:
            rec = {"gpu_uuid": g["uuid"], "hostname": g["hostname"], "model_name": g.get("model_name") or "",
                   "risk": None, "risk_ecc": None, "risk_thermal": None, "risk_pcie": None,
                   "decision": "ok", "reasons": []}  # fmt: skip
            records.append(rec)
        if SEVERITY[str(rec["decision"])] < SEVERITY["drain"]:
            rec["decision"] = "drain"
        rec["reasons"] = [reason, *rec["reasons"]]
        raise_remedy(rec, LOST_REMEDY)  # off the bus: a reset cannot reach it
    return records


def _raise_to(rec: dict[str, Any], decision: str, reason: str) -> None:
    """Raise the record's decision to `decision` (never lower it) and add the reason last."""
    if SEVERITY[str(rec["decision"])] < SEVERITY[decision]:
        rec["decision"] = decision
    rec["reasons"] = [*rec["reasons"], reason]


def with_probe_findings(records: list[dict[str, Any]], results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Watch GPUs whose probes say so: GEMM >10% below same-model peers (slow), memtest bit errors,
    or a GEMM result that did not verify (silent data corruption)."""
    if not results:
        return records
    frame = pd.DataFrame(list(results))
    by_uuid = {str(r["gpu_uuid"]): r for r in records}
    for row in slow_gpus(frame).itertuples():
        rec = by_uuid.get(str(row.gpu_uuid))
        if rec is not None and row.slow:
            _raise_to(rec, "watch", f"slow: {row.reason}")
    latest = frame.sort_values("ran_at").groupby(["gpu_uuid", "test"], sort=False).tail(1)
    for row in latest[latest["status"] == "fail"].itertuples():
        rec = by_uuid.get(str(row.gpu_uuid))
        if rec is None or row.test not in ("memtest", "gemm", "gemm_fp32"):
            continue
        errors = row.details.get("errors", row.value) if isinstance(row.details, dict) else row.value
        found = f"{errors:g}" if isinstance(errors, int | float) and errors == errors else "?"
        what = "memory test found bit errors" if row.test == "memtest" else "GEMM results did not verify"
        _raise_to(rec, "watch", f"probe {row.test} failed: {what} ({found}); run dcgmi diag -r 3")
    return records
