// Prints what kernels/common.cuh computes, on the host (no GPU needed), for
// tests/kernels/test_reference.py to compare with kernels/reference.py.
#include <cstdio>

#include "common.cuh"

int main() {
    const gh_u64 seeds[] = {0ULL, 12345ULL, 0xFFFFFFFFFFFFFFFFULL};
    for (gh_u64 seed : seeds) {
        for (gh_u64 i = 0; i < 512; ++i) {
            std::printf("hash %llu %llu %llu %d\n", seed, i, gh_hash(seed, i), gh_gemm_int(seed, i));
        }
    }
    const gh_u64 args[] = {0ULL, 0x55555555ULL, 7ULL, 31ULL};
    for (int kind = 0; kind < 4; ++kind) {
        for (gh_u64 arg : args) {
            for (gh_u64 i = 0; i < 96; ++i) {
                std::printf("pattern %d %llu %llu %u\n", kind, arg, i, gh_pattern(kind, arg, i));
            }
        }
    }
    return 0;
}
