"""The probe child process: runs the CUDA kernels on one GPU through CuPy, one result line per test.

Started by kernels.runner (never imported by the collector). CuPy is imported here, lazily:
without it every test reports `error` with the install hint and the process exits 0.
Each test gets a share of the budget (kernels.expected.WEIGHTS) and loops until its share
is spent, so a run fits the budget on any GPU size; the parent kills us if we do not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernels import expected as exp
from kernels import reference as ref
from kernels.runner import CUPY_MISSING, PREFIX, ProbeResult, judge

KERNEL_DIR = Path(__file__).resolve().parent
THREADS = 256
GEMM_N = 8192
"""Tensor Core GEMM size (M = N = K): 1.1 TFLOP a product, a few ms on an H100."""
GEMM_FP32_N = 4096
MEMTEST_CHUNK = 1 << 30
MEMTEST_SHARE = 0.9
"""Share of the free memory memtest covers; the rest is left for the driver and CuPy."""
MEMTEST_RESERVE = 512 << 20
RECORD_CAP = 256
INJECT_FLIPS = 64
INJECT_TILE = (4, 4)
PCIE_BYTES = 256 << 20
BANDWIDTH_MAX_BYTES = 4 << 30


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:500] or type(err).__name__


def emit(result: ProbeResult) -> None:
    """Print one result line for the parent (flushed: a later hang must not lose it)."""
    sys.stdout.write(PREFIX + json.dumps(result.to_dict(), allow_nan=False) + "\n")
    sys.stdout.flush()


@dataclass
class Ctx:
    """What every probe needs: CuPy, the device and the run's options."""

    cp: Any
    sm_count: int
    inject: bool
    baseline: bool
    seed: int
    modules: dict[str, Any] = field(default_factory=dict)

    def module(self, name: str) -> Any:
        """kernels/<name> compiled once (NVRTC, or nvcc when NVRTC cannot find its headers)."""
        if name not in self.modules:
            self.modules[name] = compile_module(self.cp, name)
        return self.modules[name]

    def grid(self) -> tuple[int]:
        """Blocks for a grid-stride kernel: 8 blocks of 256 threads per SM fill it."""
        return (self.sm_count * 8,)

    def timed(self, launch: Callable[[], None]) -> float:
        """Seconds one call of `launch` takes on the GPU (CUDA events)."""
        start, end = self.cp.cuda.Event(), self.cp.cuda.Event()
        start.record()
        launch()
        end.record()
        end.synchronize()
        return float(self.cp.cuda.get_elapsed_time(start, end)) / 1000.0


def compile_module(cp: Any, name: str) -> Any:
    """A CuPy RawModule of kernels/<name>, compiled now so errors surface here."""
    code = (KERNEL_DIR / name).read_text()
    options = ("-std=c++17", f"-I{KERNEL_DIR}")
    errors = []
    backends = ["nvrtc"] + (["nvcc"] if shutil.which("nvcc") else [])
    for backend in backends:
        try:
            mod = cp.RawModule(code=code, options=options, backend=backend)
            mod.compile()
            return mod
        except Exception as err:  # CompileException, or a missing toolkit
            errors.append(f"{backend}: {_one_line(err)[:300]}")
    raise RuntimeError(
        f"compiling kernels/{name} failed ({'; '.join(errors)}); "
        "if the headers are missing, set CUDA_PATH to the CUDA toolkit"
    )


# --- GEMM -----------------------------------------------------------------------------------


@dataclass
class _Gemm:
    """One GEMM probe's operands and product, its size, and the checksums every product must meet."""

    mod: Any
    a: Any
    b: Any
    c: Any
    m: int
    n: int
    k: int
    want_r: np.ndarray
    want_c: np.ndarray
    launch: Callable[[], None]


@dataclass
class _Tally:
    """What the products verified so far found, and how long each timed one took."""

    times: list[float] = field(default_factory=list)
    mismatches: int = 0
    located: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    injected: list[tuple[int, int]] = field(default_factory=list)
    products: int = 0


