"""The actuator's Kubernetes client (lightkube): labels, a taint, cordon, evictions, events.

Our marks on a node, and only ours, say what we did, so a pass can read them back:

| state | labels | taint | cordon |
|---|---|---|---|
| watch | `gpuhealth.io/state=watch`, `gpuhealth.io/gpu=3` | | |
| demote | `gpuhealth.io/state=demote` | `gpuhealth.io/demoted=true:NoSchedule` | |
| drain | `gpuhealth.io/state=drain` | the same | `spec.unschedulable`, then GPU pods evicted |
| rma | also `gpuhealth.io/rma=true` | the same | the same |

`gpuhealth.io/reason` (annotation) says which GPU and why. We cordon only a node nobody had
cordoned, and mark it `gpuhealth.io/cordoned=true`; only such a node is uncordoned by us.
Evictions go through the Eviction API, so PodDisruptionBudgets hold: a 429 leaves the drain
`pending` (annotation `gpuhealth.io/drain`) and the next pass tries again; a pod is never deleted.
A drained node that someone made schedulable again is cordoned again by the next pass.
Writes carry the node's `resourceVersion`: a 409 (someone else wrote in between) re-reads and
re-applies.

A node reboot (through kured, docs/actuation.md) is seen done by the node's `status.nodeInfo.bootID`: `observe`
puts it in each node's detail (`BOOT_ID`, with `READY`), and `rebooted_since` tells whether the node has booted
again since a bootID recorded before the reboot was asked for; `reboot_record` and `reboot_status` do the same
with the `Reboot` record the Slurm target uses.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import httpx2
from lightkube import ApiError, Client, KubeConfig
from lightkube.config.kubeconfig import Cluster, User
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from actuate.plan import Observed, Step
from actuate.target import (
    MANAGED_LABEL,
    Applied,
    Reboot,
    RebootProgress,
    TargetError,
    TargetUnavailable,
    printable,
)
from core.decisions import OUT_OF_SERVICE, SEVERITY
from core.kube_labels import label_value

log = logging.getLogger(__name__)

DOMAIN = "gpuhealth.io"
STATE_LABEL = f"{DOMAIN}/state"
GPU_LABEL = f"{DOMAIN}/gpu"
RMA_LABEL = f"{DOMAIN}/rma"
REASON_ANNOTATION = f"{DOMAIN}/reason"
CORDONED_ANNOTATION = f"{DOMAIN}/cordoned"
DRAIN_ANNOTATION = f"{DOMAIN}/drain"
DEMOTED_TAINT = {"key": f"{DOMAIN}/demoted", "value": "true", "effect": "NoSchedule"}
"""Interruptible work carries the toleration (docs/actuation.md: a pod spec and a Kueue queue that do)."""
GPU_RESOURCE_PREFIX = "nvidia.com/"
"""`nvidia.com/gpu` and the MIG resources (`nvidia.com/mig-1g.10gb`): a pod asking for one uses a GPU."""
BOOT_ID = "boot_id"
"""Observed.detail key: the node's `status.nodeInfo.bootID`, which its kubelet reads from the kernel
(/proc/sys/kernel/random/boot_id, a fresh UUID at every boot); None when the node has no status yet."""
READY = "ready"
"""Observed.detail key: whether the node's Ready condition is True."""
CONFLICT_RETRIES = 5
REASON_CHARS = 1024


def client_for(server: str | None = None, kubeconfig: str | None = None, *, timeout_s: float = 10.0) -> Client:
    """A lightkube Client: a plain server URL (tests), a kubeconfig file, or in-cluster / ~/.kube/config."""
    if server:
        # KubeConfig.from_server has no user, which lightkube 1.0's client refuses: an empty one.
        config = KubeConfig.from_one(cluster=Cluster(server=server), user=User())
    elif kubeconfig:
        config = KubeConfig.from_file(kubeconfig)
    else:
        config = KubeConfig.from_env()
    return Client(config, timeout=httpx2.Timeout(timeout_s), field_manager="gpuhealth", trust_env=False)


