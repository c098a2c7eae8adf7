"""Run probes in a child process with a timeout: a hung or crashing kernel never takes the caller down.

The child (`python -m kernels.probe_child`) prints one line per finished test,
``GPUHEALTH-PROBE {json}``, as soon as that test ends, so the tests finished before a hang
or a crash keep their results. The child runs in its own process group; the parent kills
that whole group when the child exits, when the budget plus a grace period has passed, or
when the parent itself is interrupted, so nothing the child started outlives it. It then
fills in what is missing: the test that was running becomes `error` (with the reason), the
tests after it `skipped`. A result line of the wrong shape (not a JSON object, a field of
the wrong type) becomes an `error` too, never an exception.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import signal
import subprocess
import sys
import tempfile
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
        """The row `Probes.add` takes (identity and errors go into details)."""
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


_STRINGS = ("test", "status", "gpu_uuid", "model_name", "unit")
_NUMBERS = ("value", "expected", "ratio", "duration_s", "ran_at")
_INTEGERS = ("gpu_index", "errors")
_OPTIONAL = ("value", "expected", "ratio", "errors")


def invalid(result: ProbeResult) -> str | None:
    """What in `result` has the wrong type (a confused child's JSON), or None when all is well."""
    for name in (*_STRINGS, *_NUMBERS, *_INTEGERS):
        v = getattr(result, name)
        if v is None and name in _OPTIONAL:
            continue
        if name in _STRINGS:
            ok, want = isinstance(v, str), "a string"
        elif name in _NUMBERS:  # the child's contract: finite (it writes JSON with allow_nan=False)
            ok = isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
            want = "a finite number"
        else:
            ok, want = isinstance(v, numbers.Integral) and not isinstance(v, bool), "an integer"
        if not ok:
            return f"{name} must be {want}{' or null' if name in _OPTIONAL else ''}, not {v!r:.80}"
    if not isinstance(result.details, dict):
        return f"details must be an object, not {result.details!r:.80}"
    return None


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
    with tempfile.TemporaryDirectory(prefix="gpuhealth-probe-") as tmp:
        # Files, not pipes: a grandchild that escaped the kill and holds the child's stdout
        # cannot keep the parent waiting for an end-of-file, and nothing needs a reader thread.
        out_path, err_path = Path(tmp) / "stdout", Path(tmp) / "stderr"
        with out_path.open("wb") as out_file, err_path.open("wb") as err_file:
            try:
                proc = subprocess.Popen(
                    args,
                    stdout=out_file,
                    stderr=err_file,
                    stdin=subprocess.DEVNULL,
                    env=child_env,
                    start_new_session=True,  # its own process group: a kill takes its children too
                )
            except OSError as err:
                reason = f"cannot start the probe process {args[0]}: {err.strerror or err}"
                return _fill(tests, {}, reason, gpu_index, gpu_uuid, model_name)
            try:
                timed_out = not _exited(proc, timeout_s)
            finally:  # every way out, KeyboardInterrupt too: never leave a kernel running behind us
                _kill_group(proc)
        elapsed = time.monotonic() - started
        got, malformed = _parse(out_path.read_text(errors="replace").split("\n"), tests)
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
    if malformed:
        reason += f" ({len(malformed)} malformed result line(s) ignored; the first: {malformed[0]})"
    return _fill(tests, got, reason, gpu_index, gpu_uuid, model_name)


def _exited(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait up to `timeout_s` for the child to exit (True) without reaping it.

    Unreaped, its pid stays taken, and with it the id of its process group: the kill that
    follows cannot hit a stranger's group that got the id after the child was gone.
    """
    if not hasattr(os, "waitid"):  # macOS before Python 3.13: reap, as Popen.wait does
        try:
            proc.wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    deadline = time.monotonic() + timeout_s
    pause = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:  # reaped behind our back (SIGCHLD ignored): it is gone
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(2 * pause, 0.05)  # Popen.wait's own polling pace


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (the child and all it started), then reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the child was reaped and left nothing behind
        pass
    except PermissionError:
        proc.kill()
    proc.wait()


def _parse(lines: Sequence[str], tests: Sequence[str]) -> tuple[dict[str, ProbeResult], list[str]]:
    """The child's result per test asked for, and what was wrong with lines that name no test.

    A line for a test with a field of the wrong type becomes that test's `error` result.
    """
    got: dict[str, ProbeResult] = {}
    malformed: list[str] = []
    for line in lines:
        if not line.startswith(PREFIX):
            continue
        text = line[len(PREFIX) :].strip()
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            malformed.append(f"not JSON: {text:.80}")
            continue
        if not isinstance(data, dict):
            malformed.append(f"not a JSON object: {text:.80}")
            continue
        test = data.get("test")
        if not isinstance(test, str):
            malformed.append(f"no test name: {text:.80}")
            continue
        if test not in tests:
            continue
        try:
            result = ProbeResult.from_dict(data)
            problem = invalid(result)
        except (ValueError, TypeError) as err:  # a status not in STATUSES, a missing status
            problem = str(err)
        if problem is not None:
            log.warning("malformed result line for %s from the probe process (%s): %.200s", test, problem, text)
            result = ProbeResult(
                test, "error", details={"reason": f"malformed result from the probe process: {problem}"}
            )
        got[test] = result
    return got, malformed


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
    """Fill in unit, expected and ratio; decide pass/fail from errors and the ratio.

    A result with a field of the wrong type, or for an unknown test, comes back as `error`.
    """
    problem = invalid(result)
    if problem is None and result.test not in exp.UNITS:
        problem = f"unknown test {result.test!r}"
    if problem is not None:
        test = str(result.test)
        reason = f"invalid probe result: {problem}"
        return ProbeResult(
            test, "error", unit=exp.UNITS.get(test, ""), model_name=model_name, details={"reason": reason}
        )
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
