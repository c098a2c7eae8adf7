"""Parts of the probe child that run without a GPU, against a small stand-in for CuPy's allocator."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kernels import probe_child


class _OutOfMemory(Exception):
    pass


class _Allocator:
    """cp.empty and cp.cuda.memory.OutOfMemoryError, counting allocations; a runaway loop fails fast."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used, self.calls = capacity, 0, 0
        self.uint32 = "uint32"
        self.cuda = SimpleNamespace(memory=SimpleNamespace(OutOfMemoryError=_OutOfMemory))

    def empty(self, n: int, _dtype: Any) -> SimpleNamespace:
        self.calls += 1
        assert self.calls < 100, "the allocation loop does not end"
        if self.used + 4 * n > self.capacity:
            raise _OutOfMemory
        self.used += 4 * n
        return SimpleNamespace(size=n)


@pytest.mark.parametrize("free", [1_000_000_002, 1_000_000_001, 3 << 30, 80 << 30])
def test_memtest_chunks_cover_the_target_in_whole_words_and_end(free: int) -> None:
    """A target that was not a multiple of 4 bytes left a 0-byte last chunk, and the loop never ended."""
    cp = _Allocator(capacity=free)
    chunks = probe_child._memtest_chunks(cp, free)
    covered = 4 * sum(c.size for c in chunks)
    want = max(int(free * probe_child.MEMTEST_SHARE) - probe_child.MEMTEST_RESERVE, probe_child.MEMTEST_CHUNK // 4)
    assert want - 4 < covered <= want
    assert all(c.size > 0 for c in chunks)


def test_memtest_chunks_stop_at_what_allocates() -> None:
    cp = _Allocator(capacity=1536 << 20)  # the driver says more is free than really allocates
    chunks = probe_child._memtest_chunks(cp, 3 << 30)
    assert 4 * sum(c.size for c in chunks) == probe_child.MEMTEST_CHUNK  # the second 1 GiB chunk did not fit
