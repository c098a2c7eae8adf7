"""The remediation loop: drain → remedy (reset or reboot) → verify → return to service, or RMA.

Part of the actuator's level-triggered pass (`service.actuator.Actuator`), its state in the store
(`store.remediations`), so it survives restarts, replicas and scheduler outages. Each pass:

1. **Open** a remediation for each GPU whose latest score asks for a reset or a reboot
   (`predictor.remedy`) and has none open, at `drain`: due `now`, its node is drained as for a drain
   decision; due `idle`, nothing is drained (the reset waits for the GPU's next idle moment).
   A GPU returned before is opened again only when what caused it is seen again since the return;
   a GPU that needed a remedy too often (`predictor.remedy.repeat_offender`) goes to RMA instead.
2. **Drain**: once our drain holds on the node (due idle: at once), the remedy starts, through the
   breaker, at most `max_concurrent` at once.
3. **Remedy**: a reset is the node agent's (`GET /v1/nodes/{host}/remedies`, `collector.remediate`),
   refused while anything runs on the GPU; a reboot is the scheduler's (`scontrol reboot ASAP`) or
   kured's (the agent writes its sentinel), seen done by a new boot.
4. **Verify**: the agent runs the verified probes on the GPU; the service checks that what caused the
   remedy is gone in the samples since (`causes_since`). Pass → returned (our marks removed, other's
   never); fail → RMA.

A remediation past its stage's deadline is stuck (`gpuhealth_remediations_stuck`, an alert) and waits
on. Every step is audited in `/v1/actions` (reset, reboot, verify, return, escalate, cancel).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from actuate.breaker import BreakerPolicy
from actuate.plan import GpuDecision, Observed
from actuate.target import Reboot, Reboots, Target, TargetError, TargetUnavailable
from core import remediation_metrics
from core.decisions import OUT_OF_SERVICE
from core.history import xid_from_last_seen
from core.remedies import DETAIL_CHARS
from predictor.remedy import repeat_offender
from predictor.rules import REPEAT_WINDOW_DAYS
from store import Store, StoreError
from store.remediations import RemediationRow, WantedRemedy

log = logging.getLogger(__name__)

CAUSE_XIDS = frozenset((48, 79, 95, 119, 120))
LOST_GRACE = timedelta(minutes=10)
"""A GPU still lost (off the bus) this long after its remedy failed verification: the collector has had
time to find it again after a reset or the node's boot."""
XID_LOOKBACK = timedelta(hours=6)
"""Samples read from before a remedy, so that the XID gauge's value then is known (a change after it is new)."""
"""XIDs whose documented resolution is a reset or a reboot (`predictor.rules`, NVIDIA's XID catalogue: 48
double-bit ECC, 79 off the bus, 95 uncontained ECC, 119/120 GSP): seen after a remedy, it did not hold."""
DURATION_BUCKETS = remediation_metrics.BUCKETS_S
"""Seconds from detection to return (`gpuhealth_remediation_seconds`)."""


@dataclass(frozen=True)
class RemediationConfig:
    """Deadlines per stage and how many remedies run at once (per scheduler)."""

    drain: timedelta = timedelta(hours=2)
    """Our drain in place (pods evicted, Slurm's DRAIN set)."""
    remedy_now: timedelta = timedelta(hours=24)
    """A remedy due now: the node drained, its last jobs ending (Slurm's longest jobs run a day), then the remedy."""
    remedy_idle: timedelta = timedelta(days=7)
    """A remedy due at idle: the GPU's next moment without work (a week covers a maintenance window)."""
    verify: timedelta = timedelta(hours=1)
    """The agent's probes and a sample without the cause."""
    max_concurrent: int = 4
    """Remediations in remedy or verify at once, per scheduler: a bound on reboots and resets in flight."""

    def deadline(self, stage: str, due: str) -> timedelta:
        if stage == "drain":
            return self.drain
        if stage == "verify":
            return self.verify
        return self.remedy_now if due == "now" else self.remedy_idle


