#!/usr/bin/env bash
# Decode benchmark of the released-width 12-layer stack (bench/bench_layer_stack.cu), for the GPU machine:
#
#   bash tools/gpu/layer_stack.sh [bench_layer_stack options, e.g. --batches 1,8 --steps 10]
#
# Builds build/gpu/bench_layer_stack with nvcc, or reuses one whose stamp (a hash of every repository file
# the .cu includes, as `nvcc -M` lists them) matches, so a build made elsewhere can be carried. Where
# nlohmann-json or utf8proc are not installed, it looks in .devdeps/{include,lib}. With OUT set, the
# table is also written to $OUT/layer_stack.md. Needs ~92 GB of device memory and ~2 GB of host memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/build_tool.sh
build_tool bench/bench_layer_stack.cu bench_layer_stack
[[ -n "${BUILD_ONLY:-}" ]] && exit 0
ARGS=("$@")
[[ -n "${OUT:-}" ]] && ARGS+=(--out "$OUT/layer_stack.md")
exec build/gpu/bench_layer_stack "${ARGS[@]}"
