"""DCGM's own diagnostic as a probe: `dcgmi diag -r 1|2 -i <gpu> -j`, where the dcgm backend runs.

Level 1 (quick: deployment and software checks, seconds) or 2 (medium: adds PCIe, memory and a short
stress, a minute or two per GPU) runs inside nv-hostengine, local or remote (`--host`, the backend's
address), so the collector needs only the `dcgmi` binary. It runs after the CUDA probes of an idle GPU,
as an argument list with a timeout, and becomes one more `ProbeResult` (test `dcgm_diag`): stored by the
service and exported as `gpuhealth_probe_*{test="dcgm_diag"}` like the others.

dcgmi prints JSON with `-j`: DCGM 4 under "DCGM Diagnostic" with per-entity results
(`entity_group`, `entity_id`, `status`, `warnings`; testing/python3/dcgm_diag_schema.json in NVIDIA/DCGM),
DCGM 3 under "DCGM GPU Diagnostic" with `gpu_ids`. A result whose status is "Fail" fails the probe;
"Pass", "Skip", "Warn" and "Not Run" do not. No JSON, a `runtime_error` or a timeout is an `error`.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from collector.backends.base import GpuInfo, ProbeRunner
from kernels.runner import ProbeResult

TEST = "dcgm_diag"
TIMEOUT_S = {1: 300.0, 2: 1200.0}
"""Per level: DCGM's quick run takes seconds, its medium one minutes; beyond this the run is killed."""
ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
"""The top-level key of `dcgmi diag -j`: DCGM 4, then DCGM 3 and earlier."""


def command(gpu_index: int, level: int, host: str | None = None, dcgmi: str = "dcgmi") -> list[str]:
    """The argument list of one run on one GPU (no shell)."""
    return [dcgmi, "diag", "-r", str(level), "-i", str(gpu_index), "-j", *(["--host", host] if host else [])]


def _applies(result: dict[str, Any], gpu_index: int) -> bool:
    """Whether a result is about this GPU (a result naming no entity applies to all)."""
    if "entity_id" in result:
        return result.get("entity_group", "GPU") == "GPU" and result["entity_id"] == gpu_index
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None:
        return True
    return str(gpu_index) in {s.strip() for s in str(ids).split(",")}


def _root(text: str) -> dict[str, Any]:
    """The diagnostic object of dcgmi's output (it may print a line before the JSON); ValueError without one."""
    start = text.find("{")
    try:
        data = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as err:
        raise ValueError(f"dcgmi diag printed no valid JSON: {err}") from None
    if data is None:
        raise ValueError("dcgmi diag printed no valid JSON")
    root = next((data[k] for k in ROOTS if isinstance(data, dict) and isinstance(data.get(k), dict)), None)
    if root is None:
        raise ValueError(f"dcgmi diag printed no {' or '.join(repr(k) for k in ROOTS)} object")
    return dict(root)


def parse(text: str, gpu_index: int) -> tuple[str, dict[str, Any]]:
    """(status, details) of one run's JSON output; ValueError when there is no diagnostic in it."""
    root = _root(text)
    if root.get("runtime_error"):
        return "error", {"reason": str(root["runtime_error"])}
    failed: list[str] = []
    warnings: list[str] = []
    checked = 0
    for category in root.get("test_categories") or []:
        for test in category.get("tests") or []:
            name = str(test.get("name", "?"))
            for result in test.get("results") or []:
                if not isinstance(result, dict) or not _applies(result, gpu_index):
                    continue
                checked += 1
                if str(result.get("status", "")).strip().lower() == "fail":
                    failed.append(name)
                warnings += [f"{name}: {w.get('warning', w)}" for w in result.get("warnings") or []]
    details: dict[str, Any] = {"checked": checked, "failed": failed}
    if warnings:
        details["warnings"] = warnings
    return ("fail" if failed else "pass"), details


class DcgmDiagRunner:
    """The CUDA probes of `inner`, then DCGM's diagnostic at `level` on the same GPU."""

    name = "cuda+dcgm-diag"

    def __init__(
        self, inner: ProbeRunner, level: int, host: str | None = None, dcgmi: str = "dcgmi",
        timeout_s: float | None = None,
    ) -> None:  # fmt: skip
        if level not in TIMEOUT_S:
            raise ValueError(f"dcgmi diag level must be one of {', '.join(map(str, TIMEOUT_S))}, not {level}")
        self.inner, self.level, self.host, self.dcgmi = inner, level, host, dcgmi
        self.timeout_s = timeout_s if timeout_s is not None else TIMEOUT_S[level]

    def run(self, gpu: GpuInfo, tests: Sequence[str], budget_s: float) -> list[ProbeResult]:
        results = self.inner.run(gpu, tests, budget_s) if tests else []
        return [*results, self.diagnose(gpu)]

    def diagnose(self, gpu: GpuInfo) -> ProbeResult:
        """One run of dcgmi diag on `gpu`; never raises (a problem is an `error` result)."""
        argv = command(gpu.index, self.level, self.host, self.dcgmi)
        started = time.monotonic()
        details: dict[str, Any] = {"level": self.level}
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError:
            status, details["reason"] = "error", f"{self.dcgmi} not found: install datacenter-gpu-manager"
        except subprocess.TimeoutExpired:
            status, details["reason"] = "error", f"dcgmi diag -r {self.level} ran past {self.timeout_s:g}s"
        except OSError as err:
            status, details["reason"] = "error", f"running {self.dcgmi}: {err}"
        else:
            status = self._read(proc, gpu.index, details)
        failed = details.get("failed")
        return ProbeResult(
            TEST, status, gpu_index=gpu.index, gpu_uuid=gpu.uuid, model_name=gpu.model_name,
            errors=len(failed) if isinstance(failed, list) else None,
            duration_s=round(time.monotonic() - started, 3), details=details,
        )  # fmt: skip

    @staticmethod
    def _read(proc: subprocess.CompletedProcess[str], gpu_index: int, details: dict[str, Any]) -> str:
        """The status of a finished run, its findings into `details` (dcgmi exits non-zero when a test fails)."""
        try:
            status, found = parse(proc.stdout, gpu_index)
        except ValueError as err:
            last = (proc.stderr.strip().splitlines() or [""])[-1]
            details["reason"] = f"{err} (exit {proc.returncode}{': ' + last if last else ''})"
            return "error"
        details.update(found)
        return status