def probe_gemm(ctx: Ctx, deadline: float, fp32: bool = False) -> ProbeResult:
    """Tensor Core (fp16) or fp32 GEMM, every product verified; value = median TFLOP/s."""
    g = _gemm_setup(ctx, fp32)
    g.launch()  # warm-up (clocks, caches); verified below like every other product
    tally = _gemm_products(ctx, g, deadline)
    tflops = [2.0 * g.m * g.n * g.k / t / 1e12 for t in tally.times]
    details: dict[str, Any] = {
        "size": [g.m, g.n, g.k],
        "dtype": "float32" if fp32 else "float16 in, float32 accumulate (WMMA)",
        "products_verified": tally.products,
        "tflops_best": round(max(tflops), 2),
        "seed": ctx.seed,
        "verification": "ABFT row/column checksums from the seeds, candidate cells recomputed",
        "mismatch_cells": tally.located,
    }
    if tally.truncated:
        details["mismatches_lower_bound"] = True
    mismatches = tally.mismatches
    if ctx.inject:
        found_cells = {(d["row"], d["col"]) for d in tally.located}
        details["injected"] = len(tally.injected)
        details["injected_found"] = sum(1 for cell in tally.injected if cell in found_cells)
        mismatches -= details["injected_found"]  # what remains is the GPU's own
    if ctx.baseline:
        details.update(_gemm_baseline(ctx, g.a, g.b, g.m, g.n, g.k, deadline, statistics.median(tflops)))
    return ProbeResult(
        "gemm_fp32" if fp32 else "gemm", "pass", value=round(statistics.median(tflops), 2), errors=mismatches,
        details=details,
    )  # fmt: skip