@contextmanager
def _api(what: str) -> Iterator[None]:
    """API errors in our terms: unreachable or 5xx → TargetUnavailable, other 4xx → TargetError."""
    try:
        yield
    except ApiError as err:
        code = err.status.code or 0
        if code >= 500:
            raise TargetUnavailable(f"{what}: API server answered {code}: {err.status.message}") from err
        raise TargetError(f"{what}: {code} {err.status.reason}: {err.status.message}") from err
    except httpx2.TransportError as err:
        raise TargetUnavailable(f"{what}: API server unreachable: {err}") from err


def _ours(labels: Mapping[str, str]) -> str:
    state = labels.get(STATE_LABEL, "ok")
    return state if state in SEVERITY else "ok"


def _uses_gpu(pod: Any) -> bool:
    for c in (pod.spec.containers or []) if pod.spec else []:
        res = c.resources
        for amounts in (res.limits, res.requests) if res else ():
            if amounts and any(k.startswith(GPU_RESOURCE_PREFIX) for k in amounts):
                return True
    return False


class KubeTarget:
    """Applies the actuator's steps to Kubernetes nodes."""

    name = "kubernetes"
    agent_reboots = True
    """kured reboots the node when the node agent writes its sentinel; we tell the reboot by the bootID."""

    def __init__(self, client: Client, *, event_namespace: str = "default", unmanaged: Iterable[str] = ()) -> None:
        self.client = client
        self.event_namespace = event_namespace
        self.unmanaged = frozenset(unmanaged)
        """Nodes never touched, besides those labelled gpuhealth.io/managed=false."""
        self._pods: dict[str, list[Any]] = {}
        """This pass's pods per node, read once for the audit and the evictions (cleared by observe)."""

    def observe(self) -> dict[str, Observed]:
        """Every node in our terms, from one LIST (pages of 500)."""
        out: dict[str, Observed] = {}
        self._pods = {}
        with _api("listing nodes"):
            for node in self.client.list(Node, chunk_size=500):
                meta = node.metadata
                assert meta is not None and meta.name is not None
                labels = meta.labels or {}
                ann = meta.annotations or {}
                ours = _ours(labels)
                cordoned = bool(node.spec and node.spec.unschedulable)
                out[meta.name] = Observed(
                    hostname=meta.name,
                    ours=ours,
                    managed=labels.get(MANAGED_LABEL, "true").lower() != "false" and meta.name not in self.unmanaged,
                    foreign="cordoned" if cordoned and ann.get(CORDONED_ANNOTATION) != "true" else None,
                    # A drained node found schedulable lost its cordon to someone (kured's uncordon after a
                    # failed drain of its own): applied again, as an unfinished drain is.
                    pending=ours in OUT_OF_SERVICE and (ann.get(DRAIN_ANNOTATION) == "pending" or not cordoned),
                    detail={"node": node, **_boot(node)},
                )
        return out

    @staticmethod
    def rebooted_since(observed: Observed, boot_id: str) -> bool:
        """Whether the node has booted again since `boot_id` was read, and is Ready: its bootID now differs.
        An unknown bootID, then or now, tells nothing (False)."""
        now = observed.detail.get(BOOT_ID)
        return bool(boot_id and now and now != boot_id and observed.detail.get(READY))

    def reboot_record(self, hostname: str, *, now: datetime | None = None) -> Reboot:
        """The Reboot to keep when the node agent is asked for kured's sentinel: the node's bootID before it.
        Raises TargetError when the node shows none (a reboot could never be told)."""
        detail = self._read_boot(hostname)
        if not detail[BOOT_ID]:
            raise TargetError(f"node {hostname} reports no status.nodeInfo.bootID: a reboot could not be told")
        return Reboot(requested_at=now or datetime.now(UTC), boot_id_before=detail[BOOT_ID])

    def request_reboot(self, hostname: str, why: str, *, now: datetime) -> Reboot:
        """The remediation loop's reboot: the bootID before it (the node agent then writes kured's sentinel)."""
        return self.reboot_record(hostname, now=now)

    def reboot_progress(self, hostname: str, asked: Reboot) -> RebootProgress:
        """done once the node is back Ready from another boot; waiting until then (kured keeps its own retries)."""
        return "done" if self.reboot_status(hostname, asked).done else "waiting"

    def reboot_status(self, hostname: str, asked: Reboot) -> Reboot:
        """`asked`, with `done` set once the node shows another bootID and is Ready (one GET of the node)."""
        observed = Observed(hostname, detail=self._read_boot(hostname))
        return replace(asked, done=self.rebooted_since(observed, asked.boot_id_before))

    def _read_boot(self, hostname: str) -> dict[str, Any]:
        with _api(f"reading node {hostname}"):
            return _boot(self.client.get(Node, hostname))

    def _pods_on(self, hostname: str, *, fresh: bool = False) -> list[Any]:
        if not fresh and hostname in self._pods:
            return self._pods[hostname]
        with _api(f"listing pods on {hostname}"):
            pods = self.client.list(Pod, namespace="*", fields={"spec.nodeName": hostname})
            running = [p for p in pods if p.status is None or p.status.phase not in ("Succeeded", "Failed")]
        self._pods[hostname] = running
        return running

    def workloads(self, hostname: str) -> list[str]:
        """The pods on the node (namespace/name), GPU pods marked."""
        return [
            f"{p.metadata.namespace}/{p.metadata.name}" + (" (gpu)" if _uses_gpu(p) else "")
            for p in self._pods_on(hostname)
        ]

    def apply(self, step: Step, observed: Observed, saved: Mapping[str, Any] | None) -> Applied:
        """Set our marks for `step.to_state`, then (drain, rma) evict the GPU pods."""
        node = observed.detail.get("node")
        for attempt in range(CONFLICT_RETRIES):
            if node is None or attempt:
                with _api(f"reading node {step.hostname}"):
                    node = self.client.get(Node, step.hostname)
            patch = self._patch(node, step)
            if patch is None:
                break
            try:
                with _api(f"patching node {step.hostname}"):
                    self.client.patch(Node, step.hostname, patch, patch_type=PatchType.STRATEGIC)
                break
            except TargetError as err:
                if isinstance(err.__cause__, ApiError) and err.__cause__.status.code == 409:
                    log.info("node %s changed under us (409); reading it again", step.hostname)
                    continue
                raise
        else:
            raise TargetError(f"node {step.hostname} kept changing: {CONFLICT_RETRIES} conflicts in a row")
        if step.to_state not in OUT_OF_SERVICE:
            return Applied("applied", forget_saved=step.to_state == "ok")
        return self._evict(step)

    def _patch(self, node: Any, step: Step) -> dict[str, Any] | None:
        """The strategic merge patch from the node as read to our marks for the step (None: nothing to do)."""
        meta, spec = node.metadata, node.spec
        labels, ann = meta.labels or {}, meta.annotations or {}
        to = step.to_state
        want_labels: dict[str, str | None] = {
            STATE_LABEL: None if to == "ok" else to,
            GPU_LABEL: None if to == "ok" else label_value(step.gpu_index),  # "unknown" for an unknown index
            RMA_LABEL: "true" if to == "rma" else None,
        }
        want_ann: dict[str, str | None] = {
            REASON_ANNOTATION: None if to == "ok" else printable(step.why)[:REASON_CHARS]
        }
        unschedulable = bool(spec and spec.unschedulable)
        ours_cordon = ann.get(CORDONED_ANNOTATION) == "true"
        cordon: bool | None = None
        if to in OUT_OF_SERVICE:
            if not unschedulable:
                cordon, want_ann[CORDONED_ANNOTATION] = True, "true"
            if step.from_state not in OUT_OF_SERVICE or ann.get(DRAIN_ANNOTATION) is None:
                want_ann[DRAIN_ANNOTATION] = "pending"
        else:
            want_ann[DRAIN_ANNOTATION] = None
            if ours_cordon:  # only a cordon we made is lifted; someone else's stays
                cordon, want_ann[CORDONED_ANNOTATION] = False, None
        taints = [t.to_dict() if hasattr(t, "to_dict") else dict(t) for t in (spec.taints or [])] if spec else []
        others = [t for t in taints if t.get("key") != DEMOTED_TAINT["key"]]
        want_taints = others + ([dict(DEMOTED_TAINT)] if SEVERITY[to] >= SEVERITY["demote"] else [])
        patch: dict[str, Any] = {"metadata": {"resourceVersion": meta.resourceVersion}}
        changed_labels = {k: v for k, v in want_labels.items() if labels.get(k) != v}
        changed_ann = {k: v for k, v in want_ann.items() if ann.get(k) != v}
        if changed_labels:
            patch["metadata"]["labels"] = changed_labels
        if changed_ann:
            patch["metadata"]["annotations"] = changed_ann
        spec_patch: dict[str, Any] = {}
        if _taint_keys(want_taints) != _taint_keys(taints):
            spec_patch["taints"] = want_taints  # NodeSpec.taints has no merge key: the list is replaced whole
        if cordon is not None and cordon != unschedulable:
            spec_patch["unschedulable"] = cordon
        if spec_patch:
            patch["spec"] = spec_patch
        return patch if changed_labels or changed_ann or spec_patch else None

    def _evict(self, step: Step) -> Applied:
        """Evict the node's GPU pods; a PodDisruptionBudget's 429 leaves the drain pending for the next pass."""
        waiting: list[str] = []
        for pod in self._pods_on(step.hostname):
            if not _uses_gpu(pod):
                continue
            name, ns = pod.metadata.name, pod.metadata.namespace
            eviction = Pod.Eviction(metadata=ObjectMeta(name=name, namespace=ns))
            try:
                with _api(f"evicting {ns}/{name}"):
                    self.client.create(eviction, name=name, namespace=ns)
            except TargetError as err:
                status = err.__cause__.status.code if isinstance(err.__cause__, ApiError) else None
                if status == 429:  # a disruption budget says not now: retried by a later pass, never forced
                    waiting.append(f"{ns}/{name}")
                elif status != 404:  # 404: gone already
                    raise
        state = "pending" if waiting else "complete"
        with _api(f"marking the drain of {step.hostname} {state}"):
            self.client.patch(
                Node, step.hostname, {"metadata": {"annotations": {DRAIN_ANNOTATION: state}}},
                patch_type=PatchType.STRATEGIC,
            )  # fmt: skip
        if waiting:
            note = f"{len(waiting)} GPU pod(s) wait for their PodDisruptionBudget: {', '.join(waiting[:10])}"
            return Applied("pending", note)
        return Applied("applied")

    def announce(self, step: Step, result: str, note: str | None) -> None:
        """A core/v1 Event on the node, as `kubectl describe node` shows them."""
        now = datetime.now(UTC)
        reason = "GpuHealth" + step.action.capitalize().replace("-", "")
        message = f"{step.from_state} → {step.to_state} ({result}): {step.why}" + (f"; {note}" if note else "")
        event = Event(
            metadata=ObjectMeta(name=f"{step.hostname}.gpuhealth.{now.strftime('%Y%m%d%H%M%S%f')}",
                                namespace=self.event_namespace),
            involvedObject=ObjectReference(kind="Node", name=step.hostname, apiVersion="v1"),
            reason=reason[:128],
            message=printable(message)[:1024],
            type="Warning" if SEVERITY[step.to_state] >= SEVERITY["drain"] else "Normal",
            source=EventSource(component="gpuhealth"),
            firstTimestamp=now,
            lastTimestamp=now,
            count=1,
        )  # fmt: skip
        with _api(f"recording an event for {step.hostname}"):
            self.client.create(event, namespace=self.event_namespace)


def _boot(node: Any) -> dict[str, Any]:
    """The node's bootID and readiness, as Observed.detail carries them."""
    status = node.status
    info = status.nodeInfo if status is not None else None
    conditions = (status.conditions or []) if status is not None else []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return {BOOT_ID: (info.bootID or None) if info is not None else None, READY: ready}


def _taint_keys(taints: list[dict[str, Any]]) -> list[tuple[Any, Any, Any]]:
    return sorted((t.get("key"), t.get("value"), t.get("effect")) for t in taints)
