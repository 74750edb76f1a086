#!/usr/bin/env bash
# Installs what is missing, builds everything (CUDA parts compile where nvcc exists) and runs every
# test that needs no GPU: unit tests, readers under ASan/UBSan, the CLI, the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD=${BUILD:-build/test}
# The threaded parts run again under TSan (dsv41_tsan_tests), the readers and the fuzz corpora under ASan + UBSan.
# DSV41_SANITIZE=ON builds the whole unit and CLI suites under ASan + UBSan too (off here: on the 2-core CI machine
# it more than doubles the build, past 40 minutes; run it with DSV41_SANITIZE=ON bash tools/test.sh).
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV41_SANITIZE=${DSV41_SANITIZE:-OFF}
cmake --build "$BUILD" -j "$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" -E '\[gpu\]'
