"""CUDA stress kernels (GEMM check, memtest, bandwidth) and their runner."""
