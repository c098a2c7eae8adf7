"""What each probe should measure on each GPU model, and the tests the runner knows.

Peaks are NVIDIA datasheet numbers (dense, no sparsity); PCIe is the link's raw rate per
direction. `ACHIEVABLE` is the share of a peak our kernels are expected to reach: an
estimate until scripts/device-check.sh has measured it on each model (docs/probes.md);
the slow-GPU flag compares a GPU with its same-model peers, so it does not depend on it.
"""

from __future__ import annotations

TESTS = ("gemm", "gemm_fp32", "memtest", "bandwidth", "pcie")
DEFAULT_TESTS = ("gemm", "memtest", "bandwidth", "pcie")

UNITS = {
    "gemm": "TFLOP/s",  # Tensor Core GEMM, fp16 in, fp32 accumulate
    "gemm_fp32": "TFLOP/s",  # tiled fp32 GEMM on CUDA cores
    "memtest": "bit errors",
    "bandwidth": "GB/s",  # device memory, read + write bytes
    "pcie": "GB/s",  # host <-> device, pinned, the slower direction
}

WEIGHTS = {"gemm": 3.0, "gemm_fp32": 1.5, "memtest": 4.0, "bandwidth": 1.0, "pcie": 1.0}
"""Share of a run's budget each test gets (memtest sweeps the most bytes)."""

PEAKS: dict[str, dict[str, float]] = {
    # A100 SXM4 80GB datasheet: 312 TFLOP/s fp16 Tensor, 19.5 fp32, 2039 GB/s HBM2e, PCIe Gen4 x16.
    "NVIDIA A100-SXM4-80GB": {"gemm": 312.0, "gemm_fp32": 19.5, "bandwidth": 2039.0, "pcie": 32.0},
    # H100 SXM5 datasheet: 989 TFLOP/s fp16 Tensor, 67 fp32, 3350 GB/s HBM3, PCIe Gen5 x16.
    "NVIDIA H100 80GB HBM3": {"gemm": 989.0, "gemm_fp32": 67.0, "bandwidth": 3350.0, "pcie": 64.0},
    # H200 SXM datasheet: H100's compute, 4800 GB/s HBM3e, PCIe Gen5 x16.
    "NVIDIA H200": {"gemm": 989.0, "gemm_fp32": 67.0, "bandwidth": 4800.0, "pcie": 64.0},
}

ACHIEVABLE = {"gemm": 0.45, "gemm_fp32": 0.55, "bandwidth": 0.85, "pcie": 0.8}
"""Estimated share of the peak our kernels reach: WMMA (mma.sync) reaches well under the
wgmma peak on Hopper; a copy kernel reaches ~85-90 % of HBM; pinned copies ~80 % of the link."""

MIN_RATIO = 0.5
"""A probe below half its expected value fails outright (a broken GPU, not a slow one);
"slow" (>10 % below same-model peers) is judged across GPUs, not against this table."""


def expected(model_name: str, test: str) -> float | None:
    """The value `test` should reach on `model_name`; None for unknown models and memtest."""
    peaks = PEAKS.get(model_name.strip())
    if peaks is None or test not in peaks:
        return None
    return round(peaks[test] * ACHIEVABLE[test], 1)


def parse_tests(text: str) -> list[str]:
    """A comma list of test names, validated, duplicates dropped, order kept."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [t for t in names if t not in TESTS]
    if unknown or not names:
        given = ", ".join(unknown) or "(none given)"
        raise ValueError(f"unknown probe test(s) {given}; choose from {', '.join(TESTS)}")
    return list(dict.fromkeys(names))
