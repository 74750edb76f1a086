#!/usr/bin/env bash
# The continuous-batching engine on the released-width 12-layer stack (bench/bench_engine_gpu.cu), for the GPU
# machine:
#
#   bash tools/gpu/engine_bench.sh [bench_engine_gpu options, e.g. --concurrency 1,8 --gen 32]
#
# Builds build/gpu/bench_engine_gpu with nvcc (or reuses it, tools/gpu/build_tool.sh); BUILD_ONLY=1 stops there.
# With OUT set, the table is also written to $OUT/engine_bench.md. Needs ~92 GB of device memory at 12 layers
# and ~2 GB of host memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/build_tool.sh
build_tool bench/bench_engine_gpu.cu bench_engine_gpu
[[ -n "${BUILD_ONLY:-}" ]] && exit 0
ARGS=("$@")
[[ -n "${OUT:-}" ]] && ARGS+=(--out "$OUT/engine_bench.md")
exec build/gpu/bench_engine_gpu "${ARGS[@]}"
