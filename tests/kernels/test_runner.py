"""The runner survives hung, crashing and confused probe processes (real stand-in children)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from kernels.runner import CUPY_MISSING, PREFIX, ProbeResult, child_command, exit_code, run_probes

TESTS = ["gemm", "memtest", "bandwidth"]


def stand_in(tmp_path: Path, body: str) -> list[str]:
    """A child process running `body` (with `emit(test, status)` and `args` available)."""
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, os, sys, time
            args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
            def emit(test, status="pass", **kw):
                print({PREFIX!r} + json.dumps({{"test": test, "status": status, **kw}}), flush=True)
            """
        )
        + textwrap.dedent(body)
    )
    return [sys.executable, str(script)]


def test_a_hung_kernel_times_out_and_keeps_the_results_before_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    cmd = stand_in(
        tmp_path,
        f"""
        open({str(pid_file)!r}, "w").write(str(os.getpid()))
        emit("gemm", value=400.0, unit="TFLOP/s")
        time.sleep(3600)  # memtest hangs
        """,
    )
    results = run_probes(0, TESTS, budget_s=0.5, grace_s=0.5, command=cmd, gpu_uuid="GPU-x", model_name="M")
    assert [(r.test, r.status) for r in results] == [("gemm", "pass"), ("memtest", "error"), ("bandwidth", "skipped")]
    assert results[0].value == 400.0
    assert "timed out" in results[1].details["reason"]
    assert "not run" in results[2].details["reason"]
    assert all((r.gpu_uuid, r.model_name, r.gpu_index) == ("GPU-x", "M", 0) for r in results)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed, and reaped: not even a zombie
        os.kill(pid, 0)


def test_a_grandchild_is_killed_with_the_child(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild"
    cmd = stand_in(
        tmp_path,
        f"""
        import subprocess
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        open({str(pid_file)!r}, "w").write(str(p.pid))
        time.sleep(3600)
        """,
    )
    results = run_probes(0, ["gemm"], budget_s=0.5, grace_s=1.0, command=cmd)
    assert results[0].status == "error"
    pid = int(pid_file.read_text())
    # The grandchild was in the killed process group; once init reaps it, it is gone.
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        import time

        time.sleep(0.05)
    else:
        pytest.fail(f"grandchild {pid} survived the timeout kill")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("import os; emit('gemm'); os.abort()", "signal SIGABRT"),
        ("import ctypes; emit('gemm'); ctypes.string_at(0)", "signal SIGSEGV"),
        (
            "emit('gemm'); sys.stderr.write('cudaErrorIllegalAddress: boom\\n'); sys.exit(3)",
            "(exit status 3): cudaErrorIllegalAddress",
        ),
    ],
    ids=["abort", "segfault", "exit-3"],
)
def test_a_crashing_probe_becomes_an_error_result(tmp_path: Path, body: str, needle: str) -> None:
    results = run_probes(1, TESTS, budget_s=30, command=stand_in(tmp_path, body))
    assert [r.status for r in results] == ["pass", "error", "skipped"]
    assert needle in results[1].details["reason"]
    assert exit_code(results) == 1


def test_garbage_and_unknown_lines_are_ignored(tmp_path: Path) -> None:
    body = f"""
    print("CuPy warning: something")
    print({PREFIX!r} + "{{not json")
    print({PREFIX!r} + json.dumps({{"test": "gemm", "status": "bogus"}}))
    emit("pcie")  # not asked for
    emit("memtest", "fail", errors=3)
    """
    results = run_probes(0, ["gemm", "memtest"], budget_s=30, command=stand_in(tmp_path, body))
    assert [(r.test, r.status) for r in results] == [("gemm", "error"), ("memtest", "fail")]
    assert "exited without a result" in results[0].details["reason"]
    assert results[1].errors == 3


def test_the_child_gets_the_gpu_and_the_budget(tmp_path: Path) -> None:
    body = """
    emit("gemm", details={"args": args, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                          "order": os.environ.get("CUDA_DEVICE_ORDER")})
    """
    (r,) = run_probes(2, ["gemm"], budget_s=12, command=stand_in(tmp_path, body), gpu_uuid="GPU-abc", inject=True)
    assert r.details["args"]["--gpu-index"] == "2" and r.details["args"]["--budget"] == "12"
    assert r.details["args"]["--tests"] == "gemm"
    assert r.details["visible"] == "GPU-abc" and r.details["order"] == "PCI_BUS_ID"


def test_a_missing_program_is_an_error_not_an_exception(tmp_path: Path) -> None:
    (r,) = run_probes(0, ["gemm"], budget_s=1, command=[str(tmp_path / "no-such-program")])
    assert r.status == "error" and "cannot start" in r.details["reason"]


def test_the_real_child_without_cupy_says_how_to_install_it() -> None:
    pytest.importorskip("numpy")
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed here: the missing-CuPy path cannot be shown")
    except ImportError:
        pass
    results = run_probes(0, ["gemm", "pcie"], budget_s=5, command=child_command())
    assert [r.status for r in results] == ["error", "error"]
    assert all(r.details["reason"] == CUPY_MISSING for r in results)
    assert [r.unit for r in results] == ["TFLOP/s", "GB/s"]


def test_results_round_trip_as_json_and_store_rows() -> None:
    r = ProbeResult("gemm", "pass", 0, "GPU-1", "NVIDIA H200", value=500.0, unit="TFLOP/s", errors=0, ran_at=1e9)
    assert ProbeResult.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    row = r.store_row()
    assert set(row) == {
        "gpu_uuid",
        "ran_at",
        "test",
        "status",
        "value",
        "unit",
        "expected",
        "ratio",
        "duration_s",
        "details",
    }
    assert row["ran_at"].tzinfo is not None and row["details"]["model_name"] == "NVIDIA H200"
    with pytest.raises(ValueError, match="status"):
        ProbeResult("gemm", "ok")
