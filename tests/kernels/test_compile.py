"""nvcc compiles every kernel for Ampere (sm_80) and Hopper (sm_90), with every entry point."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.kernels.conftest import ARCHS, KERNELS


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_kernel_compiles_with_every_entry_point(cubin: Callable[[str, str], Path], kernel: str, arch: str) -> None:
    data = cubin(kernel, arch).read_bytes()
    assert data[:4] == b"\x7fELF", "nvcc -cubin must write an ELF image"
    missing = [name for name in KERNELS[kernel] if b".text." + name.encode() + b"\x00" not in data]
    assert not missing, f"{kernel} for {arch} lacks kernels the probe child launches: {missing}"


def test_child_launches_only_kernels_that_exist() -> None:
    # Every get_function("...") in the child names a kernel listed (and so compiled) above.
    import re

    source = (Path(__file__).resolve().parents[2] / "kernels" / "probe_child.py").read_text()
    launched = set(re.findall(r'get_function\("(\w+)"\)', source))
    launched |= set(re.findall(r'"(mt_\w+|gemm_\w+|bw_\w+|sgemm_\w+)"', source)) - {"gemm_fp32"}
    known = {k for names in KERNELS.values() for k in names}
    assert launched, "found no kernel launches in kernels/probe_child.py"
    assert launched <= known, f"launched but not compiled by the tests: {sorted(launched - known)}"
