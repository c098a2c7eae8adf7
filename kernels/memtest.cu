// memtest: moving inversions and walking ones/zeros over device memory, in chunks.
//
// Every word's expected value is a function of its index (kernels/common.cuh), so a
// check needs no second copy of the data. A check pass reads each word, counts the
// bits that differ from the expected pattern, records the first few addresses, and
// writes the next pattern (or its inverse) in the same pass: moving inversions
// (memtest86's test 3/4) as one read-modify-write sweep per direction.
#include "common.cuh"

// Fill words [0, n) of `buf` (index base + i in the region) with the pattern or its inverse.
extern "C" __global__ void mt_write(unsigned int* buf, gh_u64 n, gh_u64 base, int kind, gh_u64 arg, int invert) {
    const unsigned int flip = invert ? 0xFFFFFFFFu : 0u;
    for (gh_u64 i = blockIdx.x * (gh_u64)blockDim.x + threadIdx.x; i < n; i += (gh_u64)gridDim.x * blockDim.x) {
        buf[i] = gh_pattern(kind, arg, base + i) ^ flip;
    }
}

// Check words against the pattern (inverted when `invert`), then, when `write_next`,
// write the pattern inverted by `next_invert`.
// counters[0]: bit errors, counters[1]: words in error, counters[2]: records claimed.
// The first `cap` errors are recorded: device address, the bits that differ, the value read.
extern "C" __global__ void mt_check(unsigned int* buf, gh_u64 n, gh_u64 base, int kind, gh_u64 arg, int invert,
                                    int write_next, int next_invert, gh_u64* counters, gh_u64* rec_addr,
                                    unsigned int* rec_xor, unsigned int* rec_got, unsigned int cap) {
    const unsigned int flip = invert ? 0xFFFFFFFFu : 0u;
    const unsigned int next_flip = next_invert ? 0xFFFFFFFFu : 0u;
    for (gh_u64 i = blockIdx.x * (gh_u64)blockDim.x + threadIdx.x; i < n; i += (gh_u64)gridDim.x * blockDim.x) {
        const unsigned int want = gh_pattern(kind, arg, base + i);
        const unsigned int got = buf[i];
        const unsigned int diff = got ^ (want ^ flip);
        if (diff != 0u) {
            atomicAdd(&counters[0], (gh_u64)__popc(diff));
            atomicAdd(&counters[1], 1ULL);
            const gh_u64 slot = atomicAdd(&counters[2], 1ULL);
            if (slot < cap) {
                rec_addr[slot] = (gh_u64)(buf + i);
                rec_xor[slot] = diff;
                rec_got[slot] = got;
            }
        }
        if (write_next) {
            buf[i] = want ^ next_flip;
        }
    }
}

// Fault injection (test mode): flip `mask[k]` in word `idx[k]` of `buf`.
extern "C" __global__ void mt_flip(unsigned int* buf, const gh_u64* idx, const unsigned int* mask, int count) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k < count) {
        buf[idx[k]] ^= mask[k];
    }
}
