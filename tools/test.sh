#!/usr/bin/env bash
# Installs what is missing, builds everything (CUDA parts compile where nvcc exists) and runs every
# test that needs no GPU: unit tests, readers under ASan/UBSan, the CLI, the installed package.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD=${BUILD:-build/test}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j "$(nproc)"
ctest --test-dir "$BUILD" --output-on-failure -j "$(nproc)" -E '\[gpu\]'
