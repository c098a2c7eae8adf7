// GEMM check: a tiled fp32 GEMM (CUDA cores) and a Tensor Core GEMM (WMMA, fp16 or bf16
// inputs, fp32 accumulation) on deterministic integer-valued inputs, verified exactly.
//
// Inputs are integers in [-2, 2] generated from a seed (gh_gemm_int), so C = A.B is
// exact in fp32 and verification compares integers. Verification is algorithm-based
// fault tolerance (Huang & Abraham, 1984): each row sum of C must equal A.(B.1) and each
// column sum 1^T A.B, both recomputed in 64-bit integers *from the seeds*, not from the
// buffers, so corrupted inputs are caught too. A wrong element shows as a bad row and a
// bad column; candidate cells (bad rows x bad columns) are recomputed one by one to count
// and locate the mismatches. Non-integer or out-of-range elements (a flipped low mantissa
// bit, a NaN) are caught element-wise by gemm_row_sums.
//
// Layout: row-major, A is M x K, B is K x N, C is M x N.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>

#include "common.cuh"

#define GH_SEED_A(seed) (seed)
#define GH_SEED_B(seed) ((seed) ^ 0x5DEECE66DULL)

// --- inputs ------------------------------------------------------------------------------

extern "C" __global__ void gemm_fill_f32(float* out, gh_u64 n, gh_u64 seed) {
    for (gh_u64 i = blockIdx.x * (gh_u64)blockDim.x + threadIdx.x; i < n; i += (gh_u64)gridDim.x * blockDim.x) {
        out[i] = (float)gh_gemm_int(seed, i);
    }
}

extern "C" __global__ void gemm_fill_f16(__half* out, gh_u64 n, gh_u64 seed) {
    for (gh_u64 i = blockIdx.x * (gh_u64)blockDim.x + threadIdx.x; i < n; i += (gh_u64)gridDim.x * blockDim.x) {
        out[i] = __int2half_rn(gh_gemm_int(seed, i));
    }
}

extern "C" __global__ void gemm_fill_bf16(__nv_bfloat16* out, gh_u64 n, gh_u64 seed) {
    for (gh_u64 i = blockIdx.x * (gh_u64)blockDim.x + threadIdx.x; i < n; i += (gh_u64)gridDim.x * blockDim.x) {
        out[i] = __int2bfloat16_rn(gh_gemm_int(seed, i));
    }
}

// --- fp32 tiled GEMM: 128x128 block tile, BK = 8, 256 threads, 8x8 outputs per thread ----

#define SG_BM 128
#define SG_BN 128
#define SG_BK 8
#define SG_TM 8
#define SG_TN 8