@dataclass(frozen=True)
class RemediationView:
    """What the actuator's desired state takes from the remediations (`Remediator.desired`)."""

    decisions: list[GpuDecision] = field(default_factory=list)
    """drain while a remedy due now is under way; rma after an escalation, until an operator's release."""
    returned_gpus: dict[str, datetime] = field(default_factory=dict)
    """GPU -> its last verified return: its decisions from before no longer act."""
    returned_nodes: dict[str, datetime] = field(default_factory=dict)
    """Node -> the last return of one of its GPUs: lowered without the settle period, once."""


@dataclass
class RemediationStats:
    """What this process closed, for /metrics (the open ones are counted from the store at scrape time)."""

    closed: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(remedy, result) -> count since start."""
    buckets: dict[str, list[int]] = field(default_factory=dict)
    """remedy -> cumulative counts per `DURATION_BUCKETS` bound (returned only)."""
    sums: dict[str, float] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    open: dict[tuple[str, str], int] = field(default_factory=dict)
    """(remedy, stage) -> open remediations of this scheduler at the end of the last pass."""
    stuck: dict[tuple[str, str], int] = field(default_factory=dict)
    """(remedy, stage) -> those of them past their deadline."""

    def observe(self, remedy: str, result: str, seconds: float | None) -> None:
        self.closed[(remedy, result)] += 1
        if result != "returned" or seconds is None:
            return
        b = self.buckets.setdefault(remedy, [0] * len(DURATION_BUCKETS))
        for i, bound in enumerate(DURATION_BUCKETS):
            b[i] += int(seconds <= bound)
        self.sums[remedy] = self.sums.get(remedy, 0.0) + seconds
        self.counts[remedy] += 1


def causes_since(store: Store, gpu_uuid: str, since: datetime) -> tuple[int, list[str]]:
    """How many samples the GPU has since `since`, and what in them still asks for a remedy: a new XID of
    `CAUSE_XIDS` (where the XID gauge changed: `core.history.xid_from_last_seen`, so a last-seen code kept
    from before the remedy is not new), the driver's recovery action, a pending row remap or page
    retirement, a PCIe link below its full width (in the newest sample). (0, []) before any sample came."""
    f = store.samples.history(since=since - XID_LOOKBACK, uuids=[gpu_uuid])
    if not len(f):
        return 0, []
    after = (f["timestamp"] > pd.Timestamp(since)).to_numpy()
    if not after.any():
        return 0, []
    found: list[str] = []
    if "xid" in f.columns:
        new = xid_from_last_seen(f, f["xid"].to_numpy(dtype=np.float64, na_value=np.nan))[after]
        found += [f"XID {c} since the remedy" for c in sorted({int(x) for x in new if x in CAUSE_XIDS})]
    last = f.iloc[-1]
    for col, what in (("recovery_action", "the driver's recovery action is {v:.0f}"),
                      ("row_remap_pending", "a row remap is still pending"),
                      ("retired_pages_pending", "a page retirement is still pending")):  # fmt: skip
        v = _finite(last.get(col))
        if v is not None and v > 0:
            found.append(what.format(v=v))
    width, full = _finite(last.get("pcie_link_width")), _finite(last.get("pcie_link_width_max"))
    if width is not None and full is not None and width < full:
        found.append(f"PCIe link at x{width:.0f} of x{full:.0f}")
    return int(after.sum()), found


def forget_before_return(frame: pd.DataFrame, returned: Mapping[str, datetime]) -> pd.DataFrame:
    """`frame` (a scoring history) with each returned GPU's XIDs up to its verified return set to none: the
    remedy resolved them, so the rules that count XIDs over a window (119/120, 48 over 7 days) no longer
    ask for the remedy again, and the GPU's score agrees with its return. Counters and flags need nothing:
    a reset clears what it cured, and what it did not cure failed verification. The frame is unchanged
    (the same object) when no GPU in it has returned."""
    if not returned or not len(frame) or "xid" not in frame.columns:
        return frame
    keys = pd.Index(list(returned))
    limits = np.array([np.datetime64(t.astimezone(UTC).replace(tzinfo=None), "ns") for t in returned.values()])
    col = frame["gpu_uuid"]
    if isinstance(col.dtype, pd.CategoricalDtype):  # the history's own dtype: look up each category once
        at = keys.get_indexer(col.cat.categories.astype(str))
        codes = col.cat.codes.to_numpy()
        pos = np.where(codes >= 0, at[codes], -1)
    else:
        pos = keys.get_indexer(col.astype(str))
    mine = pos >= 0
    if not mine.any():
        return frame
    t = pd.DatetimeIndex(frame["timestamp"])
    ts = (t.tz_convert(None) if t.tz is not None else t).to_numpy()
    before = np.zeros(len(frame), dtype=bool)
    before[mine] = ts[mine] <= limits[pos[mine]]
    if not before.any():
        return frame
    out = frame.copy(deep=False)  # the other columns shared (copy on write): the frame may be the scorer's window
    xid = out["xid"].to_numpy(copy=True)
    xid[before & ~np.isnan(xid.astype(np.float64))] = 0
    out["xid"] = xid
    return out


def _finite(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if np.isfinite(x) else None


class Remediator:
    """One scheduler's remediations, advanced once per actuator pass (`reconcile`)."""

    def __init__(
        self,
        store: Store,
        target: Target,
        config: RemediationConfig,
        *,
        breaker: BreakerPolicy,
        dry_run: bool = False,
        repeat: Callable[[Sequence[datetime], datetime], bool] = repeat_offender,
    ) -> None:
        self.store = store
        self.target = target
        self.config = config
        self.breaker = breaker
        self.dry_run = dry_run
        self.repeat = repeat
        self.stats = RemediationStats()
        self._lock = threading.Lock()

    @property
    def agent_reboots(self) -> bool:
        """Whether a reboot is the node agent's to ask for (kured's sentinel) rather than the scheduler's."""
        return isinstance(self.target, Reboots) and self.target.agent_reboots

    # -- what the actuator's desired state takes from us -----------------------------------

    def desired(self, hostnames: Mapping[str, Observed]) -> RemediationView:
        """The decisions remediations add (drain while a remedy due now is under way; rma after an escalation
        until an operator's release) and, per GPU, when it was last returned: its older decisions no longer act."""
        rem = self.store.remediations
        out: list[GpuDecision] = []
        for r in rem.open(target=self.target.name):
            if r["hostname"] in hostnames and r["due"] == "now":
                out.append(
                    GpuDecision(
                        r["hostname"],
                        r["gpu_uuid"],
                        r["gpu_index"],
                        "drain",
                        (f"remedy {r['remedy']} under way ({r['stage']}): {r['cause']}",),
                    )
                )
        released = {h: c["released_at"] for h, c in self.store.actuation.node_controls().items() if c["released_at"]}
        for r in rem.closed("rma"):
            rel = released.get(r["hostname"])
            if r["hostname"] in hostnames and r["closed_at"] is not None and (rel is None or rel < r["closed_at"]):
                out.append(
                    GpuDecision(
                        r["hostname"],
                        r["gpu_uuid"],
                        r["gpu_index"],
                        "rma",
                        (f"remediation failed: {r['detail'] or r['cause']}",),
                    )
                )
        back = [r for r in rem.closed("returned") if r["closed_at"] is not None and r["hostname"] in hostnames]
        nodes: dict[str, datetime] = {}
        for r in back:
            assert r["closed_at"] is not None
            nodes[r["hostname"]] = max(r["closed_at"], nodes.get(r["hostname"], r["closed_at"]))
        return RemediationView(out, {r["gpu_uuid"]: r["closed_at"] for r in back if r["closed_at"]}, nodes)

    # -- one pass ---------------------------------------------------------------------------

    def reconcile(self, observed: Mapping[str, Observed], *, nodes: int, now: datetime) -> list[dict[str, Any]]:
        """Open, advance and close this pass's remediations; the audit rows written (or, dry-run, planned)."""
        with self._lock:
            wanted = {w["gpu_uuid"]: w for w in self.store.remediations.wanted() if w["hostname"] in observed}
            if self.dry_run:
                return self._plan(wanted, observed, now)
            rows: list[dict[str, Any]] = []
            self._open(wanted, now, rows)
            for r in self.store.remediations.open(target=self.target.name):
                if r["hostname"] not in observed:
                    continue
                try:
                    self._advance(r, wanted.get(r["gpu_uuid"]), observed[r["hostname"]], nodes, now, rows)
                except (StoreError, TargetUnavailable):
                    raise  # the pass fails as a whole; the next one starts from the store
                except Exception as err:  # one remediation's trouble never stops the others
                    log.exception("remediation %s of %s failed this pass", r["id"], r["gpu_uuid"])
                    self._note(r, f"this pass failed: {type(err).__name__}: {err}")
            self.stats.open, self.stats.stuck = self.store.remediations.counts(now, target=self.target.name)
            return rows

    def _plan(
        self, wanted: Mapping[str, WantedRemedy], observed: Mapping[str, Observed], now: datetime
    ) -> list[dict[str, Any]]:
        """Dry-run: the remedy each GPU would get, audited once while it stands (nothing kept)."""
        rows = []
        hosts = sorted({w["hostname"] for w in wanted.values()})
        last = self.store.actuation.last_actions(self.target.name, hosts, remedies=True)
        for w in wanted.values():
            state = observed[w["hostname"]].ours
            row = self._row(
                w,
                w["remedy"],
                state,
                state,
                "planned",
                None,
                now,
                why=f"would {w['remedy']} GPU {w['gpu_index']} ({w['due']}): {w['cause']}",
            )
            prev = last.get(w["hostname"])
            if prev is None or (prev["action"], prev["why"], prev["result"]) != (row["action"], row["why"], "planned"):
                rows.append(row)
        self.store.actuation.record(rows)
        return rows

    def _open(self, wanted: Mapping[str, WantedRemedy], now: datetime, rows: list[dict[str, Any]]) -> None:
        rem = self.store.remediations
        open_gpus = {r["gpu_uuid"] for r in rem.open()}
        todo = [w for u, w in wanted.items() if u not in open_gpus]
        past = rem.of_gpus([w["gpu_uuid"] for w in todo])
        for w in todo:
            before = past.get(w["gpu_uuid"], [])
            if not self._needed_again(w, before):
                continue
            r = rem.create(
                {
                    **w,
                    "target": self.target.name,
                    "opened_at": now,
                    "stage": "drain",
                    "deadline": now + self.config.deadline("drain", w["due"]),
                }
            )
            log.info(
                "remediation %s opened: %s %s of %s on %s (%s)",
                r["id"],
                w["remedy"],
                w["due"],
                w["gpu_uuid"],
                w["hostname"],
                w["cause"],
            )
            earlier = [p["opened_at"] for p in before if p["result"] != "cancelled"]
            if self.repeat(earlier, now):
                why = f"repeat offender: remedy {len(earlier) + 1} within {REPEAT_WINDOW_DAYS} days (predictor.rules)"
                self._close(r, "rma", now, rows, why, action="escalate")

    def _needed_again(self, w: WantedRemedy, before: Sequence[RemediationRow]) -> bool:
        """Whether a GPU with these earlier remediations needs a new one: always after none or a cancelled one;
        never after an RMA; after a return only when what caused it came back since."""
        if not before:
            return True
        last = before[-1]
        if last["result"] == "rma":
            return False
        if last["result"] == "returned" and last["closed_at"] is not None:
            return bool(causes_since(self.store, w["gpu_uuid"], last["closed_at"])[1])
        return True

    # -- advancing one remediation -----------------------------------------------------------

    def _advance(
        self,
        r: RemediationRow,
        w: WantedRemedy | None,
        obs: Observed,
        nodes: int,
        now: datetime,
        rows: list[dict[str, Any]],
    ) -> None:
        if r["stage"] != "verify" and w is None and not r["reboot"]:
            self._close(
                r, "cancelled", now, rows, "no longer asked for: the GPU's latest score asks no remedy", action="cancel"
            )
            return
        if r["stage"] == "drain":
            self._drain(r, obs, nodes, now, rows)
        elif r["stage"] == "remedy":
            self._remedy(r, now, rows)
        elif r["stage"] == "verify":
            self._verify(r, now, rows)

    def _drain(self, r: RemediationRow, obs: Observed, nodes: int, now: datetime, rows: list[dict[str, Any]]) -> None:
        """From drain to remedy once the node carries our drain (or, due idle, at once), through the breaker."""
        if r["due"] == "now" and (obs.ours not in OUT_OF_SERVICE or obs.pending):
            return
        self._start(r, obs, nodes, now, rows)

    def _start(self, r: RemediationRow, obs: Observed, nodes: int, now: datetime, rows: list[dict[str, Any]]) -> None:
        busy = [x for x in self.store.remediations.open(target=self.target.name) if x["stage"] in ("remedy", "verify")]
        if r["stage"] == "drain" and len(busy) >= self.config.max_concurrent:
            self._note(r, f"waiting: {len(busy)} remedies under way (at most {self.config.max_concurrent})")
            return
        act = self.store.actuation
        row = self._row(r, r["remedy"], obs.ours, obs.ours, "pending", None, now)
        spent = act.spend(
            self.target.name,
            [row],
            window_start=now - self.breaker.window,
            limit=self.breaker.limit(nodes),
            counted=("applied", "pending"),
            open_reason=f"remedies and drains past {self.breaker.limit(nodes)} of {nodes} nodes",
            at=now,
        )
        if spent["breaker_open"] or r["hostname"] in spent["refused"]:
            self._note(r, "blocked: the actuator's breaker is open")
            return
        rid = spent["reserved"].get(r["hostname"])
        deadline = now + self.config.deadline("remedy", r["due"])
        values: dict[str, Any] = {"stage": "remedy", "stage_at": now, "deadline": deadline, "detail": None}
        error = None
        if r["remedy"] == "reboot":
            try:
                values["reboot"] = self._request_reboot(r, now)
            except TargetError as err:
                error = str(err)
        moved = error is None and self.store.remediations.move(r["id"], stage="drain", values=values)
        if rid is not None:
            lost = None if moved else "moved on by another replica"
            act.finish(rid, result="applied" if moved else "failed", error=error or lost, workloads=())
        if error:
            self._note(r, f"reboot not asked: {error}")
        rows.append({**row, "result": "applied" if moved else "failed"})

    def _request_reboot(self, r: RemediationRow, now: datetime) -> dict[str, Any]:
        if not isinstance(self.target, Reboots):
            raise TargetError(f"the {self.target.name} target cannot reboot nodes")
        asked = self.target.request_reboot(r["hostname"], f"GPU {r['gpu_index']}: {r['cause']}", now=now)
        return {"requested_at": asked.requested_at.isoformat(), "boot_id_before": asked.boot_id_before}

    def _remedy(self, r: RemediationRow, now: datetime, rows: list[dict[str, Any]]) -> None:
        """A reboot is watched until the node is back; a reset moves on by the agent's report (`take_report`)."""
        if r["remedy"] != "reboot" or not r["reboot"] or not isinstance(self.target, Reboots):
            return
        asked = Reboot(datetime.fromisoformat(r["reboot"]["requested_at"]), r["reboot"]["boot_id_before"])
        progress = self.target.reboot_progress(r["hostname"], asked)
        if progress == "done":
            to_verify(self.store, r, now, rows, self.config.verify, "node rebooted")
        elif progress == "failed":
            self._close(r, "rma", now, rows, "the reboot did not bring the node back", action="escalate")

    def _verify(self, r: RemediationRow, now: datetime, rows: list[dict[str, Any]]) -> None:
        """Return the GPU once the agent's probes passed and no cause shows in a sample since the remedy;
        RMA when a probe failed or a cause came back."""
        late = r["remedied_at"] is not None and now - r["remedied_at"] >= LOST_GRACE
        if late and self.store.remediations.gpu_state(r["gpu_uuid"]) == "lost":  # its probes can never run
            why = f"verification failed: the GPU is still lost after the {r['remedy']}"
            self._close(r, "rma", now, rows, why, action="escalate")
            return
        probes = (r["verified"] or {}).get("result")
        if probes is None or r["remedied_at"] is None:
            return
        n, found = causes_since(self.store, r["gpu_uuid"], r["remedied_at"])
        if probes != "done":
            self._close(
                r,
                "rma",
                now,
                rows,
                f"verification failed: {(r['verified'] or {}).get('detail', '')}",
                action="escalate",
            )
        elif found:
            self._close(r, "rma", now, rows, f"verification failed: {'; '.join(found)}", action="escalate")
        elif n:
            self._close(
                r, "returned", now, rows, f"verified: probes passed, {n} samples without the cause", action="return"
            )

    # -- closing, notes, audit ---------------------------------------------------------------

    def _close(
        self, r: RemediationRow, result: str, now: datetime, rows: list[dict[str, Any]], why: str, *, action: str
    ) -> None:
        values = {"stage": None, "result": result, "closed_at": now, "deadline": None, "detail": why[:DETAIL_CHARS]}
        if not self.store.remediations.move(r["id"], stage=r["stage"], values=values):
            return
        seconds = (now - r["detected_at"]).total_seconds() if result == "returned" else None
        self.stats.observe(r["remedy"], result, seconds)
        to = {"returned": "ok", "rma": "rma"}.get(result, "drain" if r["due"] == "now" else "ok")
        audit(self.store, r, action, now, rows, why=f"GPU {r['gpu_index']} {result}: {why}", to=to)
        log.log(
            logging.WARNING if result == "rma" else logging.INFO,
            "remediation %s of %s %s: %s",
            r["id"],
            r["gpu_uuid"],
            result,
            why,
        )

    def _note(self, r: RemediationRow, detail: str) -> None:
        if r["detail"] != detail:
            self.store.remediations.move(r["id"], stage=r["stage"], values={"detail": detail[:DETAIL_CHARS]})

    def _row(
        self,
        r: Mapping[str, Any],
        action: str,
        from_state: str,
        to_state: str,
        result: str,
        error: str | None,
        now: datetime,
        *,
        why: str | None = None,
    ) -> dict[str, Any]:
        return audit_row(
            r,
            self.target.name,
            action,
            from_state,
            to_state,
            result,
            error,
            now,
            why=why,
            mode="dry-run" if self.dry_run else "on",
        )


