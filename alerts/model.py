"""The shapes of rules: recording rules, alerts, and each alert's promtool test case."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from core.labels import HOSTNAME

Severity = Literal["info", "warning", "critical"]
Action = Literal["watch", "demote", "drain", "rma"]
ACTIONS: tuple[Action, ...] = ("watch", "demote", "drain", "rma")
"""In escalating order (the decision ladder of docs/architecture.md, less `ok`)."""

TEST_JOB = "gpuhealth"
TEST_SERVICE_JOB = "gpuhealth-service"


def collector_target(host: str = "node-a") -> dict[str, str]:
    """The job/instance labels Prometheus puts on a `gpuhealth collect` exporter's series."""
    return {"job": TEST_JOB, "instance": f"{host}:9400"}


def service_target() -> dict[str, str]:
    """The job/instance labels Prometheus puts on `gpuhealth serve`'s series."""
    return {"job": TEST_SERVICE_JOB, "instance": "gpuhealth:8080"}


def gpu_labels(i: int = 0, model: str = "NVIDIA H100 80GB HBM3", host: str = "node-a", **extra: str) -> dict[str, str]:
    """The labels `gpuhealth collect` puts on GPU `i`'s series (plus Prometheus's job/instance)."""
    return {
        HOSTNAME: host,
        "UUID": f"GPU-{i:08d}-0000-4000-8000-00000000000{i % 10}",
        "device": f"nvidia{i}",
        "gpu": str(i),
        "modelName": model,
        "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
        **collector_target(host),
        **extra,
    }


def service_labels(i: int = 0, host: str = "node-a", **extra: str) -> dict[str, str]:
    """The labels `gpuhealth serve` puts on its per-GPU series."""
    g = gpu_labels(i, host=host)
    return {**{k: g[k] for k in (HOSTNAME, "UUID", "gpu", "modelName")}, **service_target(), **extra}


def series(metric: str, labels: Mapping[str, str]) -> str:
    """`metric{a="x",...}` with labels in sorted order."""
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{metric}{{{inner}}}"


@dataclass(frozen=True)
class Case:
    """A promtool unit test: input series, a time the alert must not fire (yet), and a time it fires."""

    series: tuple[tuple[str, str], ...]
    """(series, promtool expanding values such as "0+1x10" or "_x5 1x5")."""
    quiet_at: str
    fire_at: str
    value: float
    """$value of every expected alert at fire_at (rendered through the annotation templates)."""
    labels: tuple[Mapping[str, str], ...]
    """Label sets of the alerts firing at fire_at, without the rule's own labels."""
    interval: str = "1m"

    @classmethod
    def single(
        cls,
        metric: str,
        labels: Mapping[str, str],
        values: str,
        *,
        quiet_at: str,
        fire_at: str,
        value: float,
        interval: str = "1m",
    ) -> Case:
        """A case with one input series, whose labels are those of the one alert it fires."""
        return cls(((series(metric, labels), values),), quiet_at, fire_at, value, (labels,), interval)


@dataclass(frozen=True)
class Record:
    """A recording rule."""

    record: str
    expr: str
    help: str
    group: str = "gpuhealth.records"


@dataclass(frozen=True)
class Alert:
    """An alerting rule with its routing labels, annotations, test case and runbook text."""

    name: str
    group: str
    expr: str
    for_: str
    severity: Severity
    action: Action
    summary: str
    description: str
    case: Case
    meaning: str
    check: tuple[str, ...]
    act: tuple[str, ...]
    extra_labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def labels(self) -> dict[str, str]:
        """Labels the rule adds to every alert it raises."""
        return {"severity": self.severity, "action": self.action, **self.extra_labels}
