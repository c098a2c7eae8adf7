"""What the manifests promise: least-privilege RBAC, the collector on GPU nodes, the service's secrets,
scrape jobs the alert rules select, and command lines the CLI accepts."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import typer
import yaml

from alerts import config as alerts_config
from core import __version__
from core.settings import Settings
from gpuhealth.cli import app
from tests.manifests.files import ROOT, one

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "NodeFeatureRule"}
ACTUATOR_GRANTS = {
    ("", "nodes", "get"),
    ("", "nodes", "list"),
    ("", "nodes", "patch"),
    ("", "pods", "list"),
    ("", "pods/eviction", "create"),
    ("", "events", "create"),
}
"""What actuate/kubernetes.py calls (docs/actuation.md), and nothing more."""


def _grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in rules:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, no nonResourceURLs
        out |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return out


def test_rbac_is_exactly_what_the_actuator_needs(objects: list[dict[str, Any]]) -> None:
    roles = [o for o in objects if o["kind"] in ("ClusterRole", "Role")]
    assert [r["metadata"]["name"] for r in roles] == ["gpuhealth-actuator"]
    assert _grants(roles[0]["rules"]) == ACTUATOR_GRANTS
    assert not any("*" in str(g) for g in _grants(roles[0]["rules"]))
    (binding,) = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpuhealth-actuator"}  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpuhealth", "namespace": "gpuhealth"}]


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = obj["spec"]["template"]["spec"]
    return pod


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_collector_runs_on_gpu_nodes_without_privilege(objects: list[dict[str, Any]]) -> None:
    ds = one(objects, "DaemonSet", "gpuhealth-collector")
    pod = _pod(ds)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["tolerations"] == [
        {"operator": "Exists", "effect": "NoSchedule"}, {"operator": "Exists", "effect": "NoExecute"}
    ]  # fmt: skip
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["automountServiceAccountToken"] is False
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    (ctr,) = pod["containers"]
    sc = ctr["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    env = _env(ctr)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["GPUHEALTH_HOSTNAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert ctr["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert ctr["livenessProbe"]["httpGet"]["path"] == ctr["readinessProbe"]["httpGet"]["path"] == "/healthz"
    mounts = {m["mountPath"]: m for m in ctr["volumeMounts"]}
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert set(host.values()) == {
        "/var/lib/kubelet/pod-resources", "/etc/kubernetes/node-feature-discovery/features.d"}  # fmt: skip
    pr = mounts["/var/lib/kubelet/pod-resources"]
    assert pr["readOnly"] is True and host[pr["name"]] == "/var/lib/kubelet/pod-resources"
    nfd = mounts["/etc/kubernetes/node-feature-discovery/features.d"]
    assert not nfd.get("readOnly") and host[nfd["name"]] == nfd["mountPath"]
    args = ctr["args"]
    assert args[0] == "collect"
    assert args[args.index("--nfd-features-dir") + 1] == nfd["mountPath"]
    assert args[args.index("--service-url") + 1] == "http://gpuhealth.gpuhealth.svc:8080"


def test_service_reads_its_secrets_and_runs_as_nobody(objects: list[dict[str, Any]]) -> None:
    dep = one(objects, "Deployment", "gpuhealth")
    assert dep["spec"]["replicas"] == 2
    pod = _pod(dep)
    assert pod["serviceAccountName"] == "gpuhealth"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    (ctr,) = pod["containers"]
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    assert ctr["securityContext"]["allowPrivilegeEscalation"] is False
    assert _env(ctr)["GPUHEALTH_DB"] == {"secretKeyRef": {"name": "gpuhealth-postgres", "key": "url"}}
    args = ctr["args"]
    assert args[:3] == ["serve", "--source", "prometheus"]
    assert args[args.index("--actuate") + 1] == "dry-run"
    assert args[6] == "dry-run"  # docs/deploy.md's overlay that turns the actuator on replaces args/6
    assert _env(ctr)["GPUHEALTH_PROMETHEUS_URL"].startswith("http://")
    assert args[args.index("--actuate-target") + 1] == "kubernetes"
    token_file = args[args.index("--token-file") + 1]
    (mount,) = [m for m in ctr["volumeMounts"] if token_file.startswith(m["mountPath"] + "/")]
    (vol,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert vol["secret"]["secretName"] == "gpuhealth-token"
    assert token_file == f"{mount['mountPath']}/{vol['secret']['items'][0]['path']}"
    svc = one(objects, "Service", "gpuhealth")
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"}]
    pdb = one(objects, "PodDisruptionBudget", "gpuhealth")
    assert pdb["spec"]["minAvailable"] == 1


def test_selectors_find_their_pods_and_ports(objects: list[dict[str, Any]]) -> None:
    workloads = {"gpuhealth-collector": one(objects, "DaemonSet", "gpuhealth-collector"),
                 "gpuhealth": one(objects, "Deployment", "gpuhealth")}  # fmt: skip
    for name, wl in workloads.items():
        pod_labels = wl["spec"]["template"]["metadata"]["labels"]
        ports = {p["name"] for c in _pod(wl)["containers"] for p in c["ports"]}
        assert wl["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        svc = one(objects, "Service", name)
        assert svc["spec"]["selector"].items() <= pod_labels.items()
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= ports
        monitor = one(objects, "ServiceMonitor", name)
        assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    assert one(objects, "Service", "gpuhealth-collector")["spec"]["clusterIP"] == "None"
    pdb = one(objects, "PodDisruptionBudget", "gpuhealth")
    assert pdb["spec"]["selector"] == workloads["gpuhealth"]["spec"]["selector"]


def test_scrape_jobs_are_what_the_rules_select(objects: list[dict[str, Any]]) -> None:
    """Prometheus's job is the Service's `jobLabel` label: the rules' job selectors must match it."""
    jobs = {}
    for name in ("gpuhealth-collector", "gpuhealth"):
        monitor = one(objects, "ServiceMonitor", name)
        jobs[name] = one(objects, "Service", name)["metadata"]["labels"][monitor["spec"]["jobLabel"]]
    assert f'job="{jobs["gpuhealth-collector"]}"' == alerts_config.COLLECTOR_SELECTOR
    assert f'job="{jobs["gpuhealth"]}"' == alerts_config.SERVICE_SELECTOR


