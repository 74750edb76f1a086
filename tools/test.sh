#!/usr/bin/env bash
# Installs what is missing, builds everything (CUDA parts compile where nvcc exists) and runs every
# test that needs no GPU: unit tests, readers under ASan/UBSan, the CLI, the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD=${BUILD:-build/test}
# The unit and CLI suites run under ASan + UBSan (DSV41_SANITIZE); the threaded parts again under TSan
# (dsv41_tsan_tests); the fuzz corpora are replayed under ASan + UBSan.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV41_SANITIZE=${DSV41_SANITIZE:-ON}
cmake --build "$BUILD" -j "$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" -E '\[gpu\]'
