"""`dcgmi diag` as a probe, against a fake dcgmi that prints DCGM's JSON formats.

DCGM 4's shape follows testing/python3/dcgm_diag_schema.json in NVIDIA/DCGM ("DCGM Diagnostic", per-entity
results with entity_group, entity_id, status and warnings, a test_summary per test, entity_groups and
metadata); DCGM 3's ("DCGM GPU Diagnostic", gpu_ids) follows the results its own test scripts read. Nothing
here proves a real dcgmi prints exactly this: that needs a DCGM node.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from collector.backends.base import GpuInfo
from collector.dcgm_diag import TEST, DcgmDiagRunner, command, parse
from kernels.runner import ProbeResult
from tests.collector.backends.test_dcgm import Engine, make

GPU1 = GpuInfo(1, "GPU-11111111-test", "NVIDIA H100 80GB HBM3", "node-01")


def _gpu(entity_id: int, status: str, warnings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1, "entity_id": entity_id, "status": status}
    if warnings:
        r["warnings"] = warnings
    return r


def dcgm4(memory_on_gpu1: str = "Pass") -> dict[str, Any]:
    """`dcgmi diag -r 2 -j` of DCGM 4 on two GPUs."""
    failing = memory_on_gpu1 == "Fail"
    warn = {"error_category": 4, "error_id": 42, "error_severity": 2, "warning": "Memory test found 3 errors on GPU 1"}
    return {
        "DCGM Diagnostic": {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {"name": "software", "results": [_gpu(0, "Pass"), _gpu(1, "Pass")],
                         "test_summary": {"status": "Pass"}},
                    ],
                },
                {
                    "category": "Hardware",
                    "tests": [
                        {"name": "memory",
                         "results": [_gpu(0, "Pass"), _gpu(1, memory_on_gpu1, [warn] if failing else None)],
                         "test_summary": {"status": memory_on_gpu1}},
                        {"name": "pcie", "results": [_gpu(0, "Skip"), _gpu(1, "Pass")],
                         "test_summary": {"status": "Pass"}},
                        {"name": "cpu_eud", "results": [{"entity_group": "CPU", "entity_group_id": 7, "entity_id": 1,
                                                         "status": "Fail"}], "test_summary": {"status": "Fail"}},
                    ],
                },
            ]
        },
        "entity_groups": [
            {"entity_group": "GPU", "entity_group_id": 1, "entities": [
                {"entity_id": 0, "device_id": "2330", "serial_num": "1654123000001"},
                {"entity_id": 1, "device_id": "2330", "serial_num": "1654123000002"},
            ]},
        ],
        "metadata": {"version": "4.2.3", "Driver Version Detected": "570.86.15"},
    }  # fmt: skip


DCGM3 = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]},
            {"category": "Integration", "tests": [
                {"name": "PCIe", "results": [
                    {"gpu_ids": "0", "status": "Pass"},
                    {"gpu_ids": "1", "status": "Fail",
                     "warnings": [{"warning": "PCIe replay rate too high", "error_id": 17}]},
                ]},
            ]},
        ],
        "version": "3.3.9",
    }
}  # fmt: skip


def fake_dcgmi(tmp_path: Path, out: str, code: int = 0, sleep_s: float = 0.0) -> Path:
    """A dcgmi that records its arguments, prints `out` (after a line of chatter) and exits with `code`."""
    script = tmp_path / "dcgmi"
    (tmp_path / "out.json").write_text(out)
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, time, pathlib\n"
        f"here = pathlib.Path({str(tmp_path)!r})\n"
        "(here / 'argv.json').write_text(json.dumps(sys.argv[1:]))\n"
        f"time.sleep({sleep_s})\n"
        "print('Successfully ran diagnostic for group.')\n"
        "print((here / 'out.json').read_text())\n"
        f"sys.exit({code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


class NoCuda:
    name = "none"

    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []

    def run(self, gpu: GpuInfo, tests: Any, budget_s: float) -> list[ProbeResult]:
        self.asked.append(tuple(tests))
        return [ProbeResult(t, "pass") for t in tests]


def test_the_command_is_an_argument_list_naming_the_gpu_level_and_host() -> None:
    assert command(3, 1) == ["dcgmi", "diag", "-r", "1", "-i", "3", "-j"]
    assert command(0, 2, "nvidia-dcgm.gpu-operator.svc:5555") == [
        "dcgmi", "diag", "-r", "2", "-i", "0", "-j", "--host", "nvidia-dcgm.gpu-operator.svc:5555"
    ]  # fmt: skip


def test_dcgm4_results_of_this_gpu_decide() -> None:
    assert parse(json.dumps(dcgm4()), 1) == ("pass", {"checked": 3, "failed": []})
    status, details = parse(json.dumps(dcgm4("Fail")), 1)
    assert (status, details["failed"]) == ("fail", ["memory"])
    assert details["warnings"] == ["memory: Memory test found 3 errors on GPU 1"]
    assert parse(json.dumps(dcgm4("Fail")), 0)[0] == "pass"  # GPU 0's results, and the CPU's failure is not ours


def test_dcgm3_results_by_gpu_ids() -> None:
    assert parse(json.dumps(DCGM3), 0) == ("pass", {"checked": 2, "failed": []})
    status, details = parse(json.dumps(DCGM3), 1)
    assert (status, details["failed"], details["warnings"]) == ("fail", ["PCIe"], ["PCIe: PCIe replay rate too high"])


def test_a_runtime_error_or_no_json_is_an_error() -> None:
    assert parse(json.dumps({"DCGM Diagnostic": {"runtime_error": "Unable to connect to host engine"}}), 0) == (
        "error", {"reason": "Unable to connect to host engine"}
    )  # fmt: skip
    with pytest.raises(ValueError, match="no valid JSON"):
        parse("Error: unable to establish a connection to the specified host", 0)
    with pytest.raises(ValueError, match="no 'DCGM Diagnostic' or 'DCGM GPU Diagnostic' object"):
        parse('{"something": 1}', 0)


def test_the_runner_adds_the_diagnostic_after_the_cuda_probes(tmp_path: Path) -> None:
    dcgmi = fake_dcgmi(tmp_path, json.dumps(dcgm4("Fail")), code=226)  # dcgmi exits non-zero when a test fails
    inner = NoCuda()
    runner = DcgmDiagRunner(inner, 2, "nvidia-dcgm.gpu-operator.svc:5555", dcgmi=str(dcgmi))
    results = runner.run(GPU1, ("gemm", "memtest"), 60.0)
    assert inner.asked == [("gemm", "memtest")]
    assert [(r.test, r.status) for r in results] == [("gemm", "pass"), ("memtest", "pass"), (TEST, "fail")]
    diag = results[-1]
    assert (diag.gpu_index, diag.gpu_uuid, diag.errors) == (1, GPU1.uuid, 1)
    assert diag.details["level"] == 2 and diag.details["failed"] == ["memory"]
    assert json.loads((tmp_path / "argv.json").read_text()) == command(1, 2, "nvidia-dcgm.gpu-operator.svc:5555")[1:]
    assert diag.store_row()["test"] == TEST  # stored like the other probes' results


def test_missing_dcgmi_a_timeout_and_garbage_are_errors_never_exceptions(tmp_path: Path) -> None:
    missing = DcgmDiagRunner(NoCuda(), 1, dcgmi=str(tmp_path / "nowhere" / "dcgmi")).diagnose(GPU1)
    assert (missing.status, missing.errors) == ("error", None)
    assert "not found: install datacenter-gpu-manager" in missing.details["reason"]
    slow = DcgmDiagRunner(NoCuda(), 1, dcgmi=str(fake_dcgmi(tmp_path, "{}", sleep_s=5)), timeout_s=0.5)
    assert slow.diagnose(GPU1).details["reason"] == "dcgmi diag -r 1 ran past 0.5s"
    garbage = DcgmDiagRunner(NoCuda(), 1, dcgmi=str(fake_dcgmi(tmp_path, "oops", code=3))).diagnose(GPU1)
    assert garbage.status == "error" and "(exit 3)" in garbage.details["reason"]
    with pytest.raises(ValueError, match="level must be one of 1, 2"):
        DcgmDiagRunner(NoCuda(), 3)


def test_the_dcgm_backend_offers_it_only_when_asked() -> None:
    engine = Engine()
    assert make(engine).probe_runner().name == "cuda"
    b = make(engine, host="nvidia-dcgm.gpu-operator.svc:5555")
    b.diag_level = 1
    runner = b.probe_runner()
    assert isinstance(runner, DcgmDiagRunner)
    assert (runner.level, runner.host) == (1, "nvidia-dcgm.gpu-operator.svc:5555")
