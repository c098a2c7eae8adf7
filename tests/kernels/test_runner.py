"""The runner survives hung, crashing and confused probe processes (real stand-in children)."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernels.runner import CUPY_MISSING, PREFIX, ProbeResult, child_command, exit_code, judge, run_probes

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


def assert_gone(pid: int, within_s: float = 5.0) -> None:
    """`pid` is dead: no such process, or a zombie waiting for init to reap it."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)  # leave nothing behind, then say so
    pytest.fail(f"process {pid} survived the probe run")


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
    assert_gone(int(pid_file.read_text()))  # it was in the killed process group


@pytest.mark.parametrize(
    ("exit_with", "status"), [("sys.exit(0)", "pass"), ("sys.exit(3)", "pass")], ids=["exit-0", "exit-3"]
)
def test_grandchildren_die_when_the_child_exits_and_do_not_hold_the_runner(
    tmp_path: Path, exit_with: str, status: str
) -> None:
    """A leftover `sleep &` sharing the child's stdout is killed with the group; no waiting on it."""
    pid_file = tmp_path / "grandchild"
    cmd = stand_in(
        tmp_path,
        f"""
        import subprocess
        p = subprocess.Popen(["sleep", "30"])  # inherits stdout and stderr
        open({str(pid_file)!r}, "w").write(str(p.pid))
        emit("gemm", value=400.0)
        {exit_with}
        """,
    )
    started = time.monotonic()
    results = run_probes(0, ["gemm", "memtest"], budget_s=30, command=cmd)
    took = time.monotonic() - started
    assert [r.status for r in results] == [status, "error"]
    assert took < 3.0, f"run_probes took {took:.1f}s: it waited on a pipe a grandchild held open"
    assert_gone(int(pid_file.read_text()), within_s=2.0)


