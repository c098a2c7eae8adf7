"""The host label of dcgm-exporter's series, named once for every part that selects on it (STYLE 15).

The exporter writes it, the alert rules and the dashboards select and join on it, the puller and
the Alertmanager webhook read a GPU's host from it, and the service's /metrics repeats it.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

HostLabel = Literal["Hostname", "hostname"]
"""The names dcgm-exporter gives the host label: `Hostname` before 2026, `hostname` since
(`--hostname-label`, GPUHEALTH_HOSTNAME_LABEL)."""
HOSTNAME: Final[HostLabel] = "Hostname"
"""The default host label, which the alert rules and the dashboards select on."""
HOST_LABELS: Final[tuple[HostLabel, ...]] = get_args(HostLabel)
"""Both names, the default first: where a series or an alert may carry its host."""
