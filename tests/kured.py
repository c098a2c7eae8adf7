"""A stand-in for kured (kubereboot/kured 1.23, cmd/kured/main.go) over the API server of tests/kube_api.py.

What kured does on each node, as its source and docs say, and what this stand-in does the same way:
- it reboots when its sentinel file exists (`--reboot-sentinel`, default /var/run/reboot-required); only the
  file's presence counts;
- it takes a cluster-wide lock first (one node at a time: `--concurrency` 1), and records in the lock whether
  the node was already unschedulable (`spec.unschedulable`) when it took it;
- it cordons the node (a patch of `spec.unschedulable`), then drains it as `kubectl drain` does: every pod but
  DaemonSet pods is evicted through the Eviction API, so PodDisruptionBudgets hold;
- if the drain fails, it releases the lock and uncordons the node "best effort" — whatever the lock recorded;
- otherwise it reboots; /var/run is a tmpfs, so the sentinel is gone after the reboot;
- when its pod starts again (after the reboot) and finds it holds the lock, it uncordons the node only if the
  node was schedulable when the lock was taken, then releases the lock.

Simplifications: the lock lives here, not in the annotation `weave.works/kured-node-lock` of kured's DaemonSet
(the fixture serves no DaemonSets); a 429 from a PodDisruptionBudget fails the drain at once, as it does when
`--drain-timeout` has run out (with the default, 0, kured waits for the budget); no reboot window, no blocking
pods or alerts, no `--period`: a test calls `check` where kured's tick would come.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import lightkube
from lightkube import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from tests.kube_api import KubeApiServer

SENTINEL = "reboot-required"
"""kured's default sentinel, /var/run/reboot-required, under each node's /var/run."""


@dataclass(frozen=True)
class Lock:
    """kured's lock: who holds it, and whether that node was unschedulable when it was taken."""

    node: str
    unschedulable: bool


class Kured:
    """kured on every node of `server`; `run_dirs` is each node's /var/run (a tmpfs: a reboot empties it)."""

    def __init__(self, server: KubeApiServer, client: lightkube.Client, run_dirs: dict[str, Path]) -> None:
        self.server = server
        self.client = client
        self.run_dirs = run_dirs
        self.lock: Lock | None = None

    def check(self, node: str) -> Literal["not required", "locked", "drain failed", "rebooting"]:
        """One sentinel check on `node`; on "rebooting" the node is down until `boot`."""
        if not (self.run_dirs[node] / SENTINEL).exists():
            return "not required"
        obj = self.client.get(Node, node)
        if self.lock is not None and self.lock.node != node:
            return "locked"
        if self.lock is None:
            self.lock = Lock(node, bool(obj.spec and obj.spec.unschedulable))
        self._cordon(node, True)
        if not self._drain(node):
            self.lock = None
            self._cordon(node, False)  # kured's best-effort uncordon after a failed drain
            return "drain failed"
        self.server.set_node_ready(node, "Unknown")  # the kubelet goes silent
        for f in self.run_dirs[node].iterdir():  # a tmpfs does not outlive the boot
            f.unlink()
        return "rebooting"

    def boot(self, node: str, *, ready: str = "True") -> str:
        """The node is up again (a new bootID) and kured's pod starts on it; returns the new bootID."""
        boot_id = self.server.reboot_node(node, ready=ready)
        self.start(node)
        return boot_id

    def start(self, node: str) -> None:
        """kured's pod starting on `node`: holding the lock means it rebooted the node; it uncordons only a node
        that was schedulable when it took the lock, then lets the lock go."""
        if self.lock is None or self.lock.node != node:
            return
        if not self.lock.unschedulable:
            self._cordon(node, False)
        self.lock = None

    def _cordon(self, node: str, on: bool) -> None:
        self.client.patch(Node, node, {"spec": {"unschedulable": on}}, patch_type=PatchType.STRATEGIC)

    def _drain(self, node: str) -> bool:
        """Evict every pod on the node but DaemonSet pods (kured's --ignore-daemonsets); False on a 429."""
        for pod in self.client.list(Pod, namespace="*", fields={"spec.nodeName": node}):
            meta = pod.metadata
            assert meta is not None and meta.name is not None and meta.namespace is not None
            if any(ref.kind == "DaemonSet" for ref in meta.ownerReferences or []):
                continue
            eviction = Pod.Eviction(metadata=ObjectMeta(name=meta.name, namespace=meta.namespace))
            try:
                self.client.create(eviction, name=meta.name, namespace=meta.namespace)
            except ApiError as err:
                if err.status.code == 429:
                    return False
                if err.status.code != 404:
                    raise
        return True
