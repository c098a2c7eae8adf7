"""An optional kustomize Component: the collector may ask kured for a node reboot (collector/reboot.py).

Not part of deploy/kubernetes/'s objects, so nothing changes unless an overlay adds it. It gives the
collector a folder of the host to write kured's sentinel in and names the file (the setting
`reboot_sentinel`). The folder is one of our own, /run/gpuhealth, not the host's whole /var/run: that
one also holds the container runtime's socket (containerd.sock, docker.sock), which the collector's
uid 0 could then drive. kured is then told to look there too, with its `--reboot-sentinel-command`
(run in the host's mount namespace; a zero exit means "reboot"), keeping apt's /var/run/reboot-required.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core import generated
from manifests import config as c

SENTINEL_DIR = "/run/gpuhealth"
"""On the host, and at the same path in the collector: a tmpfs, so a reboot removes the sentinel."""
SENTINEL = f"{SENTINEL_DIR}/reboot-required"
VOLUME = "reboot-sentinel"
ENV = "GPUHEALTH_REBOOT_SENTINEL"
"""The setting `reboot_sentinel` (core/settings.py)."""
KURED_SENTINEL_COMMAND = f'sh -c "test -f /var/run/reboot-required || test -f {SENTINEL}"'
"""kured's flag --reboot-sentinel-command for this component: apt's sentinel or ours."""
OUT = c.OUT_DIR / "components" / "kured-sentinel" / "kustomization.yaml"

HEADER = f"""\
# Generated from manifests/kured.py by `gpuhealth deploy build`; do not edit by hand.
# Optional: lets the collector ask kured (kubereboot/kured) for a node reboot (docs/actuation.md).
# deploy/kubernetes/ does not include it; an overlay does:
#
#   resources: [../gpuhealth/deploy/kubernetes]
#   components: [../gpuhealth/deploy/kubernetes/components/kured-sentinel]
#
# It mounts the host's {SENTINEL_DIR} (created if missing) in the collector, read-write, and sets
# {ENV}={SENTINEL}. kured must then look there as well:
#
#   --reboot-sentinel-command={KURED_SENTINEL_COMMAND}
#
# (kured runs that command in the host's mount namespace, as its own manifest allows: hostPID and
# privileged; with a command set, kured ignores --reboot-sentinel, hence apt's file in the command.)
# Or keep kured's default (--reboot-sentinel, /var/run/reboot-required) and mount the host's /var/run
# instead, with {ENV}=<its mount>/reboot-required: that folder also holds the container runtime's
# socket, which the collector (uid 0) could then use.
"""


def component() -> dict[str, Any]:
    """The Component: a JSON patch of the collector's DaemonSet (a volume, its mount in the first and only
    container, the setting)."""
    pod = "/spec/template/spec"
    ops = [
        {
            "op": "add",
            "path": f"{pod}/volumes/-",
            "value": {"name": VOLUME, "hostPath": {"path": SENTINEL_DIR, "type": "DirectoryOrCreate"}},
        },
        {
            "op": "add",
            "path": f"{pod}/containers/0/volumeMounts/-",
            "value": {"name": VOLUME, "mountPath": SENTINEL_DIR},
        },
        {"op": "add", "path": f"{pod}/containers/0/env/-", "value": {"name": ENV, "value": SENTINEL}},
    ]
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "patches": [{"target": {"kind": "DaemonSet", "name": c.COLLECTOR}, "patch": generated.to_yaml(ops)}],
    }


def outputs() -> dict[Path, str]:
    """The component's file (relative to the repository root) and its text."""
    return {OUT: HEADER + generated.to_yaml(component())}
