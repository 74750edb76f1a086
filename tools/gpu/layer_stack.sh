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
B=build/gpu
mkdir -p "$B"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
INC="-Iinclude"
[[ -d .devdeps/include ]] && INC="$INC -I.devdeps/include"
LIB=/usr/lib/x86_64-linux-gnu/libutf8proc.a
[[ -f $LIB ]] || LIB=.devdeps/lib/libutf8proc.a
NVFLAGS="-std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 $INC"
SRC=bench/bench_layer_stack.cu
DEPS=$($NVCC -std=c++20 --expt-relaxed-constexpr $INC -M $SRC 2>/dev/null | tr -d '\\' | tr ' ' '\n' |
       grep -E '^(include|bench)/' | sort -u)
STAMP=$(cat $DEPS | sha256sum | cut -c1-16)
if [[ -x $B/bench_layer_stack && "$(cat $B/bench_layer_stack.stamp 2>/dev/null)" == "$STAMP" ]]; then
  echo "bench_layer_stack: reusing $B/bench_layer_stack (stamp $STAMP)"
else
  t0=$(date +%s)
  $NVCC $NVFLAGS $SRC $LIB -o $B/bench_layer_stack
  echo "$STAMP" > $B/bench_layer_stack.stamp
  echo "bench_layer_stack: built in $(( $(date +%s) - t0 )) s"
fi
ARGS=("$@")
[[ -n "${OUT:-}" ]] && ARGS+=(--out "$OUT/layer_stack.md")
[[ -n "${BUILD_ONLY:-}" ]] && exit 0
exec $B/bench_layer_stack "${ARGS[@]}"