// Needs M % 128 == 0, N % 128 == 0, K % 8 == 0 (the runner picks such sizes).
extern "C" __global__ void __launch_bounds__(256) sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                                              float* __restrict__ C, int M, int N, int K) {
    __shared__ float As[SG_BK][SG_BM];  // transposed: As[k][m]
    __shared__ float Bs[SG_BK][SG_BN];
    const int tid = threadIdx.x;
    const int row0 = blockIdx.y * SG_BM;
    const int col0 = blockIdx.x * SG_BN;
    const int ty = tid / (SG_BN / SG_TN);  // 0..15
    const int tx = tid % (SG_BN / SG_TN);  // 0..15
    float acc[SG_TM][SG_TN] = {};
    float a_reg[SG_TM];
    float b_reg[SG_TN];
    // Loaders: A tile 128 x 8 (one float4 of a row per thread), B tile 8 x 128 (float4 per thread).
    const int a_row = tid / 2, a_col = (tid % 2) * 4;
    const int b_row = tid / 32, b_col = (tid % 32) * 4;
    for (int k0 = 0; k0 < K; k0 += SG_BK) {
        const float4 a4 = *reinterpret_cast<const float4*>(&A[(gh_u64)(row0 + a_row) * K + k0 + a_col]);
        As[a_col + 0][a_row] = a4.x;
        As[a_col + 1][a_row] = a4.y;
        As[a_col + 2][a_row] = a4.z;
        As[a_col + 3][a_row] = a4.w;
        *reinterpret_cast<float4*>(&Bs[b_row][b_col]) =
            *reinterpret_cast<const float4*>(&B[(gh_u64)(k0 + b_row) * N + col0 + b_col]);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < SG_BK; ++k) {
#pragma unroll
            for (int i = 0; i < SG_TM; ++i) a_reg[i] = As[k][ty * SG_TM + i];
#pragma unroll
            for (int j = 0; j < SG_TN; ++j) b_reg[j] = Bs[k][tx * SG_TN + j];
#pragma unroll
            for (int i = 0; i < SG_TM; ++i)
#pragma unroll
                for (int j = 0; j < SG_TN; ++j) acc[i][j] = fmaf(a_reg[i], b_reg[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < SG_TM; ++i) {
        float* out = &C[(gh_u64)(row0 + ty * SG_TM + i) * N + col0 + tx * SG_TN];
#pragma unroll
        for (int j = 0; j < SG_TN; j += 4) {
            *reinterpret_cast<float4*>(&out[j]) = make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
        }
    }
}

// --- Tensor Core GEMM (WMMA): 128x128 block tile, BK = 32, 8 warps of 64x32 each ------------

#define TC_BM 128
#define TC_BN 128
#define TC_BK 32
#define TC_PAD 8  // halves of padding per shared row: breaks bank conflicts of fragment loads

// Needs M % 128 == 0, N % 128 == 0, K % 32 == 0. T is __half or __nv_bfloat16.
template <typename T>
__device__ __forceinline__ void wmma_gemm(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C,
                                          int M, int N, int K) {
    using namespace nvcuda;
    __shared__ __align__(16) T As[2][TC_BM][TC_BK + TC_PAD];
    __shared__ __align__(16) T Bs[2][TC_BK][TC_BN + TC_PAD];
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int warp_m = warp / 4;  // 0..1: 64 rows each
    const int warp_n = warp % 4;  // 0..3: 32 columns each
    const int row0 = blockIdx.y * TC_BM;
    const int col0 = blockIdx.x * TC_BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    // Each thread moves 2 x 16 bytes of the A tile (128 x 32) and 2 x 16 bytes of B (32 x 128).
    auto load = [&](int buf, int k0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int idx = tid + r * 256;  // 0..511
            const int a_row = idx / 4, a_col = (idx % 4) * 8;
            *reinterpret_cast<uint4*>(&As[buf][a_row][a_col]) =
                *reinterpret_cast<const uint4*>(&A[(gh_u64)(row0 + a_row) * K + k0 + a_col]);
            const int b_row = idx / 16, b_col = (idx % 16) * 8;
            *reinterpret_cast<uint4*>(&Bs[buf][b_row][b_col]) =
                *reinterpret_cast<const uint4*>(&B[(gh_u64)(k0 + b_row) * N + col0 + b_col]);
        }
    };
    load(0, 0);
    __syncthreads();
    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += TC_BK) {
        if (k0 + TC_BK < K) load(buf ^ 1, k0 + TC_BK);  // next tile while this one computes
#pragma unroll
        for (int kk = 0; kk < TC_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b[2];
#pragma unroll
            for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(a[i], &As[buf][warp_m * 64 + i * 16][kk], TC_BK + TC_PAD);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[buf][kk][warp_n * 32 + j * 16], TC_BN + TC_PAD);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
        buf ^= 1;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            float* out = &C[(gh_u64)(row0 + warp_m * 64 + i * 16) * N + col0 + warp_n * 32 + j * 16];
            wmma::store_matrix_sync(out, acc[i][j], N, wmma::mem_row_major);
        }
}

extern "C" __global__ void __launch_bounds__(256) gemm_wmma_f16(const __half* A, const __half* B, float* C, int M, int N,
                                                               int K) {
    wmma_gemm<__half>(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(256) gemm_wmma_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B,
                                                                float* C, int M, int N, int K) {
    wmma_gemm<__nv_bfloat16>(A, B, C, M, N, K);
}

// --- verification ------------------------------------------------------------------------

// out[k] = sum_j b(k, j): the row sums of B, from the seed (one thread per k).
extern "C" __global__ void gemm_b_rowsum(gh_u64 seed, int K, int N, gh_i64* out) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    gh_i64 s = 0;
    for (int j = 0; j < N; ++j) s += gh_gemm_int(GH_SEED_B(seed), (gh_u64)k * N + j);
    out[k] = s;
}

