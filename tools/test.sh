#!/usr/bin/env bash
# Installs what is missing, builds everything (CUDA parts compile where nvcc exists) and runs every
# test that needs no GPU: unit tests, readers under ASan/UBSan, the CLI, the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD=${BUILD:-build/test}
# The unit suite runs under ASan + UBSan at -O0 (DSV41_SANITIZE_UNIT=OFF turns it off), the threaded parts again
# under TSan (dsv41_tsan_tests), the readers and the fuzz corpora under ASan + UBSan, and the CLI with its suite (the
# commands, the server's end-to-end tests) under ASan + UBSan (DSV41_SANITIZE_CLI=OFF turns it off).
# Without a GPU the [gpu] test binary is not built (nothing could run it); the CUDA parts of the library, the CLI, the
# C API and the examples still compile with nvcc. DSV41_BUILD_GPU_TESTS=ON builds it anyway.
GPU_TESTS=${DSV41_BUILD_GPU_TESTS:-$([[ -e /dev/nvidia0 ]] && echo ON || echo OFF)}
# Where nothing can run them (no GPU), the .cu units are only compiled, so host and device code at -O0 (about half
# the CPU time of -O3 for c_api_cuda.cu: 66 against 122 CPU-s); with a GPU, -O3.
CUDA_FLAGS=${DSV41_CUDA_FLAGS_RELEASE:-$([[ $GPU_TESTS == ON ]] && echo "-O3 -DNDEBUG" || echo "-O0 -Xptxas -O0 -DNDEBUG")}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV41_SANITIZE=${DSV41_SANITIZE:-OFF} \
  -DDSV41_SANITIZE_UNIT=${DSV41_SANITIZE_UNIT:-ON} -DDSV41_SANITIZE_CLI=${DSV41_SANITIZE_CLI:-ON} \
  -DDSV41_BUILD_GPU_TESTS="$GPU_TESTS" -DCMAKE_CUDA_FLAGS_RELEASE="$CUDA_FLAGS"
cmake --build "$BUILD" -j "$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" -E '\[gpu\]'
