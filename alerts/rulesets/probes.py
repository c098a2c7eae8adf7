"""Active probes: a GPU that computes wrong results, or runs below its model's speed."""

from __future__ import annotations

from alerts.model import Alert, Case, gpu_labels
from alerts.rulesets.common import GROUP_PREDICTION, HOST, WHO, label

PROBE_PASSED = "gpuhealth_probe_passed"
TEST = label("test")

ALERTS: tuple[Alert, ...] = (
    Alert(
        name="GpuProbeFailed",
        group=GROUP_PREDICTION,
        expr=f'{PROBE_PASSED}{{test=~"gemm|memtest"}} == 0',
        for_="0m",
        severity="critical",
        action="drain",
        summary=f"GPU computed wrong results in the {TEST} probe on {HOST}",
        description=f"{WHO} failed the {TEST} probe: its results did not match the reference (silent data corruption).",
        case=Case.single(PROBE_PASSED, gpu_labels(0, test="gemm"), "1x5 0x5", quiet_at="4m", fire_at="7m", value=0),
        meaning="A verified GEMM or memory test produced wrong data. A GPU that computes wrong results "
        "silently poisons training runs; it must not take work.",
        check=(
            "The probe's errors: `gpuhealth_probe_errors` on the GPU detail dashboard; rerun `dcgmi diag -r 3 "
            "-i <gpu>` (or `gpu-burn`) to confirm.",
        ),
        act=("Drain the node; if the failure repeats after a reset, RMA the GPU.",),
    ),
    Alert(
        name="GpuProbeDegraded",
        group=GROUP_PREDICTION,
        expr=f'{PROBE_PASSED}{{test=~"bandwidth|pcie"}} == 0',
        for_="0m",
        severity="warning",
        action="demote",
        summary=f"GPU below expected speed in the {TEST} probe on {HOST}",
        description=f"{WHO} failed the {TEST} probe (bandwidth below the model's expectation).",
        case=Case.single(PROBE_PASSED, gpu_labels(0, test="pcie"), "1x5 0x5", quiet_at="4m", fire_at="7m", value=0),
        meaning="Memory or host-link bandwidth is below what the model should deliver: a downtrained link, "
        "throttling, or degraded memory.",
        check=("`gpuhealth_probe_ratio` (measured / expected) on the GPU detail dashboard; the PCIe link panel.",),
        act=("Demote; check link width/generation and throttling, reseat in the next maintenance window.",),
    ),
)
