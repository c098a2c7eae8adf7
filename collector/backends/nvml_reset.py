"""GPU reset on the NVML backend: what NVML says before a reset, and nvidia-smi to carry it out.

NVML has no public reset call: `nvidia-smi --gpu-reset -i <UUID>` is NVIDIA's tool for it. It runs
as an argument list with a timeout, never through a shell; its exit codes are the man page's
(0 success, 15 "the GPU has fallen off the bus", 255 other errors, among them "In use by another client").
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collector.backends.base import (
    BackendError,
    Generation,
    GpuInfo,
    GpuLostError,
    ResetFacts,
    ResetFailed,
)
from collector.backends.nvml_common import codes, link_absent_codes, one_line

if TYPE_CHECKING:
    from collector.backends.nvml import NvmlBackend

Runner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]
"""Runs an argument list with a timeout in seconds (raising subprocess.TimeoutExpired past it)."""

SMI_LOST = 15
"""nvidia-smi's return code 15: "The GPU has fallen off the bus or has otherwise become inaccessible"."""


def run_command(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run `argv` (no shell), its output captured; killed past `timeout_s`."""
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, check=False)


@dataclass(frozen=True)
class NvidiaSmi:
    """`nvidia-smi --gpu-reset` on one GPU, by path, with a timeout and an injectable runner."""

    path: str = "nvidia-smi"
    timeout_s: float = 120.0
    """A reset takes seconds; a hung one must not hold the node agent."""
    run: Runner = run_command

    def reset(self, target: str) -> str:
        """Reset the GPU `target` (UUID or PCI bus id); nvidia-smi's output on success, else ResetFailed
        (GpuLostError when nvidia-smi says the GPU is off the bus)."""
        argv = [self.path, "--gpu-reset", "-i", target]
        try:
            done = self.run(argv, self.timeout_s)
        except subprocess.TimeoutExpired as err:
            raise ResetFailed(f"{shlex.join(argv)} did not finish within {self.timeout_s:g}s") from err
        except OSError as err:
            raise ResetFailed(f"cannot run {self.path}: {err.strerror or err}") from err
        said = " ".join(f"{done.stdout or ''} {done.stderr or ''}".split())
        if done.returncode == SMI_LOST:
            raise GpuLostError(f"nvidia-smi: GPU {target} has fallen off the bus: {said}")
        if done.returncode != 0:
            raise ResetFailed(f"{shlex.join(argv)} exited {done.returncode}: {said or 'no output'}")
        return said


def generation(nvml: Any, arch: int) -> Generation:
    """nvmlDeviceGetArchitecture's answer in nvidia-smi's reset terms."""
    if arch == nvml.NVML_DEVICE_ARCH_UNKNOWN:
        return "unknown"
    if arch < nvml.NVML_DEVICE_ARCH_AMPERE:
        return "pre-ampere"
    if arch < nvml.NVML_DEVICE_ARCH_HOPPER:
        return "ampere"  # Ampere and Ada
    return "hopper+"


class NvmlReset:
    """Reset access to an NvmlBackend's GPUs (collector.backends.base.Resettable)."""

    def __init__(self, backend: NvmlBackend, smi: NvidiaSmi) -> None:
        self._backend = backend
        self.smi = smi
        self.name = backend.name

    def gpus(self) -> list[GpuInfo]:
        return self._backend.gpus()

    def reset_facts(self, gpu: GpuInfo) -> ResetFacts:
        index = gpu.index
        nvml, handle = self._backend.device(index)
        try:
            procs = [
                *nvml.nvmlDeviceGetComputeRunningProcesses(handle),
                *nvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
            ]
            gen = self._generation(nvml, handle)
            nvlink, nvswitch = self._links(nvml, handle)
        except nvml.NVMLError as err:
            if err.value in codes(nvml, "NVML_ERROR_GPU_IS_LOST"):
                raise GpuLostError(f"GPU {index} is lost: {one_line(err)}") from err
            raise BackendError(f"reading the processes and NVLink links of GPU {index}: {one_line(err)}") from err
        pids = tuple(sorted({int(getattr(p, "pid", -1)) for p in procs}))
        return ResetFacts(processes=pids, generation=gen, nvlink=nvlink, nvswitch=nvswitch)

    def reset_gpu(self, gpu: GpuInfo) -> str:
        return self.smi.reset(gpu.uuid)  # the UUID: indices can change order between boots (nvidia-smi(1))

    @staticmethod
    def _generation(nvml: Any, handle: Any) -> Generation:
        try:
            return generation(nvml, int(nvml.nvmlDeviceGetArchitecture(handle)))
        except nvml.NVMLError as err:
            if err.value in codes(nvml, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"):
                return "unknown"
            raise

    @staticmethod
    def _links(nvml: Any, handle: Any) -> tuple[bool, bool]:
        """(any active NVLink link, any link to an NVSwitch)."""
        absent = link_absent_codes(nvml)
        nvlink = nvswitch = False
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                if nvml.nvmlDeviceGetNvLinkState(handle, link) != nvml.NVML_FEATURE_ENABLED:
                    continue
            except nvml.NVMLError as err:
                if err.value in absent:  # past the GPU's links, or no NVLink at all
                    continue
                raise
            nvlink = True
            try:
                remote = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            except nvml.NVMLError as err:
                if err.value in absent:
                    continue
                raise
            nvswitch = nvswitch or remote == nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
        return nvlink, nvswitch