def test_a_grandchild_outside_the_group_cannot_hold_the_runner(tmp_path: Path) -> None:
    """One that left the group (its own session) cannot be killed by it, but must not stall the run."""
    pid_file = tmp_path / "escaped"
    cmd = stand_in(
        tmp_path,
        f"""
        import subprocess
        p = subprocess.Popen(["sleep", "30"], start_new_session=True)
        open({str(pid_file)!r}, "w").write(str(p.pid))
        emit("gemm")
        """,
    )
    started = time.monotonic()
    try:
        (r,) = run_probes(0, ["gemm"], budget_s=30, command=cmd)
        assert r.status == "pass" and time.monotonic() - started < 3.0
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_an_interrupted_parent_kills_the_whole_group(tmp_path: Path) -> None:
    """KeyboardInterrupt (here from a timer) while waiting: child and grandchild die, then it propagates."""
    child_pid, grandchild_pid = tmp_path / "child", tmp_path / "grandchild"
    cmd = stand_in(
        tmp_path,
        f"""
        import subprocess
        p = subprocess.Popen(["sleep", "30"])
        open({str(grandchild_pid)!r}, "w").write(str(p.pid))
        open({str(child_pid)!r}, "w").write(str(os.getpid()))
        time.sleep(30)
        """,
    )

    def interrupt(signum: int, frame: object) -> None:
        if child_pid.exists() and child_pid.read_text():  # the child is up and has started its own
            raise KeyboardInterrupt
        signal.setitimer(signal.ITIMER_REAL, 0.1)

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_probes(0, ["gemm"], budget_s=30, command=cmd)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert_gone(int(child_pid.read_text()), within_s=2.0)
    assert_gone(int(grandchild_pid.read_text()), within_s=2.0)


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
    emit("pcie")  # not asked for
    emit("memtest", "fail", errors=3)
    """
    results = run_probes(0, ["gemm", "memtest"], budget_s=30, command=stand_in(tmp_path, body))
    assert [(r.test, r.status) for r in results] == [("gemm", "error"), ("memtest", "fail")]
    assert "exited without a result" in results[0].details["reason"]
    assert "1 malformed result line(s) ignored; the first: not JSON: {not json" in results[0].details["reason"]
    assert results[1].errors == 3


@pytest.mark.parametrize("line", ["[1, 2]", "42", '"x"', "null", '{"status": "pass"}'])
def test_a_result_line_that_is_not_a_result_object_is_an_error_not_an_exception(tmp_path: Path, line: str) -> None:
    body = f"""
    print({PREFIX!r} + {line!r}, flush=True)
    emit("memtest")
    """
    results = run_probes(0, ["gemm", "memtest"], budget_s=30, command=stand_in(tmp_path, body))
    assert [(r.test, r.status) for r in results] == [("gemm", "error"), ("memtest", "pass")]
    reason = results[0].details["reason"]
    assert "exited without a result (1 malformed result line(s) ignored; the first: " in reason
    assert ("no test name: " if line.startswith("{") else "not a JSON object: ") + line in reason


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"status": "pass", "value": "fast"}, "value must be a finite number or null, not 'fast'"),
        ({"status": "pass", "value": 400.0, "ratio": [1]}, "ratio must be a finite number or null, not [1]"),
        ({"status": "pass", "value": float("nan")}, "value must be a finite number or null, not nan"),
        ({"status": "pass", "errors": "3"}, "errors must be an integer or null, not '3'"),
        ({"status": "pass", "errors": True}, "errors must be an integer or null, not True"),
        ({"status": "fail", "details": ["x"]}, "details must be an object, not ['x']"),
        ({"status": "pass", "unit": 5}, "unit must be a string, not 5"),
        ({"status": "pass", "ran_at": "now"}, "ran_at must be a finite number, not 'now'"),
        ({"status": "bogus"}, "probe status must be one of pass, fail, error, skipped, not 'bogus'"),
        ({"status": 1}, "probe status must be one of"),
        ({"ok": "yes", "gflops": "fast"}, "missing 1 required positional argument: 'status'"),
    ],
    ids=[
        "value-str", "ratio-list", "value-nan", "errors-str", "errors-bool", "details-list", "unit-int",
        "ran_at-str", "status-bogus", "status-int", "no-status",
    ],
)  # fmt: skip
def test_a_wrong_typed_field_makes_that_test_an_error(tmp_path: Path, fields: dict[str, object], problem: str) -> None:
    """The result is rejected where it enters, so no scrape, table or store row meets a 'fast' TFLOP/s."""
    body = f"""
    print({PREFIX + json.dumps({"test": "gemm", **fields})!r}, flush=True)
    emit("memtest")
    """
    results = run_probes(0, ["gemm", "memtest"], budget_s=30, command=stand_in(tmp_path, body), model_name="M")
    assert [(r.test, r.status) for r in results] == [("gemm", "error"), ("memtest", "pass")]
    assert results[0].details["reason"].startswith("malformed result from the probe process: ")
    assert problem in results[0].details["reason"]
    assert results[0].value is None and exit_code(results) == 1
    json.dumps([r.to_dict() for r in results], allow_nan=False)  # the --json contract still holds
    assert results[0].store_row()["status"] == "error"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"value": "fast"}, "value must be a finite number or null, not 'fast'"),
        ({"value": 400.0, "errors": 1.5}, "errors must be an integer or null, not 1.5"),
        ({"value": 400.0, "details": []}, "details must be an object, not []"),
        ({"test": "nope"}, "unknown test 'nope'"),
    ],
    ids=["value-str", "errors-float", "details-list", "unknown-test"],
)
def test_judge_turns_a_wrong_typed_result_into_an_error(fields: dict[str, object], problem: str) -> None:
    r = judge(ProbeResult.from_dict({"test": "gemm", "status": "pass", **fields}), "NVIDIA H100 80GB HBM3")
    assert r.status == "error" and r.details["reason"] == f"invalid probe result: {problem}"
    assert r.model_name == "NVIDIA H100 80GB HBM3"


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
