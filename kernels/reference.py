"""CPU (numpy) references of the probes' generators and verification, shared with the child.

The CUDA kernels and these functions implement the same arithmetic (kernels/common.cuh):
tests check the references against the compiled host side of that header, and check that
the verification finds injected faults. The probe child uses the host-side pieces
(`candidate_cells`, `memtest_phases`, `injection_plan`) directly, so what is tested here is
what runs next to the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MASK64 = (1 << 64) - 1
SEED_B_XOR = 0x5DEECE66D
"""B's stream is seed ^ this (GH_SEED_B in gemm_check.cu)."""

PAT_CONST, PAT_RANDOM, PAT_WALK1, PAT_WALK0 = 0, 1, 2, 3
"""Memtest pattern kinds (GH_PAT_* in common.cuh)."""

_U = np.uint64


def _mix64_int(x: int) -> int:
    """gh_mix64 on one Python int (exact 64-bit wrap-around)."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def mix64(x: np.ndarray) -> np.ndarray:
    """gh_mix64 elementwise on uint64 (numpy wraps uint64 arithmetic modulo 2^64)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + _U(0x9E3779B97F4A7C15)
        x = (x ^ (x >> _U(30))) * _U(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> _U(27))) * _U(0x94D049BB133111EB)
    return x ^ (x >> _U(31))


def gh_hash(seed: int, idx: np.ndarray) -> np.ndarray:
    """gh_hash(seed, idx) for an array of indices."""
    return mix64(_U(_mix64_int(seed & MASK64)) ^ np.asarray(idx, dtype=np.uint64))


def gemm_ints(seed: int, idx: np.ndarray) -> np.ndarray:
    """gh_gemm_int: integers in [-2, 2] as int64."""
    return (gh_hash(seed, idx) % _U(5)).astype(np.int64) - 2


