#!/usr/bin/env bash
# The golden check on the CUDA model (tools/gpu/golden_cuda.cu), for the GPU machine:
#
#   bash tools/gpu/golden.sh [MODEL_DIR] [--dump FILE] [--quick]
#
# Builds build/gpu/golden_cuda with nvcc, or reuses one whose stamp (a hash of every file the .cu includes
# from this repository, as `nvcc -M` lists them) matches, so a build made elsewhere can be carried. Where
# nlohmann-json or utf8proc are not installed (the GPU machine), it looks in .devdeps/{include,lib}.
# Prints the report of `dsv41 golden`, then CUDA-vs-CPU logits and decode timings; exit 0 on PASS.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/gpu
mkdir -p "$B"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
INC="-Iinclude"
[[ -d .devdeps/include ]] && INC="$INC -I.devdeps/include"
LIB=/usr/lib/x86_64-linux-gnu/libutf8proc.a
[[ -f $LIB ]] || LIB=.devdeps/lib/libutf8proc.a
NVFLAGS="-std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 $INC"
SRC=tools/gpu/golden_cuda.cu
DEPS=$($NVCC -std=c++20 --expt-relaxed-constexpr $INC -M $SRC 2>/dev/null | tr -d '\\' | tr ' ' '\n' |
       grep -E '^(include|tools)/' | sort -u)
STAMP=$(cat $DEPS | sha256sum | cut -c1-16)
if [[ -x $B/golden_cuda && "$(cat $B/golden_cuda.stamp 2>/dev/null)" == "$STAMP" ]]; then
  echo "golden_cuda: reusing $B/golden_cuda (stamp $STAMP)"
else
  t0=$(date +%s)
  $NVCC $NVFLAGS $SRC $LIB -o $B/golden_cuda
  echo "$STAMP" > $B/golden_cuda.stamp
  echo "golden_cuda: built in $(( $(date +%s) - t0 )) s"
fi
[[ -n "${BUILD_ONLY:-}" ]] && exit 0
exec $B/golden_cuda "$@"
