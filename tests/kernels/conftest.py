"""nvcc builds for the kernel tests: each kernel compiled once per architecture per session."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.conftest import require_tool

KERNEL_DIR = Path(__file__).resolve().parents[2] / "kernels"
KERNELS = {
    "gemm_check.cu": [
        "gemm_fill_f32", "gemm_fill_f16", "gemm_fill_bf16", "sgemm_tiled", "gemm_wmma_f16", "gemm_wmma_bf16",
        "gemm_b_rowsum", "gemm_a_colsum", "gemm_expect_rows", "gemm_expect_cols", "gemm_row_sums",
        "gemm_col_sums", "gemm_check_cells", "gemm_perturb",
    ],
    "memtest.cu": ["mt_write", "mt_check", "mt_flip"],
    "bandwidth.cu": ["bw_fill", "bw_copy", "bw_verify"],
}  # fmt: skip
"""Every kernel kernels/probe_child.py launches, by source file."""
ARCHS = ("sm_80", "sm_90")
NVCC_TIMEOUT_S = 240


def run_nvcc(args: list[str]) -> None:
    """Run nvcc; fail with its output when it does not succeed."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}", pytrace=False)


@pytest.fixture(scope="session")
def nvcc() -> str:
    """Path of nvcc: skipped when absent, a failure in CI (CI=true)."""
    return require_tool("nvcc")


@pytest.fixture(scope="session")
def cubin(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Path]:
    """cubin(kernel, arch): the kernel compiled for arch, built once per session."""
    out = tmp_path_factory.mktemp("cubin")
    built: dict[tuple[str, str], Path] = {}

    def build(kernel: str, arch: str) -> Path:
        if (kernel, arch) not in built:
            path = out / f"{kernel}.{arch}.cubin"
            # -std=c++17 and -I as kernels/probe_child.py passes them to NVRTC.
            run_nvcc([nvcc, "-cubin", f"-arch={arch}", "-std=c++17", f"-I{KERNEL_DIR}", "-o", str(path),
                      str(KERNEL_DIR / kernel)])  # fmt: skip
            built[(kernel, arch)] = path
        return built[(kernel, arch)]

    return build


@pytest.fixture(scope="session")
def host_check(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Output of tests/kernels/host_check.cu: common.cuh's generators run on the CPU."""
    exe = tmp_path_factory.mktemp("host") / "host_check"
    run_nvcc([nvcc, "-std=c++17", f"-I{KERNEL_DIR}", "-o", str(exe), str(Path(__file__).parent / "host_check.cu")])
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout
