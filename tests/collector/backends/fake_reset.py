"""A GPU reset in the NVML test double, and a stand-in for `nvidia-smi --gpu-reset` that performs it.

`reset_gpu` is what the driver does: it refuses while a process runs (NVML_ERROR_IN_USE, NVML's own
code) and cannot reach a GPU off the bus (NVML_ERROR_GPU_IS_LOST); otherwise the pending row remap
and pending page retirements are applied, the volatile ECC counters restart and the recovery action
goes back to none. `FakeNvidiaSmi` is an injectable runner that answers an nvidia-smi command line
with nvidia-smi's exit codes and messages (nvidia-smi(1) "RETURN VALUE"; the in-use message as printed
in NVIDIA/NVSentinel#1690 and NVIDIA/gpu-operator#118; the lost one as nvidia-smi prints it).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

import pynvml

from tests.collector.backends.fake_nvml import FakeNvml

p = pynvml
IN_USE_EXPLANATION = (
    "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA application,"
    " graphics application such as an X server, or a monitoring application such as another instance of"
    " nvidia-smi). Please first kill all processes using this device and all compute applications running in"
    " the system."
)
NOT_RESET = "The following GPUs could not be reset:"
LOST_ADVICE = "Reboot the system to recover this GPU"
SMI_OK, SMI_BAD_ARGS, SMI_NOT_FOUND, SMI_LOST, SMI_OTHER = 0, 2, 6, 15, 255
"""nvidia-smi's return codes: success, invalid argument, object not found, fallen off the bus, other error."""


def reset_gpu(fake: FakeNvml, index: int) -> None:
    """Reset GPU `index` of the double as the driver would, or raise the NVMLError it would."""
    gpu = fake.gpu(index)
    if gpu.lost:
        raise p.NVMLError(p.NVML_ERROR_GPU_IS_LOST)
    busy = [
        k
        for k in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses")
        if gpu.values.get((k,))
    ]
    if busy:
        raise p.NVMLError(p.NVML_ERROR_IN_USE)
    v = gpu.values
    if ("nvmlDeviceGetRemappedRows",) in v:  # the pending remap is applied: no longer pending
        corr, unc, _pending, failure = v[("nvmlDeviceGetRemappedRows",)]
        v[("nvmlDeviceGetRemappedRows",)] = (corr, unc, 0, failure)
    if ("nvmlDeviceGetRetiredPagesPendingStatus",) in v:
        v[("nvmlDeviceGetRetiredPagesPendingStatus",)] = 0
    for kind in (p.NVML_MEMORY_ERROR_TYPE_CORRECTED, p.NVML_MEMORY_ERROR_TYPE_UNCORRECTED):
        key = ("nvmlDeviceGetTotalEccErrors", kind, p.NVML_VOLATILE_ECC)
        if key in v:
            v[key] = 0  # volatile: since the last driver load or reset; the aggregate ones stay
    if ("field", p.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) in v:
        v[("field", p.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)] = (
            p.NVML_VALUE_TYPE_UNSIGNED_INT,
            p.NVML_GPU_RECOVERY_ACTION_NONE,
        )
    gpu.resets += 1


@dataclass
class FakeNvidiaSmi:
    """Runs `nvidia-smi --gpu-reset -i <UUID|index|bus id>` against a FakeNvml (a nvml_reset.Runner)."""

    fake: FakeNvml
    calls: list[tuple[list[str], float]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.calls.append((argv, timeout_s))
        if len(argv) != 4 or argv[1] not in ("-r", "--gpu-reset") or argv[2] not in ("-i", "--id"):
            return self._answer(
                argv, SMI_BAD_ARGS, "", "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
            )
        index = self._find(argv[3])
        if index is None:
            return self._answer(argv, SMI_NOT_FOUND, "", f"No devices were found matching {argv[3]}")
        bus = self.fake.gpu(index).pci_bus_id
        try:
            reset_gpu(self.fake, index)
        except p.NVMLError as err:
            if err.value == p.NVML_ERROR_GPU_IS_LOST:
                msg = f"Unable to determine the device handle for GPU {bus}: GPU is lost.  {LOST_ADVICE}"
                return self._answer(argv, SMI_LOST, "", msg)
            out = f"{NOT_RESET}\n  GPU {bus}: In use by another client\n\n{IN_USE_EXPLANATION}\n"
            return self._answer(argv, SMI_OTHER, out, "")
        return self._answer(argv, SMI_OK, f"GPU {bus} was successfully reset.\nAll done.\n", "")

    def _find(self, target: str) -> int | None:
        i = 0
        while True:
            try:
                g = self.fake.gpu(i)
            except IndexError:
                return None
            if target in (g.uuid, str(i), g.pci_bus_id):
                return i
            i += 1

    @staticmethod
    def _answer(argv: list[str], rc: int, out: str, err: str) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, rc, out, err)
