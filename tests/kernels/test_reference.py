"""The numpy references match common.cuh bit for bit, and the verification finds injected faults."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import reference as ref


def test_generators_match_the_cuda_header(host_check: str) -> None:
    hashes = patterns = 0
    for line in host_check.splitlines():
        kind, *vals = line.split()
        if kind == "hash":
            seed, i, h, g = (int(v) for v in vals)
            assert int(ref.gh_hash(seed, np.array([i]))[0]) == h, f"gh_hash({seed}, {i})"
            assert int(ref.gemm_ints(seed, np.array([i]))[0]) == g, f"gh_gemm_int({seed}, {i})"
            hashes += 1
        else:
            k, arg, i, p = (int(v) for v in vals)
            assert int(ref.pattern(k, arg, np.array([i]))[0]) == p, f"gh_pattern({k}, {arg}, {i})"
            patterns += 1
    assert hashes == 3 * 512 and patterns == 4 * 4 * 96


def test_gemm_inputs_are_small_integers_in_every_value() -> None:
    a, b = ref.gemm_inputs(64, 48, 32, seed=5)
    assert set(np.unique(a)) == {-2, -1, 0, 1, 2} and set(np.unique(b)) == {-2, -1, 0, 1, 2}
    assert not np.array_equal(a[:32, :32], b[:32, :32]), "A and B must be different streams"


def product(m: int, n: int, k: int, seed: int) -> np.ndarray:
    a, b = ref.gemm_inputs(m, n, k, seed)
    c = (a @ b).astype(np.float32)
    assert np.array_equal(c.astype(np.int64), a @ b), "integer inputs must give an exact fp32 product"
    return c


def test_a_correct_product_verifies_clean() -> None:
    check = ref.verify_gemm(product(96, 80, 64, seed=3), seed=3, k=64)
    assert (check.mismatches, check.bad_rows, check.bad_cols, check.non_integer) == (0, 0, 0, 0)


def test_a_perturbed_tile_is_found_cell_by_cell() -> None:
    c = product(128, 96, 64, seed=11)
    c[40:44, 17:21] += 1.0  # what gemm_perturb does in the child's test mode
    check = ref.verify_gemm(c, seed=11, k=64)
    assert check.mismatches == 16
    assert {(i, j) for i, j, _, _ in check.cells} == {(i, j) for i in range(40, 44) for j in range(17, 21)}
    assert all(got == want + 1 for _, _, got, want in check.cells)


@pytest.mark.parametrize("bit", [0, 7, 22, 23, 30, 31])
def test_a_single_flipped_bit_is_found_wherever_it_lands(bit: int) -> None:
    c = product(64, 64, 64, seed=2)
    words = c.view(np.uint32)
    words[13, 57] ^= np.uint32(1 << bit)
    check = ref.verify_gemm(c, seed=2, k=64)
    assert check.mismatches == 1 and check.cells[0][:2] == (13, 57), f"bit {bit}: {check}"


def test_a_flipped_zero_and_a_nan_are_caught_as_non_integers() -> None:
    c = product(64, 64, 32, seed=9)
    zero = np.argwhere(c == 0)[0]
    c.view(np.uint32)[tuple(zero)] ^= np.uint32(1)  # 0.0 -> the smallest denormal
    c[5, 6] = np.nan
    check = ref.verify_gemm(c, seed=9, k=32)
    assert check.non_integer == 2 and check.mismatches == 2
    assert {(i, j) for i, j, _, _ in check.cells} == {(int(zero[0]), int(zero[1])), (5, 6)}


def test_a_wrong_input_is_found_because_checksums_come_from_the_seed() -> None:
    # C computed from a corrupted A (as if A's memory flipped a bit) must not verify.
    a, b = ref.gemm_inputs(64, 64, 32, seed=4)
    a[10, 3] += 1
    check = ref.verify_gemm((a @ b).astype(np.float32), seed=4, k=32)
    assert check.mismatches == int(np.count_nonzero(b[3])), "every non-zero of B's row 3 makes row 10 wrong"
    assert {i for i, _, _, _ in check.cells} == {10}


def test_candidate_cells_cap_reports_truncation() -> None:
    rows, _cols, truncated = ref.candidate_cells(np.arange(100), np.zeros(100), np.arange(100), np.zeros(100), 50)
    assert rows.size == 50 and truncated


@pytest.mark.parametrize("phase", ref.memtest_phases(seed=1)[:4] + ref.memtest_phases(seed=1)[-2:], ids=str)
def test_memtest_phase_finds_every_injected_flip_and_nothing_else(phase: ref.Phase) -> None:
    buf = np.empty(50_000, np.uint32)
    flips = ref.injection_plan(buf.size, 64, seed=3)
    found = ref.run_phase(buf, base=1_000, phase=phase, flips=flips)
    assert found.bit_errors == 64 and found.words == 64
    assert sorted(zip(found.index, found.xor, strict=True)) == sorted(
        zip((flips[0] + 1_000).tolist(), flips[1].tolist(), strict=True)
    )
    clean = ref.run_phase(buf, base=1_000, phase=phase)
    assert clean.bit_errors == 0 and clean.words == 0


def test_memtest_counts_every_bit_of_a_multi_bit_error() -> None:
    buf = ref.pattern(ref.PAT_RANDOM, 5, np.arange(1000, dtype=np.uint64))
    buf[123] ^= np.uint32(0b1011)
    errs = ref.check_words(buf, 0, ref.PAT_RANDOM, 5, invert=False)
    assert (errs.bit_errors, errs.words, errs.index, errs.xor) == (3, 1, [123], [0b1011])


def test_walking_patterns_put_every_bit_in_every_word() -> None:
    idx = np.arange(64, dtype=np.uint64)
    ones = np.bitwise_or.reduce([ref.pattern(ref.PAT_WALK1, s, idx) for s in range(32)])
    assert (ones == 0xFFFFFFFF).all()
    single = ref.pattern(ref.PAT_WALK1, 0, idx)
    assert all(bin(int(v)).count("1") == 1 for v in single) and single[0] != single[1]
    assert (ref.pattern(ref.PAT_WALK0, 3, idx) == ~ref.pattern(ref.PAT_WALK1, 3, idx)).all()


def test_injection_plan_is_distinct_single_bits() -> None:
    idx, masks = ref.injection_plan(1000, 64, seed=1)
    assert len(set(idx.tolist())) == 64 and all(bin(int(m)).count("1") == 1 for m in masks)
