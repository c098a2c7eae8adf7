"""The service's remediation series: names, label values and the time-to-return buckets.

One table for the service's /metrics (api/metrics.py), the alert rules (alerts/rulesets/remediation.py)
and the fleet dashboard, so a name is spelled once (STYLE 15). What a remediation is and how it moves
(drain -> remedy -> verify -> return or rma) is `service.remediation`'s; this module only names what
it exports.
"""

from __future__ import annotations

from typing import Literal

PREFIX = "gpuhealth_remediation"

TOTAL = "gpuhealth_remediations_total"
"""Counter{remedy, result}: remediations that ended, by how."""
SECONDS = "gpuhealth_remediation_seconds"
"""Histogram{remedy}: from detection (the decision that asked for the remedy) to return to service."""
OPEN = "gpuhealth_remediations_open"
"""Gauge{remedy, stage}: remediations under way."""
STUCK = "gpuhealth_remediations_stuck"
"""Gauge{remedy, stage}: open remediations past their deadline."""

Remedy = Literal["reset", "reboot"]
REMEDIES: tuple[Remedy, ...] = ("reset", "reboot")
"""What the loop carries out itself; `replace` stays a human's (an RMA), never a remediation series."""
Result = Literal["returned", "rma", "cancelled"]
RESULTS: tuple[Result, ...] = ("returned", "rma", "cancelled")
Stage = Literal["drain", "remedy", "verify"]
STAGES: tuple[Stage, ...] = ("drain", "remedy", "verify")

BUCKETS_S: tuple[float, ...] = (300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800)
"""5 min .. 2 days. A reset at idle with its probes takes minutes, a reboot tens of minutes, a wait
for a long job to end hours; a human repair takes a median of 17 h (InfiniteHBD trace, issue 57)."""

AUDIT_ACTIONS: tuple[str, ...] = ("reset", "reboot", "verify", "return", "escalate", "cancel")
"""The `action` of a remediation's audit lines in /v1/actions."""

METRICS = frozenset({TOTAL, OPEN, STUCK} | {f"{SECONDS}_{s}" for s in ("bucket", "count", "sum")})
"""Every series name the remediation loop exports, as PromQL reads them (the histogram's three)."""
