#!/usr/bin/env bash
# Sessions on the GPU at released widths (bench/bench_session_gpu.cu), for the GPU machine:
#
#   bash tools/gpu/session_bench.sh [bench_session_gpu options, e.g. --layers 6 --contexts 4096,32768]
#
# Builds build/gpu/bench_session_gpu with nvcc (or reuses it, tools/gpu/build_tool.sh). The session headers need
# xxhash.h: where the machine lacks it, copy /usr/include/xxhash.h into .devdeps/include first. With OUT set, the
# table is also written to $OUT/session_gpu.md. Needs ~92 GB of device memory at 12 layers and a few hundred MB
# of disk in the temp dir.
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ -f /usr/include/xxhash.h || -f .devdeps/include/xxhash.h ]] || { echo "xxhash.h missing: copy it to .devdeps/include"; exit 1; }
source tools/gpu/build_tool.sh
build_tool bench/bench_session_gpu.cu bench_session_gpu
[[ -n "${BUILD_ONLY:-}" ]] && exit 0
ARGS=("$@")
[[ -n "${OUT:-}" ]] && ARGS+=(--out "$OUT/session_gpu.md")
exec build/gpu/bench_session_gpu "${ARGS[@]}"