def test_namespaces_and_image(objects: list[dict[str, Any]]) -> None:
    for o in objects:
        if o["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in o["metadata"], o["metadata"]["name"]
        else:
            assert o["metadata"]["namespace"] == "gpuhealth", o["metadata"]["name"]
    workloads = [o for o in objects if o["kind"] in ("DaemonSet", "Deployment")]
    images = {(o["kind"], c["image"]) for o in workloads for c in _pod(o)["containers"]}
    # The Containerfile's two targets (tests/integration/test_images.py builds them under these names).
    assert images == {
        ("DaemonSet", f"ghcr.io/gpuhealth/gpuhealth-collector:{__version__}"),
        ("Deployment", f"ghcr.io/gpuhealth/gpuhealth:{__version__}"),
    }


def _options(command: str) -> set[str]:
    click_app = typer.main.get_command(app)
    cmd = click_app.commands[command]  # type: ignore[attr-defined]
    return {opt for p in cmd.params for opt in p.opts}


@pytest.mark.parametrize(("kind", "name"), [("DaemonSet", "gpuhealth-collector"), ("Deployment", "gpuhealth")])
def test_command_lines_use_flags_the_cli_has(objects: list[dict[str, Any]], kind: str, name: str) -> None:
    (ctr,) = _pod(one(objects, kind, name))["containers"]
    command, *args = ctr["args"]
    flags = {a for a in args if a.startswith("--")}
    assert flags and flags <= _options(command), flags - _options(command)
    assert all(not a.startswith("--") for a in args[1::2])  # every flag has its value


def test_environment_names_settings(objects: list[dict[str, Any]]) -> None:
    """A GPUHEALTH_* variable the settings do not know would be ignored silently."""
    for kind, name in (("DaemonSet", "gpuhealth-collector"), ("Deployment", "gpuhealth")):
        (ctr,) = _pod(one(objects, kind, name))["containers"]
        ours = [k.removeprefix("GPUHEALTH_").lower() for k in _env(ctr) if k.startswith("GPUHEALTH_")]
        assert ours and set(ours) <= set(Settings.model_fields), ours


def _json_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 `replace` (all docs/deploy.md's overlay uses), on a copy."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "replace"
        *parents, last = op["path"].strip("/").split("/")
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            assert int(last) < len(node), op["path"]  # replace needs the target to exist
            node[int(last)] = op["value"]
        else:
            assert last in node, op["path"]
            node[last] = op["value"]
    return out


def test_the_deploy_pages_overlay_turns_the_actuator_on(objects: list[dict[str, Any]]) -> None:
    page = (ROOT / "docs" / "deploy.md").read_text()
    block = page.split("# my-cluster/kustomization.yaml\n", 1)[1].split("```", 1)[0]
    (patch,) = yaml.safe_load(block)["patches"]
    assert patch["target"] == {"kind": "Deployment", "name": "gpuhealth"}
    dep = _json_patch(one(objects, "Deployment", "gpuhealth"), yaml.safe_load(patch["patch"]))
    (ctr,) = _pod(dep)["containers"]
    assert ctr["args"][ctr["args"].index("--actuate") + 1] == "on"
    assert _env(ctr)["GPUHEALTH_PROMETHEUS_URL"] == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"


def _tolerates(toleration: dict[str, Any], taint: dict[str, str]) -> bool:
    """Kubernetes' ToleratesTaint (k8s.io/api/core/v1/toleration.go): an empty key with Exists matches every key."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator", "Equal") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


@pytest.mark.parametrize(
    "taint",
    [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        {"key": "gpuhealth.io/demoted", "value": "true", "effect": "NoSchedule"},
        {"key": "gpuhealth.io/drain", "value": "true", "effect": "NoExecute"},  # an operator's own drain taint
        {"key": "nvidia.com/gpu", "value": "unhealthy", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    ],
)
def test_no_taint_evicts_or_keeps_out_the_collector(objects: list[dict[str, Any]], taint: dict[str, str]) -> None:
    """A node we or the GPU Operator taint still needs its collector: its decision must stay fresh."""
    pod = _pod(one(objects, "DaemonSet", "gpuhealth-collector"))
    assert any(_tolerates(t, taint) for t in pod["tolerations"])