// out[k] = sum_i a(i, k): the column sums of A, from the seed.
extern "C" __global__ void gemm_a_colsum(gh_u64 seed, int M, int K, gh_i64* out) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    gh_i64 s = 0;
    for (int i = 0; i < M; ++i) s += gh_gemm_int(GH_SEED_A(seed), (gh_u64)i * K + k);
    out[k] = s;
}

// Expected row sums of C: out[i] = sum_k a(i, k) * brow[k].
extern "C" __global__ void gemm_expect_rows(gh_u64 seed, int M, int K, const gh_i64* brow, gh_i64* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M) return;
    gh_i64 s = 0;
    for (int k = 0; k < K; ++k) s += (gh_i64)gh_gemm_int(GH_SEED_A(seed), (gh_u64)i * K + k) * brow[k];
    out[i] = s;
}

// Expected column sums of C: out[j] = sum_k acol[k] * b(k, j).
extern "C" __global__ void gemm_expect_cols(gh_u64 seed, int K, int N, const gh_i64* acol, gh_i64* out) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    gh_i64 s = 0;
    for (int k = 0; k < K; ++k) s += acol[k] * (gh_i64)gh_gemm_int(GH_SEED_B(seed), (gh_u64)k * N + j);
    out[j] = s;
}

// Row sums of C as integers (one block of 256 threads per row). An element that is not an
// integer within [-limit, limit] (or is NaN) is counted in counters[0] and recorded.
extern "C" __global__ void gemm_row_sums(const float* C, int M, int N, float limit, gh_i64* rows, gh_u64* counters,
                                         int* rec_row, int* rec_col, float* rec_val, unsigned int cap) {
    __shared__ gh_i64 part[256];
    const int i = blockIdx.x;
    gh_i64 s = 0;
    for (int j = threadIdx.x; j < N; j += blockDim.x) {
        const float c = C[(gh_u64)i * N + j];
        if (!(c == rintf(c) && fabsf(c) <= limit)) {
            const gh_u64 slot = atomicAdd(&counters[0], 1ULL);
            if (slot < cap) {
                rec_row[slot] = i;
                rec_col[slot] = j;
                rec_val[slot] = c;
            }
        } else {
            s += (gh_i64)c;
        }
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) rows[i] = part[0];
}

// Column sums of C as integers (one thread per column: coalesced across the warp).
// Non-integer elements count as 0 here; gemm_row_sums reports them.
extern "C" __global__ void gemm_col_sums(const float* C, int M, int N, float limit, gh_i64* cols) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= N) return;
    gh_i64 s = 0;
    for (int i = 0; i < M; ++i) {
        const float c = C[(gh_u64)i * N + j];
        if (c == rintf(c) && fabsf(c) <= limit) s += (gh_i64)c;
    }
    cols[j] = s;
}

// Recompute candidate cells (rows[t], cols[t]) from the seeds; want[t] = exact value,
// bad[t] = 1 when C differs. One thread per candidate.
extern "C" __global__ void gemm_check_cells(const float* C, gh_u64 seed, int N, int K, const int* rows, const int* cols,
                                            int count, gh_i64* want, int* bad) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= count) return;
    const int i = rows[t], j = cols[t];
    gh_i64 s = 0;
    for (int k = 0; k < K; ++k) {
        s += (gh_i64)gh_gemm_int(GH_SEED_A(seed), (gh_u64)i * K + k) * gh_gemm_int(GH_SEED_B(seed), (gh_u64)k * N + j);
    }
    want[t] = s;
    bad[t] = C[(gh_u64)i * N + j] != (float)s;
}

// Fault injection (test mode): add `delta` to the h x w tile of C at (r0, c0).
extern "C" __global__ void gemm_perturb(float* C, int N, int r0, int c0, int h, int w, float delta) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= h * w) return;
    C[(gh_u64)(r0 + t / w) * N + c0 + t % w] += delta;
}
