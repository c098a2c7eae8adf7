"""Every recording and alerting rule, in the order the generated files list them.

One list, several outputs (alerts/build.py): the Prometheus rule file, its promtool unit tests,
docs/alerts.md and one runbook per alert in docs/runbooks/. Each rule's expression, text and test
case live in the module of alerts/rulesets/ named for what it watches; thresholds in alerts/config.py.
"""

from __future__ import annotations

from alerts.model import Alert
from alerts.rulesets import (
    collector,
    ecc,
    fabric,
    kernel_log,
    links,
    network,
    operating,
    prediction,
    presence,
    probes,
    remediation,
    service,
    xid,
)
from alerts.rulesets.common import (
    GROUP_COLLECTOR,
    GROUP_GPU,
    GROUP_NETWORK,
    GROUP_PREDICTION,
    GROUP_REMEDIATION,
    GROUP_XID,
)
from alerts.rulesets.records import RECORDS

__all__ = [
    "ALERTS",
    "GPU_ALERTS",
    "GROUPS",
    "HEALTH_ALERTS",
    "NETWORK_ALERTS",
    "PREDICTION_ALERTS",
    "RECORDS",
    "REMEDIATION_ALERTS",
    "XID_ALERTS",
]

GPU_ALERTS: tuple[Alert, ...] = operating.ALERTS + ecc.ALERTS + links.ALERTS + presence.ALERTS
XID_ALERTS: tuple[Alert, ...] = xid.ALERTS + kernel_log.ALERTS
NETWORK_ALERTS: tuple[Alert, ...] = network.ALERTS + fabric.ALERTS
HEALTH_ALERTS: tuple[Alert, ...] = collector.ALERTS + service.ALERTS
PREDICTION_ALERTS: tuple[Alert, ...] = prediction.ALERTS + probes.ALERTS
REMEDIATION_ALERTS: tuple[Alert, ...] = remediation.ALERTS

ALERTS: tuple[Alert, ...] = (
    GPU_ALERTS + XID_ALERTS + NETWORK_ALERTS + HEALTH_ALERTS + PREDICTION_ALERTS + REMEDIATION_ALERTS
)
GROUPS: tuple[str, ...] = (
    GROUP_GPU, GROUP_XID, GROUP_NETWORK, GROUP_COLLECTOR, GROUP_PREDICTION, GROUP_REMEDIATION,
)  # fmt: skip