def audit_row(
    r: Mapping[str, Any],
    target: str,
    action: str,
    from_state: str,
    to_state: str,
    result: str,
    error: str | None,
    now: datetime,
    *,
    why: str | None = None,
    mode: str = "on",
) -> dict[str, Any]:
    """An audit row (`/v1/actions`) of a remediation's step."""
    return {
        "at": now,
        "target": target,
        "mode": mode,
        "hostname": r["hostname"],
        "action": action,
        "from_state": from_state,
        "to_state": to_state,
        "why": why or f"GPU {r['gpu_index']} {r['remedy']} {r['due']}: {r['cause']}",
        "gpu_uuid": r["gpu_uuid"],
        "gpu_index": r["gpu_index"],
        "result": result,
        "error": error,
        "workloads": [],
        "escalates": True,
    }


def audit(
    store: Store,
    r: RemediationRow,
    action: str,
    now: datetime,
    rows: list[dict[str, Any]],
    *,
    why: str,
    to: str | None = None,
) -> None:
    """Record a step taken (applied) on remediation `r` in the audit, and in `rows`."""
    state = "drain" if r["due"] == "now" else "watch"
    row = audit_row(r, r["target"], action, state, to or state, "applied", None, now, why=why)
    store.actuation.record([row])
    rows.append(row)


def to_verify(
    store: Store, r: RemediationRow, now: datetime, rows: list[dict[str, Any]], within: timedelta, what: str
) -> bool:
    """The remedy is done: verify next (the agent's probes, then the samples since now)."""
    values = {
        "stage": "verify",
        "stage_at": now,
        "remedied_at": now,
        "deadline": now + within,
        "detail": what[:DETAIL_CHARS],
    }
    if not store.remediations.move(r["id"], stage=r["stage"], values=values):
        return False
    audit(store, r, "verify", now, rows, why=f"{what}; verifying GPU {r['gpu_index']}")
    return True


__all__ = [
    "CAUSE_XIDS",
    "DURATION_BUCKETS",
    "RemediationConfig",
    "RemediationStats",
    "RemediationView",
    "Remediator",
    "audit",
    "audit_row",
    "causes_since",
    "forget_before_return",
    "to_verify",
]