def gemm_inputs(m: int, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A (m x k) and B (k x n) as int64, exactly as gemm_fill_* writes them."""
    a = gemm_ints(seed, np.arange(m * k, dtype=np.uint64)).reshape(m, k)
    b = gemm_ints(seed ^ SEED_B_XOR, np.arange(k * n, dtype=np.uint64)).reshape(k, n)
    return a, b


def value_limit(k: int) -> float:
    """The largest |C[i, j]| possible: k products of at most 2 x 2."""
    return 4.0 * k


@dataclass
class GemmCheck:
    """What the verification found in one product C."""

    mismatches: int
    cells: list[tuple[int, int, float, int]] = field(default_factory=list)
    """Located mismatches: (row, column, value found, value expected)."""
    bad_rows: int = 0
    bad_cols: int = 0
    non_integer: int = 0
    """Elements that were not integers in range (NaN, a flipped low mantissa bit)."""
    truncated: bool = False
    """More candidate cells than the cap: `mismatches` is a lower bound."""


def candidate_cells(
    row_sums: np.ndarray, want_rows: np.ndarray, col_sums: np.ndarray, want_cols: np.ndarray, cap: int
) -> tuple[np.ndarray, np.ndarray, bool]:
    """(rows, cols, truncated): the cells at bad rows x bad columns, at most `cap` of them."""
    bad_r = np.flatnonzero(row_sums != want_rows)
    bad_c = np.flatnonzero(col_sums != want_cols)
    if bad_r.size == 0 or bad_c.size == 0:
        return np.empty(0, np.int32), np.empty(0, np.int32), False
    rr, cc = np.meshgrid(bad_r, bad_c, indexing="ij")
    rows, cols = rr.ravel().astype(np.int32), cc.ravel().astype(np.int32)
    truncated = rows.size > cap
    return rows[:cap], cols[:cap], truncated


def integer_sums(c: np.ndarray, limit: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row sums, column sums, mask of bad elements), counting only integer elements in range
    (gemm_row_sums / gemm_col_sums)."""
    with np.errstate(invalid="ignore"):
        ok = (c == np.rint(c)) & (np.abs(c) <= limit)
    as_int = np.where(ok, c, 0).astype(np.int64)
    return as_int.sum(axis=1), as_int.sum(axis=0), ~ok


def verify_gemm(c: np.ndarray, seed: int, k: int, cap: int = 4096) -> GemmCheck:
    """Check C = A.B with checksum rows/columns recomputed from the seed (ABFT), then
    recompute the candidate cells: the numpy twin of gemm_check.cu's verification."""
    m, n = c.shape
    a, b = gemm_inputs(m, n, k, seed)
    want_rows = a @ b.sum(axis=1)
    want_cols = a.sum(axis=0) @ b
    rows_sum, cols_sum, bad = integer_sums(c, value_limit(k))
    rows, cols, truncated = candidate_cells(rows_sum, want_rows, cols_sum, want_cols, cap)
    cells: list[tuple[int, int, float, int]] = []
    for i, j in zip(rows.tolist(), cols.tolist(), strict=True):
        want = int(a[i] @ b[:, j])
        if c[i, j] != want and not bad[i, j]:
            cells.append((i, j, float(c[i, j]), want))
    for i, j in zip(*np.nonzero(bad), strict=True):
        cells.append((int(i), int(j), float(c[i, j]), int(a[i] @ b[:, j])))
    return GemmCheck(
        mismatches=len(cells),
        cells=sorted(cells),
        bad_rows=int((rows_sum != want_rows).sum()),
        bad_cols=int((cols_sum != want_cols).sum()),
        non_integer=int(bad.sum()),
        truncated=truncated,
    )


# --- memtest ---------------------------------------------------------------------------------


def pattern(kind: int, arg: int, idx: np.ndarray) -> np.ndarray:
    """gh_pattern: the uint32 expected at word indices `idx`."""
    i = np.asarray(idx, dtype=np.uint64)
    if kind == PAT_CONST:
        return np.full(i.shape, arg & 0xFFFFFFFF, dtype=np.uint32)
    if kind == PAT_RANDOM:
        return (gh_hash(arg, i) & _U(0xFFFFFFFF)).astype(np.uint32)
    one = (np.uint32(1) << ((i + _U(arg & MASK64)) & _U(31)).astype(np.uint32)).astype(np.uint32)
    return one if kind == PAT_WALK1 else ~one


@dataclass(frozen=True)
class Phase:
    """One memtest phase: write the pattern, check it and write its inverse, check the inverse."""

    name: str
    kind: int
    arg: int


def memtest_phases(seed: int) -> list[Phase]:
    """The phases in the order they run; a short budget stops after any phase (at least one)."""
    phases = [
        Phase("moving inversions 0x00000000", PAT_CONST, 0x00000000),
        Phase("moving inversions random", PAT_RANDOM, seed),
        Phase("moving inversions 0x55555555", PAT_CONST, 0x55555555),
    ]
    phases += [Phase(f"walking ones/zeros step {s}", PAT_WALK1, s) for s in range(32)]
    return phases


@dataclass
class MemErrors:
    """Bit errors a check found: counts and the word indices with the differing bits."""

    bit_errors: int = 0
    words: int = 0
    index: list[int] = field(default_factory=list)
    xor: list[int] = field(default_factory=list)

    def add(self, other: MemErrors) -> None:
        self.bit_errors += other.bit_errors
        self.words += other.words
        self.index += other.index
        self.xor += other.xor


def check_words(buf: np.ndarray, base: int, kind: int, arg: int, invert: bool) -> MemErrors:
    """mt_check's comparison: words of `buf` (region indices base..) against the pattern."""
    want = pattern(kind, arg, np.arange(base, base + buf.size, dtype=np.uint64))
    if invert:
        want = ~want
    diff = buf ^ want
    bad = np.flatnonzero(diff)
    bits = int(np.unpackbits(diff[bad].view(np.uint8)).sum()) if bad.size else 0
    return MemErrors(bits, int(bad.size), (bad + base).tolist(), diff[bad].tolist())


def run_phase(
    buf: np.ndarray, base: int, phase: Phase, flips: tuple[np.ndarray, np.ndarray] | None = None
) -> MemErrors:
    """One phase on a host buffer, as the child runs it on the GPU: write, (inject), check and
    write the inverse, check the inverse. `flips` are (word index, mask) pairs."""
    buf[:] = pattern(phase.kind, phase.arg, np.arange(base, base + buf.size, dtype=np.uint64))
    if flips is not None:
        np.bitwise_xor.at(buf, flips[0].astype(np.int64), flips[1].astype(np.uint32))
    found = check_words(buf, base, phase.kind, phase.arg, invert=False)
    buf[:] = ~pattern(phase.kind, phase.arg, np.arange(base, base + buf.size, dtype=np.uint64))
    found.add(check_words(buf, base, phase.kind, phase.arg, invert=True))
    return found


def injection_plan(n_words: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` distinct word indices below n_words and one bit to flip in each."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(n_words, size=min(count, n_words), replace=False).astype(np.uint64)
    masks = (np.uint32(1) << rng.integers(0, 32, idx.size).astype(np.uint32)).astype(np.uint32)
    return idx, masks
