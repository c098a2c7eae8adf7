"""Prometheus Operator and Grafana objects: two ServiceMonitors, the PrometheusRule, the dashboards.

The rules and the dashboards are the generated files of alerts/ and dashboards/ (read, not rebuilt:
this package depends on neither), so `gpuhealth deploy build` runs after their builds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from manifests import config as c

MONITORING = "monitoring.coreos.com/v1"
DASHBOARD_LABEL = {"grafana_dashboard": "1"}
"""The label Grafana's dashboard sidecar (kube-prometheus-stack, the grafana chart) looks for."""


def _relabel_instance(source: str) -> dict[str, Any]:
    """`instance` = a name a person knows (the node, the pod) instead of a pod IP:port that moves."""
    return {"sourceLabels": [source], "targetLabel": "instance", "action": "replace"}


def collector_monitor() -> dict[str, Any]:
    """Every collector, as job `gpuhealth` (the rules' COLLECTOR_SELECTOR)."""
    return {
        "apiVersion": MONITORING,
        "kind": "ServiceMonitor",
        "metadata": c.metadata(c.COLLECTOR, "collector"),
        "spec": {
            "jobLabel": c.SCRAPE_JOB_LABEL,
            "selector": {"matchLabels": c.selector("collector")},
            "endpoints": [
                {
                    "port": "metrics",
                    "path": "/metrics",
                    "interval": c.COLLECTOR_SCRAPE_INTERVAL,
                    # The exporter's own labels win (dcgm-exporter's convention: `pod`, `namespace`,
                    # `container` name the workload that holds the GPU, not the collector's pod) ...
                    "honorLabels": True,
                    "relabelings": [
                        _relabel_instance("__meta_kubernetes_pod_node_name"),
                        # ... so the collector's own pod and container are not put on every GPU series.
                        {"action": "labeldrop", "regex": "pod|container"},
                    ],
                }
            ],
        },
    }


def service_monitor() -> dict[str, Any]:
    """The service's /metrics (risks, decisions, store health), as job `gpuhealth-service`."""
    return {
        "apiVersion": MONITORING,
        "kind": "ServiceMonitor",
        "metadata": c.metadata(c.SERVICE, "service"),
        "spec": {
            "jobLabel": c.SCRAPE_JOB_LABEL,
            "selector": {"matchLabels": c.selector("service")},
            "endpoints": [
                {
                    "port": "http",
                    "path": "/metrics",
                    "interval": c.SERVICE_SCRAPE_INTERVAL,
                    "relabelings": [_relabel_instance("__meta_kubernetes_pod_name")],
                }
            ],
        },
    }


def prometheus_rule(rules: Mapping[str, Any]) -> dict[str, Any]:
    """The alert and recording rules of alerts/generated/gpuhealth-rules.yml (`rules`: the parsed file)."""
    return {
        "apiVersion": MONITORING,
        "kind": "PrometheusRule",
        "metadata": c.metadata(c.APP, "rules"),
        "spec": {"groups": list(rules["groups"])},
    }


def dashboard(stem: str, text: str) -> dict[str, Any]:
    """A dashboard of dashboards/generated/ as a ConfigMap for Grafana's sidecar (`text`: its JSON)."""
    json.loads(text)  # a broken file fails the build, not Grafana's sidecar
    meta = c.metadata(f"{stem}-dashboard", "dashboards", extra_labels=DASHBOARD_LABEL)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {f"{stem}.json": text}}
