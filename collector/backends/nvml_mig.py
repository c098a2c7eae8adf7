"""MIG under NVML: a GPU's MIG instances, and which catalogue fields NVML answers per instance.

A MIG device handle stands for one compute instance; dcgm-exporter labels per GPU instance
(`GPU_I_ID`, `GPU_I_PROFILE`), so the first MIG device of each GPU instance speaks for it (the
compute instances of one GPU instance share its memory). Handles are looked up on every read: NVML
invalidates them when an instance is destroyed or recreated, and may hand the same handle out again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from collector.backends.base import MigInstance
from collector.backends.nvml_common import codes, text

MIG_FIELDS = ("fb_free_mib", "fb_used_mib", "fb_total_mib")
"""What NVML answers per MIG instance: its memory (nvml.h, nvmlDeviceGetMemoryInfo: "Per-instance
information can be queried by using specific MIG device handles"). Not utilisation: "On MIG-enabled GPUs,
querying device utilization rates is not currently supported" (nvmlDeviceGetUtilizationRates); DCGM's
per-instance DCGM_FI_PROF_* fields are the way to it. Health fields (ECC, temperatures, PCIe, XID) are
the physical GPU's and stay on it."""

_PROFILE = re.compile(r"\bMIG (?:\d+c\.)?(\S+)\s*$")
"""NVML names a MIG device "<GPU name> MIG <profile>" (nvmlDeviceGetName: "MIG device names which can be
used to identify devices based on their attributes"; e.g. "NVIDIA A100-SXM4-40GB MIG 1g.5gb"). A compute
instance smaller than its GPU instance reads "MIG 1c.3g.20gb": the GPU instance's profile is "3g.20gb"."""


@dataclass(frozen=True)
class MigDevice:
    """One GPU instance as NVML shows it: a MIG device handle and its identity."""

    handle: Any
    instance: MigInstance


def profile_from_name(name: str) -> str:
    """The GPU instance profile in a MIG device's name ("" when the name has none)."""
    m = _PROFILE.search(name)
    return m.group(1) if m else ""


def mig_devices(nvml: Any, parent: Any) -> list[MigDevice] | None:
    """The GPU instances of GPU `parent`, by GPU instance ID; [] when MIG is off, None when the GPU
    (or this driver or nvidia-ml-py) has no MIG at all, which does not change while the driver is loaded.

    Other NVML errors (a lost GPU among them) are raised for the caller to sort out.
    """
    no_mig = codes(nvml, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(parent)
    except AttributeError:  # an nvidia-ml-py before MIG (11.450)
        return None
    except nvml.NVMLError as err:
        if err.value in no_mig:  # pre-Ampere GPUs: "If device doesn't support MIG mode"
            return None
        raise
    if current != nvml.NVML_DEVICE_MIG_ENABLE:
        return []
    # "NVML_ERROR_NOT_FOUND if no valid MIG device was found at index"; INVALID_ARGUMENT for an index
    # past the GPU's; NOT_SUPPORTED when MIG was switched off since the mode was read.
    empty = codes(nvml, "NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_SUPPORTED")
    found: dict[int, MigDevice] = {}
    for index in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(parent))):
        try:
            handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, index)
        except nvml.NVMLError as err:
            if err.value in empty:
                continue
            raise
        gi = int(nvml.nvmlDeviceGetGpuInstanceId(handle))
        if gi in found:  # another compute instance of a GPU instance already listed
            continue
        profile = profile_from_name(text(nvml.nvmlDeviceGetName(handle)))
        found[gi] = MigDevice(handle, MigInstance(gi, profile, text(nvml.nvmlDeviceGetUUID(handle))))
    return [found[gi] for gi in sorted(found)]
