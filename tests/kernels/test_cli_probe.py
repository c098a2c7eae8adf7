"""`gpuhealth probe`: JSON contract, exit codes, one clear line without a GPU."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuhealth.cli import app

runner = CliRunner()


def probe(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["probe", *args])
    return r.exit_code, r.stdout, r.stderr


def test_sim_probe_json_and_a_failing_memtest_exits_1() -> None:
    code, out, _ = probe("--backend", "sim", "--sim-gpus", "4", "--sim-fault", "2:ecc:2", "--json")
    results = json.loads(out)
    assert code == 1
    assert len(results) == 4 * 4
    assert {r["test"] for r in results} == {"gemm", "memtest", "bandwidth", "pcie"}
    assert {k for r in results for k in r} >= {"test", "status", "value", "unit", "expected", "ratio", "duration_s"}
    failed = [(r["gpu_index"], r["test"]) for r in results if r["status"] != "pass"]
    assert failed == [(2, "memtest")]


def test_sim_probe_of_healthy_gpus_exits_0_with_a_table() -> None:
    code, out, _ = probe("--backend", "sim", "--sim-gpus", "2", "--gpu", "1", "--tests", "gemm,pcie", "--budget", "20s")
    assert code == 0, out
    assert "TFLOP/s" in out and "GB/s" in out and "pass" in out


def test_without_a_gpu_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import collector.backends.nvml as nvml_mod
    from collector.backends.base import BackendUnavailable

    def no_driver(*args: object, **kwargs: object) -> None:
        raise BackendUnavailable(
            "NVML could not be loaded (NVML Shared Library Not Found): is the NVIDIA driver installed? "
            "use --backend sim to try a simulated fleet"
        )

    monkeypatch.setattr(nvml_mod.NvmlBackend, "__init__", no_driver)
    code, out, err = probe("--tests", "gemm")
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: no GPU to probe: NVML could not be loaded") and "--backend sim" in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--tests", "gemm,burn"], "unknown probe test(s) burn"), (["--budget", "soon"], "soon"),
     (["--backend", "dcgm"], "nvml or sim")],
)  # fmt: skip
def test_bad_flags_are_one_line_errors(args: list[str], needle: str) -> None:
    code, _out, err = probe(*args)
    assert code == 2 and needle in err
