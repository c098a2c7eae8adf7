// Device-memory bandwidth: a vectorised grid-stride copy (16-byte loads and stores),
// counted as read + write bytes, and a check that the copy is exact.
// Host<->device bandwidth uses pinned buffers and cudaMemcpyAsync (kernels/probe_child.py).
#include "common.cuh"

extern "C" __global__ void bw_fill(uint4* buf, gh_u64 n, gh_u64 seed) {
    for (gh_u64 i = blockIdx.x * (gh_u64)blockDim.x + threadIdx.x; i < n; i += (gh_u64)gridDim.x * blockDim.x) {
        const gh_u64 h = gh_hash(seed, i);
        buf[i] = make_uint4((unsigned int)h, (unsigned int)(h >> 32), (unsigned int)~h, (unsigned int)(i));
    }
}

extern "C" __global__ void bw_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, gh_u64 n) {
    for (gh_u64 i = blockIdx.x * (gh_u64)blockDim.x + threadIdx.x; i < n; i += (gh_u64)gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}

// Count 16-byte words of `buf` that differ from what bw_fill wrote (counters[0]).
extern "C" __global__ void bw_verify(const uint4* buf, gh_u64 n, gh_u64 seed, gh_u64* counters) {
    for (gh_u64 i = blockIdx.x * (gh_u64)blockDim.x + threadIdx.x; i < n; i += (gh_u64)gridDim.x * blockDim.x) {
        const gh_u64 h = gh_hash(seed, i);
        const uint4 v = buf[i];
        if (v.x != (unsigned int)h || v.y != (unsigned int)(h >> 32) || v.z != (unsigned int)~h ||
            v.w != (unsigned int)i) {
            atomicAdd(&counters[0], 1ULL);
        }
    }
}
