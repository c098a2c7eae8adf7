"""What the rule modules share: rule groups, metric names, annotation templates, the test cases' GPUs."""

from __future__ import annotations

from alerts.model import gpu_labels
from core.catalog import BY_NAME
from core.labels import HOSTNAME

# Rule groups of the rule file, in the order alerts/rules.py lists them.
GROUP_GPU = "gpuhealth.gpu"
GROUP_XID = "gpuhealth.xid"
GROUP_COLLECTOR = "gpuhealth.collector"
GROUP_PREDICTION = "gpuhealth.prediction"
GROUP_NETWORK = "gpuhealth.network"
GROUP_REMEDIATION = "gpuhealth.remediation"

XID_COUNTER = "gpuhealth_xid_errors_total"
"""The collector's per-code XID counter (not a catalogue field: it has an `xid` label)."""


def m(short: str) -> str:
    """The /metrics name of a catalogue field (a KeyError here is a typo caught at import)."""
    return BY_NAME[short].metric_name


def new_events(sel: str, window: str, at_least: int = 1) -> str:
    """PromQL: events of the counter selected by `sel` within `window`, per series, where at least `at_least`.

    A per-code counter (XIDs, SXIDs) appears only at its first event, so `increase()` alone misses it (a new
    series has nothing to increase from): a series that did not exist `window` ago counts with its whole value.
    """
    return f"(increase({sel}[{window}]) >= {at_least})\nor\n(({sel} unless {sel} offset {window}) >= {at_least})"


def fmt(x: float) -> str:
    """A threshold as PromQL and prose write it: 0.95, 85, 1e-06 never appears."""
    return f"{x:g}"


def label(name: str) -> str:
    """Prometheus's template for an alert's label: `{{ $labels.NAME }}`."""
    return f"{{{{ $labels.{name} }}}}"


def value(printf: str = "%.0f") -> str:
    """Prometheus's template for an alert's value, formatted with `printf`."""
    return f'{{{{ $value | printf "{printf}" }}}}'


VALUE = value()
HOST = label(HOSTNAME)
GPU = label("gpu")
INSTANCE = label("instance")
ON_GPU = f"{HOST} GPU {GPU}"
"""`node-a GPU 0` in a summary."""
WHO = f"GPU {GPU} ({label('UUID')}) on {HOST}"
"""`GPU 0 (GPU-…) on node-a`, how a description starts."""

# The GPUs of the promtool test cases.
G0 = gpu_labels(0)
G1 = gpu_labels(1)
