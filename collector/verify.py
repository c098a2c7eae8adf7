"""Verifying one GPU after a remedy: the project's verified probes on that GPU, now, or a reason why not.

NVIDIA's nvidia-smi(1) says of a reset: "it is recommended that the health of each reset GPU be
verified before further use". The node agent does it when the service asks (`do = "verify"`,
`collector.remediate`): the same probes and thresholds as the probe scheduler (`collector.probes`,
GPUHEALTH_PROBE_TESTS and _BUDGET; pass/fail from `kernels.expected`), through the backend's own
runner; on the dcgm backend DCGM's diagnostic follows at level 2 (`dcgmi diag -r 2`), whatever
GPUHEALTH_PROBE_DCGM_DIAG says for the scheduler.

A GPU that is busy by the scheduler's own idle check is refused, as are GPUs this backend cannot
probe (replay; real GPUs without CuPy): refused means nothing ran, so the service may ask again.
Done only when every probe that ran passed; a probe that did not run (`skipped`: no yardstick for the
model, or an earlier one hung) is named in the detail but is no verdict either way.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Callable

from collector.backends.base import Backend, GpuInfo, ProbeRunner
from collector.dcgm_diag import DcgmDiagRunner
from collector.probes import ProbeConfig, SubprocessProbeRunner, busy_reason
from core.remedies import DETAIL_CHARS, ProbeResult, RemedyReport, ReportResult
from kernels.runner import CUPY_MISSING
from kernels.runner import ProbeResult as Probe

log = logging.getLogger(__name__)

DCGM_LEVEL = 2
"""`dcgmi diag -r 2` (medium: PCIe, memory, a short stress), as issue 57 asks of a verification."""


def verify_runner(backend: Backend) -> ProbeRunner | None:
    """The runner a verification uses: the backend's own, with `dcgmi diag -r 2` after the probes on dcgm;
    None when the backend's GPUs cannot be probed."""
    runner = backend.probe_runner()
    if runner is None:
        return None
    if isinstance(runner, DcgmDiagRunner):
        return (
            runner
            if runner.level >= DCGM_LEVEL
            else DcgmDiagRunner(runner.inner, DCGM_LEVEL, runner.host, runner.dcgmi)
        )
    if backend.name == "dcgm":
        return DcgmDiagRunner(runner, DCGM_LEVEL, getattr(backend, "host", None))
    return runner


def cannot_probe(backend: Backend, runner: ProbeRunner | None) -> str | None:
    """Why no verification can run on this backend's GPUs at all; None when it can."""
    if runner is None:
        return f"the {backend.name} backend's GPUs cannot be probed"
    inner = runner.inner if isinstance(runner, DcgmDiagRunner) else runner
    if isinstance(inner, SubprocessProbeRunner) and inner.command is None and importlib.util.find_spec("cupy") is None:
        return CUPY_MISSING
    return None


class Verifier:
    """Runs the verified probes on one idle GPU now; each call ends in a `verify` RemedyReport."""

    def __init__(
        self,
        backend: Backend,
        runner: ProbeRunner | None,
        config: ProbeConfig,
        *,
        fallback_util: Callable[[str], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.runner = runner
        self.config = config
        self.fallback_util = fallback_util
        """The GPU's utilisation from the latest sample, for backends that cannot tell by themselves (DCGM)."""
        self._clock = clock

    def verify(self, gpu: GpuInfo) -> RemedyReport:
        """Probe `gpu` if it is idle; never raises for the GPU's trouble (a runner's failure is `failed`)."""
        start = self._clock()
        result, detail, probes = self._attempt(gpu)
        took = round(self._clock() - start, 3)
        level = logging.WARNING if result == "failed" else logging.INFO
        log.log(level, "verification of GPU %d (%s): %s (%s) in %.1fs", gpu.index, gpu.uuid, result, detail, took)
        return RemedyReport("verify", result, detail, gpu.uuid, took, probes)

    def _attempt(self, gpu: GpuInfo) -> tuple[ReportResult, str, tuple[ProbeResult, ...]]:
        why = cannot_probe(self.backend, self.runner)
        if why is not None:
            return "refused", why, ()
        assert self.runner is not None
        busy = busy_reason(self.backend, gpu, self.config.idle_util_pct, self.fallback_util)
        if busy is not None:
            return "refused", f"the GPU is not idle: {busy}", ()
        try:
            ran = self.runner.run(gpu, self.config.tests, self.config.budget_s)
        except Exception as err:  # a runner bug is a failed verification, not a dead agent
            log.exception("probe runner %s failed on GPU %d", self.runner.name, gpu.index)
            return "failed", f"the probe runner failed: {err}", ()
        probes = tuple(ProbeResult(r.test, r.status == "pass", probe_line(r)) for r in ran if r.status != "skipped")
        not_run = [r.test for r in ran if r.status == "skipped"]
        bad = [p.probe for p in probes if not p.passed]
        tail = f"; not run: {', '.join(not_run)}" if not_run else ""
        if not probes:
            return "failed", f"no probe ran{tail}", probes
        if bad:
            return "failed", f"{', '.join(bad)} did not pass{tail}", probes
        return "done", f"{', '.join(p.probe for p in probes)} passed{tail}", probes


def probe_line(r: Probe) -> str:
    """One probe's outcome in one line: status, value against expected, errors, reason."""
    parts = [r.status]
    if r.value is not None:
        parts.append(f"{r.value:g} {r.unit}".strip())
    if r.ratio is not None:
        parts.append(f"{r.ratio:.0%} of expected")
    if r.errors:
        parts.append(f"{r.errors} error(s)")
    reason = r.details.get("reason")
    if reason:
        parts.append(" ".join(str(reason).split()))
    return ", ".join(parts)[:DETAIL_CHARS]  # the service takes no longer detail
