"""Run probes in a child process with a timeout: a hung or crashing kernel never takes the caller down.

The child (`python -m kernels.probe_child`) prints one line per finished test,
``GPUHEALTH-PROBE {json}``, as soon as that test ends, so the tests finished before a hang
or a crash keep their results. The parent kills the child's whole process group when the
budget plus a grace period has passed, and fills in what is missing: the test that was
running becomes `error` (with the reason), the tests after it `skipped`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kernels import expected as exp

log = logging.getLogger(__name__)

PREFIX = "GPUHEALTH-PROBE "
"""Marks a result line on the child's stdout (CuPy or a driver may print other lines)."""
STATUSES = ("pass", "fail", "error", "skipped")
GRACE_S = 30.0
"""Time beyond the budget before the child is killed: CuPy's import and NVRTC compiling
the kernels on a cold cache take a few seconds each, and do not count as a hang."""
CUPY_MISSING = "CuPy not installed: pip install 'gpuhealth[cuda]'"
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ProbeResult:
    """One test's outcome on one GPU (the JSON the runner returns, one object per test)."""

    test: str
    status: str
    gpu_index: int = -1
    gpu_uuid: str = ""
    model_name: str = ""
    value: float | None = None
    unit: str = ""
    expected: float | None = None
    ratio: float | None = None
    """value / expected for the model (None when either is unknown)."""
    errors: int | None = None
    """Mismatches (GEMM, copy) or bit errors (memtest) found; None when not checked."""
    duration_s: float = 0.0
    ran_at: float = field(default_factory=time.time)
    """Unix time the test ended."""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"probe status must be one of {', '.join(STATUSES)}, not {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the `gpuhealth probe --json` contract)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeResult:
        """Rebuild a result from `to_dict()` output, ignoring unknown keys."""
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    def store_row(self) -> dict[str, Any]:
        """The row `Store.add_probe_results` takes (identity and errors go into details)."""
        details = {
            **self.details,
            "gpu_index": self.gpu_index,
            "model_name": self.model_name,
            "errors": self.errors,
        }
        return {
            "gpu_uuid": self.gpu_uuid,
            "ran_at": datetime.fromtimestamp(self.ran_at, UTC),
            "test": self.test,
            "status": self.status,
            "value": self.value,
            "unit": self.unit,
            "expected": self.expected,
            "ratio": self.ratio,
            "duration_s": self.duration_s,
            "details": details,
        }


def child_command(python: str | None = None) -> list[str]:
    """The real probe child: this interpreter running kernels.probe_child."""
    return [python or sys.executable, "-m", "kernels.probe_child"]


