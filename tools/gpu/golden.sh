#!/usr/bin/env bash
# The golden check on the CUDA model (tools/gpu/golden_vs_cpu.cu), for the GPU machine:
#
#   bash tools/gpu/golden.sh [MODEL_DIR] [--dump FILE] [--quick]
#
# Builds build/gpu/golden_vs_cpu with nvcc, or reuses one whose stamp (a hash of every file the .cu includes
# from this repository, as `nvcc -M` lists them) matches, so a build made elsewhere can be carried. Where
# nlohmann-json or utf8proc are not installed (the GPU machine), it looks in .devdeps/{include,lib}.
# Prints the report of `dsv41 golden`, then CUDA-vs-CPU logits and decode timings; exit 0 on PASS.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tools/gpu/build_tool.sh
build_tool tools/gpu/golden_vs_cpu.cu golden_vs_cpu
[[ -n "${BUILD_ONLY:-}" ]] && exit 0
exec build/gpu/golden_vs_cpu "$@"
