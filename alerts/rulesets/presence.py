"""GPUs that stopped working or answering: a driver asking for recovery, a GPU off the bus, fewer GPUs."""

from __future__ import annotations

from alerts.model import Alert, Case, collector_target
from alerts.rulesets.common import G0, GROUP_GPU, INSTANCE, ON_GPU, VALUE, WHO, m

_NODE = collector_target()

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuRecoveryActionRequired",
        group=GROUP_GPU,
        expr=f"{m('recovery_action')} > 0",
        for_="1m",
        severity="critical",
        action="drain",
        summary=f"The driver asks for a GPU recovery on {ON_GPU}",
        description=f"{WHO} reports recovery action {VALUE} (1 reset, 2 reboot, 3 drain P2P, 4 drain and reset).",
        case=Case.single(m("recovery_action"), G0, "0x3 1x5", quiet_at="3m", fire_at="6m", value=1),
        meaning="The driver (R550+) decided the GPU needs a reset or the node a reboot to recover from an error.",
        check=("`nvidia-smi -q -i <gpu> | grep -i -A2 recovery` and the kernel log for the XID that caused it.",),
        act=("Drain the node and do what the code asks: reset the GPU (1, 4) or reboot the node (2).",),
    ),
    Alert(
        name="GpuLost",
        group=GROUP_GPU,
        expr="gpuhealth_gpu_lost == 1",
        for_="1m",
        severity="critical",
        action="drain",
        summary=f"GPU fell off the bus on {ON_GPU}",
        description=f"{WHO} stopped answering (NVML: GPU is lost, XID 79); its other metrics are gone.",
        case=Case.single("gpuhealth_gpu_lost", G0, "0x3 1x5", quiet_at="3m", fire_at="6m", value=1),
        meaning="The GPU disappeared from the PCIe bus. Every job on it has failed; the node needs a reboot "
        "(often a power cycle). Falling off the bus repeatedly is an RMA sign.",
        check=(
            "`nvidia-smi` (the GPU is missing or shows ERR!), `dmesg -T | grep -i -E 'xid|fallen off'`.",
            'How often it happened before: `gpuhealth_xid_errors_total{xid="79"}` and the API\'s history.',
        ),
        act=("Drain the node, power-cycle it, run `dcgmi diag -r 3` before resuming; RMA if it repeats.",),
    ),
    Alert(
        name="GpuCountDropped",
        group=GROUP_GPU,
        expr="gpuhealth_gpus < max_over_time(gpuhealth_gpus[1d])",
        for_="5m",
        severity="warning",
        action="drain",
        summary=f"Fewer GPUs answering on {INSTANCE}",
        description=f"{INSTANCE} answers with {VALUE} GPU(s), fewer than it had in the last day.",
        case=Case.single("gpuhealth_gpus", _NODE, "8x10 7x10", quiet_at="9m", fire_at="18m", value=7),
        meaning="A GPU the node had during the last day no longer answers (lost, or not enumerated after a "
        "reboot or driver reload).",
        check=("`nvidia-smi -L` on the node; GpuLost names the GPU when the collector still knows it.",),
        act=("Drain the node and reboot it; if the GPU stays missing, reseat or RMA it.",),
    ),
)