def _gemm_setup(ctx: Ctx, fp32: bool) -> _Gemm:
    """Operands filled from the seed, the product's buffer, and the checksums it must meet."""
    cp = ctx.cp
    mod = ctx.module("gemm_check.cu")
    n = GEMM_FP32_N if fp32 else GEMM_N
    m = k = n
    seed = ctx.seed
    if fp32:
        dtype, fill, kernel, tile = cp.float32, "gemm_fill_f32", "sgemm_tiled", 128
    else:
        dtype, fill, kernel, tile = cp.float16, "gemm_fill_f16", "gemm_wmma_f16", 128
    a = cp.empty((m, k), dtype)
    b = cp.empty((k, n), dtype)
    c = cp.empty((m, n), cp.float32)
    u64 = np.uint64
    mod.get_function(fill)(ctx.grid(), (THREADS,), (a, u64(m * k), u64(seed)))
    mod.get_function(fill)(ctx.grid(), (THREADS,), (b, u64(k * n), u64(seed ^ ref.SEED_B_XOR)))
    want_r, want_c = _gemm_checksums(ctx, mod, m, n, k)
    gemm = mod.get_function(kernel)
    grid = (n // tile, m // tile)
    i32 = np.int32

    def launch() -> None:
        gemm(grid, (THREADS,), (a, b, c, i32(m), i32(n), i32(k)))

    return _Gemm(mod, a, b, c, m, n, k, want_r, want_c, launch)


def _gemm_checksums(ctx: Ctx, mod: Any, m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Expected row and column sums of the product, from the seeds (independent of the buffers and the GEMM)."""
    cp = ctx.cp
    seed = ctx.seed
    brow = cp.empty(k, cp.int64)
    acol = cp.empty(k, cp.int64)
    want_rows = cp.empty(m, cp.int64)
    want_cols = cp.empty(n, cp.int64)
    blocks = lambda count: ((count + THREADS - 1) // THREADS,)  # noqa: E731
    u64, i32 = np.uint64, np.int32
    mod.get_function("gemm_b_rowsum")(blocks(k), (THREADS,), (u64(seed), i32(k), i32(n), brow))
    mod.get_function("gemm_a_colsum")(blocks(k), (THREADS,), (u64(seed), i32(m), i32(k), acol))
    mod.get_function("gemm_expect_rows")(blocks(m), (THREADS,), (u64(seed), i32(m), i32(k), brow, want_rows))
    mod.get_function("gemm_expect_cols")(blocks(n), (THREADS,), (u64(seed), i32(k), i32(n), acol, want_cols))
    return cp.asnumpy(want_rows), cp.asnumpy(want_cols)


def _gemm_products(ctx: Ctx, g: _Gemm, deadline: float) -> _Tally:
    """Verify products until the deadline, at least three; all but the warm-up's are timed."""
    tally = _Tally()
    while True:
        if tally.products:
            tally.times.append(ctx.timed(g.launch))
        if ctx.inject and tally.products == 1:
            tally.injected = _gemm_perturb(g)
        found, cells, trunc = _verify(ctx, g.mod, g.c, ctx.seed, g.m, g.n, g.k, g.want_r, g.want_c)
        tally.products += 1
        tally.mismatches += found
        tally.truncated |= trunc
        tally.located += cells[: max(0, 32 - len(tally.located))]
        if tally.products >= 3 and time.monotonic() >= deadline:
            return tally


def _gemm_perturb(g: _Gemm) -> list[tuple[int, int]]:
    """Test mode: perturb a tile of the product; the cells the verification must find."""
    i32 = np.int32
    r0, c0 = (g.m // 3) & ~15, (g.n // 5) & ~15
    h, w = INJECT_TILE
    perturb = g.mod.get_function("gemm_perturb")
    perturb((1,), (THREADS,), (g.c, i32(g.n), i32(r0), i32(c0), i32(h), i32(w), np.float32(1)))
    return [(r0 + t // w, c0 + t % w) for t in range(h * w)]


def _verify(
    ctx: Ctx, mod: Any, c: Any, seed: int, m: int, n: int, k: int, want_r: np.ndarray, want_c: np.ndarray
) -> tuple[int, list[dict[str, Any]], bool]:
    """Mismatches in one product: count, located cells, whether the count is a lower bound."""
    cp = ctx.cp
    i32 = np.int32
    limit = np.float32(ref.value_limit(k))
    rows = cp.empty(m, cp.int64)
    cols = cp.empty(n, cp.int64)
    counters = cp.zeros(1, cp.uint64)
    rec_row = cp.zeros(RECORD_CAP, cp.int32)
    rec_col = cp.zeros(RECORD_CAP, cp.int32)
    rec_val = cp.zeros(RECORD_CAP, cp.float32)
    mod.get_function("gemm_row_sums")(
        (m,), (THREADS,), (c, i32(m), i32(n), limit, rows, counters, rec_row, rec_col, rec_val, np.uint32(RECORD_CAP))
    )
    mod.get_function("gemm_col_sums")(((n + THREADS - 1) // THREADS,), (THREADS,), (c, i32(m), i32(n), limit, cols))
    bad_elements = int(counters.get()[0])
    kept = min(bad_elements, RECORD_CAP)
    rr, cc, vv = (cp.asnumpy(x)[:kept].tolist() for x in (rec_row, rec_col, rec_val))
    cells: list[dict[str, Any]] = [
        {"row": i, "col": j, "got": v, "kind": "non-integer"} for i, j, v in zip(rr, cc, vv, strict=True)
    ]
    r_idx, c_idx, truncated = ref.candidate_cells(cp.asnumpy(rows), want_r, cp.asnumpy(cols), want_c, 4096)
    wrong = 0
    if r_idx.size:
        d_rows, d_cols = cp.asarray(r_idx), cp.asarray(c_idx)
        want = cp.empty(r_idx.size, cp.int64)
        bad = cp.zeros(r_idx.size, cp.int32)
        mod.get_function("gemm_check_cells")(
            ((r_idx.size + THREADS - 1) // THREADS,), (THREADS,),
            (c, np.uint64(seed), i32(n), i32(k), d_rows, d_cols, i32(r_idx.size), want, bad),
        )  # fmt: skip
        bad_h, want_h = cp.asnumpy(bad), cp.asnumpy(want)
        got_h = cp.asnumpy(c[d_rows, d_cols])
        known = {(x["row"], x["col"]) for x in cells}
        for t in np.flatnonzero(bad_h):
            i, j = int(r_idx[t]), int(c_idx[t])
            if (i, j) in known:
                continue
            wrong += 1
            cells.append({"row": i, "col": j, "got": float(got_h[t]), "want": int(want_h[t])})
    return bad_elements + wrong, cells, truncated or bad_elements > RECORD_CAP


def _gemm_baseline(ctx: Ctx, a: Any, b: Any, m: int, n: int, k: int, deadline: float, ours: float) -> dict[str, Any]:
    """cuBLAS (through cupy.matmul) on the same inputs, same size, timed the same way."""
    cp = ctx.cp
    out = cp.matmul(a, b)  # warm-up, and cuBLAS picks its algorithm
    times: list[float] = []
    end = time.monotonic() + 2.0
    while len(times) < 3 or (time.monotonic() < end and len(times) < 50):
        times.append(ctx.timed(lambda: cp.matmul(a, b, out=out)))
    base = 2.0 * m * n * k / statistics.median(times) / 1e12
    return {
        "baseline": "cuBLAS via cupy.matmul",
        "baseline_tflops": round(base, 2),
        "ratio_to_baseline": round(ours / base, 3),
    }


# --- memtest -------------------------------------------------------------------------------


@dataclass
class _MemtestBuffers:
    """The memory under test, in chunks, and where the check kernel counts and records what it finds."""

    chunks: list[Any]
    bases: list[int]
    """Word index of each chunk's first word within the whole tested memory."""
    counters: Any
    """Bit errors, words in error, records written."""
    addr: Any
    xor: Any
    got: Any


def probe_memtest(ctx: Ctx, deadline: float) -> ProbeResult:
    """Moving inversions and walking ones/zeros over most free memory, in 1 GiB chunks."""
    cp = ctx.cp
    mod = ctx.module("memtest.cu")
    kernels = tuple(mod.get_function(f) for f in ("mt_write", "mt_check", "mt_flip"))
    free, _total = cp.cuda.runtime.memGetInfo()
    chunks = _memtest_chunks(cp, free)
    bases = np.cumsum([0] + [ch.size for ch in chunks[:-1]]).tolist()
    total_words = int(sum(ch.size for ch in chunks))
    buf = _MemtestBuffers(
        chunks,
        bases,
        counters=cp.zeros(3, cp.uint64),
        addr=cp.zeros(RECORD_CAP, cp.uint64),
        xor=cp.zeros(RECORD_CAP, cp.uint32),
        got=cp.zeros(RECORD_CAP, cp.uint32),
    )
    flips = ref.injection_plan(total_words, INJECT_FLIPS, ctx.seed) if ctx.inject else None
    phases_done = _memtest_sweep(ctx, buf, kernels, flips, deadline)
    bit_errors, words, records = (int(x) for x in buf.counters.get())
    located, found_words = _memtest_located(cp, buf, records)
    details: dict[str, Any] = {
        "bytes_tested": total_words * 4,
        "free_bytes_before": int(free),
        "chunks": len(chunks),
        "phases": phases_done,
        "bytes_swept": len(phases_done) * 4 * total_words * 4,  # write + read/write + read, in bytes
        "words_in_error": words,
        "errors_located": located[:64],
        "seed": ctx.seed,
    }
    if flips is not None:
        want = {(int(i), int(mk)) for i, mk in zip(*flips, strict=True)}
        found = len(want & found_words)
        details.update(injected=len(want), injected_found=found)
        bit_errors -= found  # each injected flip is one bit; what remains is the GPU's own
    return ProbeResult("memtest", "pass", value=float(bit_errors), errors=bit_errors, details=details)


def _memtest_chunks(cp: Any, free: int) -> list[Any]:
    """Buffers of up to MEMTEST_CHUNK bytes covering MEMTEST_SHARE of the free memory, or as much as allocates."""
    # Whole 4-byte words: a target that is not a multiple of 4 left a last chunk of 0 bytes,
    # which CuPy allocates happily, so `covered` never reached it and the loop never ended.
    target = max(int(free * MEMTEST_SHARE) - MEMTEST_RESERVE, MEMTEST_CHUNK // 4) // 4 * 4
    chunks: list[Any] = []
    covered = 0
    while covered < target:
        size = min(MEMTEST_CHUNK, target - covered) // 4 * 4
        try:
            chunks.append(cp.empty(size // 4, cp.uint32))
        except cp.cuda.memory.OutOfMemoryError:
            break
        covered += size
    if not chunks:
        raise RuntimeError(f"could not allocate memory to test ({free / 2**30:.1f} GiB reported free)")
    return chunks


def _memtest_sweep(
    ctx: Ctx,
    buf: _MemtestBuffers,
    kernels: tuple[Any, ...],
    flips: tuple[np.ndarray, np.ndarray] | None,
    deadline: float,
) -> list[str]:
    """Run the phases until the deadline, at least one; the names of those done."""
    cp = ctx.cp
    write, check, flip = kernels
    u64, i32 = np.uint64, np.int32
    phases_done: list[str] = []
    for phase in ref.memtest_phases(ctx.seed):
        if phases_done and time.monotonic() >= deadline:
            break
        for ch, base in zip(buf.chunks, buf.bases, strict=True):
            write(ctx.grid(), (THREADS,), (ch, u64(ch.size), u64(base), i32(phase.kind), u64(phase.arg), i32(0)))
        if flips is not None and not phases_done:
            _inject(cp, flip, buf.chunks, buf.bases, flips)
        for invert, write_next in ((0, 1), (1, 0)):
            for ch, base in zip(buf.chunks, buf.bases, strict=True):
                check(
                    ctx.grid(), (THREADS,),
                    (ch, u64(ch.size), u64(base), i32(phase.kind), u64(phase.arg), i32(invert), i32(write_next),
                     i32(1), buf.counters, buf.addr, buf.xor, buf.got, np.uint32(RECORD_CAP)),
                )  # fmt: skip
        cp.cuda.Device().synchronize()
        phases_done.append(phase.name)
    return phases_done


def _memtest_located(cp: Any, buf: _MemtestBuffers, records: int) -> tuple[list[dict[str, Any]], set[tuple[int, int]]]:
    """The recorded errors (address, word index in the tested memory or -1, bits flipped) and their (word, xor)."""
    addr = cp.asnumpy(buf.addr)[: min(records, RECORD_CAP)]
    xor = cp.asnumpy(buf.xor)[: addr.size]
    ptrs = [(int(ch.data.ptr), int(ch.size), base) for ch, base in zip(buf.chunks, buf.bases, strict=True)]
    located: list[dict[str, Any]] = []
    found_words: set[tuple[int, int]] = set()
    for va, x in zip(addr.tolist(), xor.tolist(), strict=True):
        index = next((base + (va - p) // 4 for p, size, base in ptrs if p <= va < p + 4 * size), -1)
        located.append({"address": f"0x{va:x}", "word": index, "xor": f"0x{x:08x}"})
        found_words.add((index, x))
    return located, found_words


def _inject(
    cp: Any, flip: Any, chunks: Sequence[Any], bases: Sequence[int], flips: tuple[np.ndarray, np.ndarray]
) -> None:
    """Flip the planned bits (test mode), each in the chunk that holds its word."""
    idx, masks = flips
    for ch, base in zip(chunks, bases, strict=True):
        sel = (idx >= base) & (idx < base + ch.size)
        if sel.any():
            local = cp.asarray((idx[sel] - np.uint64(base)).astype(np.uint64))
            mk = cp.asarray(masks[sel])
            flip(((int(sel.sum()) + THREADS - 1) // THREADS,), (THREADS,), (ch, local, mk, np.int32(sel.sum())))


# --- bandwidth -----------------------------------------------------------------------------


def probe_bandwidth(ctx: Ctx, deadline: float) -> ProbeResult:
    """Device-memory copy kernel, read + write bytes counted; the copy is verified."""
    cp = ctx.cp
    mod = ctx.module("bandwidth.cu")
    free, _ = cp.cuda.runtime.memGetInfo()
    nbytes = min(BANDWIDTH_MAX_BYTES, int(free * 0.2)) // (16 * THREADS) * (16 * THREADS)
    n16 = nbytes // 16
    src = cp.empty(nbytes // 4, cp.uint32)
    dst = cp.empty(nbytes // 4, cp.uint32)
    u64 = np.uint64
    mod.get_function("bw_fill")(ctx.grid(), (THREADS,), (src, u64(n16), u64(ctx.seed)))
    copy = mod.get_function("bw_copy")

    def launch() -> None:
        copy(ctx.grid(), (THREADS,), (src, dst, u64(n16)))

    rates = _rates(ctx, launch, 2 * nbytes, deadline)
    counters = cp.zeros(1, cp.uint64)
    mod.get_function("bw_verify")(ctx.grid(), (THREADS,), (dst, u64(n16), u64(ctx.seed), counters))
    errors = int(counters.get()[0])
    value = statistics.median(rates)
    details: dict[str, Any] = {"bytes_per_copy": nbytes, "copies": len(rates), "gbps_best": round(max(rates), 1)}
    if ctx.baseline:
        base = _rates(ctx, lambda: dst.data.copy_from_device_async(src.data, nbytes), 2 * nbytes, time.monotonic() + 2)
        b = statistics.median(base)
        details.update(baseline="cudaMemcpyAsync device-to-device (CuPy)", baseline_gbps=round(b, 1),
                       ratio_to_baseline=round(value / b, 3))  # fmt: skip
    return ProbeResult("bandwidth", "pass", value=round(value, 1), errors=errors, details=details)


def _rates(ctx: Ctx, launch: Callable[[], None], nbytes: int, deadline: float) -> list[float]:
    launch()  # warm-up
    rates: list[float] = []
    while len(rates) < 3 or (time.monotonic() < deadline and len(rates) < 200):
        rates.append(nbytes / ctx.timed(launch) / 1e9)
    return rates


# --- PCIe ----------------------------------------------------------------------------------


def probe_pcie(ctx: Ctx, deadline: float) -> ProbeResult:
    """Host<->device copies between pinned host memory and the GPU; value = the slower direction."""
    cp = ctx.cp
    rt = cp.cuda.runtime
    nbytes = PCIE_BYTES
    h_src = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
    h_dst = np.frombuffer(cp.cuda.alloc_pinned_memory(nbytes), np.uint8, nbytes)
    h_src[:] = np.random.default_rng(ctx.seed).integers(0, 256, nbytes, dtype=np.uint8)
    d = cp.empty(nbytes, cp.uint8)
    stream = cp.cuda.get_current_stream().ptr
    h2d_kind, d2h_kind = rt.memcpyHostToDevice, rt.memcpyDeviceToHost
    half = time.monotonic() + (deadline - time.monotonic()) / 2
    h2d = _rates(ctx, lambda: rt.memcpyAsync(d.data.ptr, h_src.ctypes.data, nbytes, h2d_kind, stream), nbytes, half)
    d2h = _rates(ctx, lambda: rt.memcpyAsync(h_dst.ctypes.data, d.data.ptr, nbytes, d2h_kind, stream), nbytes, deadline)
    errors = int(np.count_nonzero(h_src != h_dst))
    value = min(statistics.median(h2d), statistics.median(d2h))
    details = {
        "bytes_per_copy": nbytes,
        "h2d_gbps": round(statistics.median(h2d), 2),
        "d2h_gbps": round(statistics.median(d2h), 2),
        "round_trip_byte_errors": errors,
    }
    return ProbeResult("pcie", "pass", value=round(value, 2), errors=errors, details=details)


PROBES: dict[str, Callable[[Ctx, float], ProbeResult]] = {
    "gemm": probe_gemm,
    "gemm_fp32": lambda ctx, deadline: probe_gemm(ctx, deadline, fp32=True),
    "memtest": probe_memtest,
    "bandwidth": probe_bandwidth,
    "pcie": probe_pcie,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the tests named on the command line; print one result line each."""
    p = argparse.ArgumentParser(prog="python -m kernels.probe_child")
    p.add_argument("--gpu-index", type=int, required=True)
    p.add_argument("--gpu-uuid", default="")
    p.add_argument("--model", default="")
    p.add_argument("--tests", required=True)
    p.add_argument("--budget", type=float, required=True)
    p.add_argument("--inject", action="store_true", help="test mode: inject faults the probes must find")
    p.add_argument("--baseline", action="store_true", help="also time cuBLAS GEMM and CuPy's device copy")
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args(argv)
    started = time.monotonic()
    tests = exp.parse_tests(args.tests)
    ident = {"gpu_index": args.gpu_index, "gpu_uuid": args.gpu_uuid, "model_name": args.model}

    def all_error(reason: str) -> int:
        for t in tests:
            emit(ProbeResult(t, "error", unit=exp.UNITS[t], details={"reason": reason}, **ident))
        return 0

    try:
        import cupy as cp
    except ImportError:
        return all_error(CUPY_MISSING)
    except Exception as err:  # a CuPy built for another CUDA, a missing libcuda
        return all_error(f"CuPy failed to import: {_one_line(err)}")
    try:
        device = 0 if os.environ.get("CUDA_VISIBLE_DEVICES") else args.gpu_index
        cp.cuda.Device(device).use()
        props = cp.cuda.runtime.getDeviceProperties(device)
    except Exception as err:
        return all_error(f"no usable CUDA device {args.gpu_index}: {_one_line(err)}")
    seed = args.seed if args.seed is not None else int(time.time()) & 0xFFFFFFFF
    ctx = Ctx(cp, int(props["multiProcessorCount"]), args.inject, args.baseline, seed)
    budget_end = started + args.budget
    for i, test in enumerate(tests):
        weights = [exp.WEIGHTS[t] for t in tests[i:]]
        t0 = time.monotonic()
        deadline = t0 + max(0.0, budget_end - t0) * weights[0] / sum(weights)
        try:
            result = PROBES[test](ctx, deadline)
        except Exception as err:
            result = ProbeResult(test, "error", details={"reason": f"{type(err).__name__}: {_one_line(err)}"})
        finally:
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
        result.gpu_index, result.gpu_uuid = args.gpu_index, args.gpu_uuid
        result.duration_s = round(time.monotonic() - t0, 3)
        result.ran_at = time.time()
        if result.value is not None and not math.isfinite(result.value):
            result.value = None
        emit(judge(result, args.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
