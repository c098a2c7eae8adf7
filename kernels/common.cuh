// Shared by every probe kernel and by the host-side check in tests/kernels: the input
// generator and the memtest patterns are __host__ __device__ so the CPU references
// (kernels/reference.py) can be checked against exactly this code without a GPU.
#pragma once

typedef unsigned long long gh_u64;
typedef long long gh_i64;

#if defined(__CUDACC__)
#define GH_HD __host__ __device__ __forceinline__
#else
#define GH_HD inline
#endif

// splitmix64's finaliser: a cheap, well-mixed 64-bit hash (Steele, Lea, Flood 2014).
GH_HD gh_u64 gh_mix64(gh_u64 x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

// A pseudo-random 64-bit value for element `idx` of the stream `seed`.
GH_HD gh_u64 gh_hash(gh_u64 seed, gh_u64 idx) { return gh_mix64(gh_mix64(seed) ^ idx); }

// GEMM inputs are small integers in [-2, 2]: exact in fp16, bf16 and fp32, and every
// partial sum of K <= 8192 products stays below 2^24, so the product is exact and the
// verification compares integers, with no tolerance to tune.
GH_HD int gh_gemm_int(gh_u64 seed, gh_u64 idx) { return (int)(gh_hash(seed, idx) % 5ULL) - 2; }

// Memtest patterns: the 32-bit word expected at word index `i` of the tested region.
#define GH_PAT_CONST 0   // every word = arg (moving inversions with a fixed pattern)
#define GH_PAT_RANDOM 1  // a hash of (arg, i): catches address-decoding faults
#define GH_PAT_WALK1 2   // one set bit, rotating with the address and the step `arg`
#define GH_PAT_WALK0 3   // the inverse: one clear bit

GH_HD unsigned int gh_pattern(int kind, gh_u64 arg, gh_u64 i) {
    switch (kind) {
        case GH_PAT_CONST:
            return (unsigned int)arg;
        case GH_PAT_RANDOM:
            return (unsigned int)gh_hash(arg, i);
        case GH_PAT_WALK1:
            return 1u << (unsigned int)((i + arg) & 31ULL);
        default:
            return ~(1u << (unsigned int)((i + arg) & 31ULL));
    }
}