def _signal_name(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


def _tail(path: Path, max_chars: int = 600) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    short = " | ".join(lines[-4:])
    return short if len(short) <= max_chars else "..." + short[-max_chars:]


def run_probes(
    gpu_index: int,
    tests: Sequence[str],
    budget_s: float,
    *,
    gpu_uuid: str = "",
    model_name: str = "",
    command: Sequence[str] | None = None,
    grace_s: float = GRACE_S,
    inject: bool = False,
    baseline: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[ProbeResult]:
    """Run `tests` on one GPU in a child process; one result per test, in order, never raises
    for the child's trouble (a hang, a crash, garbage output all become `error` results)."""
    if budget_s <= 0:
        raise ValueError(f"probe budget must be positive, got {budget_s}")
    tests = list(tests)
    args = [
        *(command or child_command()),
        "--gpu-index", str(gpu_index),
        "--gpu-uuid", gpu_uuid,
        "--model", model_name,
        "--tests", ",".join(tests),
        "--budget", f"{budget_s:g}",
    ]  # fmt: skip
    if inject:
        args.append("--inject")
    if baseline:
        args.append("--baseline")
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONPATH", str(REPO_ROOT))
    child_env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's numbering = NVML's
    if gpu_uuid.startswith(("GPU-", "MIG-")):
        child_env["CUDA_VISIBLE_DEVICES"] = gpu_uuid  # the child sees only this GPU, as device 0
    timeout_s = budget_s + grace_s
    started = time.monotonic()
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gpuhealth-probe-") as tmp:
        err_path = Path(tmp) / "stderr"
        with err_path.open("wb") as err_file:
            try:
                proc = subprocess.Popen(
                    args,
                    stdout=subprocess.PIPE,
                    stderr=err_file,
                    stdin=subprocess.DEVNULL,
                    env=child_env,
                    start_new_session=True,  # its own process group: a kill takes its children too
                )
            except OSError as err:
                reason = f"cannot start the probe process {args[0]}: {err.strerror or err}"
                return _fill(tests, {}, reason, gpu_index, gpu_uuid, model_name)
            reader = threading.Thread(target=_read_lines, args=(proc, lines), daemon=True)
            reader.start()
            timed_out = False
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
            except BaseException:  # KeyboardInterrupt: never leave a kernel running behind us
                _kill_group(proc)
                raise
            reader.join(5.0)
        elapsed = time.monotonic() - started
        got = _parse(lines, tests)
        if timed_out:
            reason = (
                f"timed out after {elapsed:.0f}s (budget {budget_s:g}s + {grace_s:g}s grace): "
                "the kernel hung or ran past its budget; the probe process was killed"
            )
        elif proc.returncode != 0:
            tail = _tail(err_path)
            reason = f"probe process died ({_signal_name(proc.returncode)})" + (f": {tail}" if tail else "")
        else:
            tail = _tail(err_path)
            reason = "probe process exited without a result" + (f": {tail}" if tail else "")
    return _fill(tests, got, reason, gpu_index, gpu_uuid, model_name)


def _read_lines(proc: subprocess.Popen[bytes], out: list[str]) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:
        out.append(raw.decode(errors="replace"))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _parse(lines: Sequence[str], tests: Sequence[str]) -> dict[str, ProbeResult]:
    got: dict[str, ProbeResult] = {}
    for line in lines:
        if not line.startswith(PREFIX):
            continue
        try:
            result = ProbeResult.from_dict(json.loads(line[len(PREFIX) :]))
        except (ValueError, TypeError) as err:
            log.warning("ignoring a malformed probe result line (%s): %.200s", err, line)
            continue
        if result.test in tests:
            got[result.test] = result
    return got


def _fill(
    tests: Sequence[str],
    got: Mapping[str, ProbeResult],
    reason: str,
    gpu_index: int,
    gpu_uuid: str,
    model_name: str,
) -> list[ProbeResult]:
    """Results in test order: the child's where it gave one; the first missing test gets
    `reason` as an error (it was running), the ones after it are skipped."""
    out: list[ProbeResult] = []
    blamed = False
    for t in tests:
        r = got.get(t)
        if r is None:
            status, why = ("skipped", f"not run: {reason}") if blamed else ("error", reason)
            blamed = True
            r = ProbeResult(t, status, details={"reason": why})
        r.gpu_index, r.gpu_uuid = gpu_index, gpu_uuid or r.gpu_uuid
        r.model_name = model_name or r.model_name
        out.append(r)
    return out


def judge(result: ProbeResult, model_name: str) -> ProbeResult:
    """Fill in unit, expected and ratio; decide pass/fail from errors and the ratio."""
    result.unit = exp.UNITS[result.test]
    result.model_name = model_name
    if result.test == "memtest":
        result.expected = 0.0
    else:
        result.expected = exp.expected(model_name, result.test)
    if result.value is not None and result.expected:
        result.ratio = round(result.value / result.expected, 3)
    if result.status != "pass":
        return result
    reasons = []
    if result.errors:
        reasons.append(f"{result.errors} {'bit errors' if result.test == 'memtest' else 'mismatches'}")
    injected = result.details.get("injected")
    if injected is not None and result.details.get("injected_found") != injected:
        reasons.append(f"found {result.details.get('injected_found')} of {injected} injected faults")
    if result.ratio is not None and result.ratio < exp.MIN_RATIO:
        reasons.append(f"{result.value:g} {result.unit} is {result.ratio:.0%} of the {result.expected:g} expected")
    if reasons:
        result.status = "fail"
        result.details["reason"] = "; ".join(reasons)
    return result


def exit_code(results: Sequence[ProbeResult]) -> int:
    """0 when nothing failed, 1 when a probe failed or errored (the CLI's exit status)."""
    return 1 if any(r.status in ("fail", "error") for r in results) else 0
