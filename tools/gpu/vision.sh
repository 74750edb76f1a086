#!/usr/bin/env bash
# The CUDA vision tower (issue 17) on the GPU machine: builds the [vision] GPU test and bench/bench_vision.cu
# with plain nvcc, runs the test (vision-tiny golden contract, 5x7 grid vs host reference, attention bound),
# then the bench (released shape, random weights; ms per image at 448x448 and the largest max_image_tokens
# grid). Figures are printed; with OUT set, the bench table also goes to $OUT/vision_bench.md and the test
# log to $OUT/vision_test.txt.
#   bash tools/gpu/vision.sh [--test-only | --bench-only] [bench options: --reps N]
# BUILD_ONLY=1 builds and stops (any machine with nvcc).
# Headers the machine lacks (nlohmann, Catch2) come from .devdeps/include.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/gpu/vision
mkdir -p "$B"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
INC="-Iinclude"
[[ -d .devdeps/include ]] && INC="$INC -I.devdeps/include"
NVFLAGS="-std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 $INC"
DEFS="-DDSV41_TEST_DATA=\"$PWD/tests/data\""
MODE=all
if [[ ${1:-} == --test-only || ${1:-} == --bench-only ]]; then MODE=${1#--}; shift; fi

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null || true
t0=$(date +%s)
pids=()
if [[ $MODE != bench-only ]]; then
  $NVCC $NVFLAGS $DEFS -c tests/gpu/test_vision_gpu.cu -o $B/test_vision_gpu.o & pids+=($!)
  g++ -std=c++20 -O2 $INC -c tests/catch_main.cpp -o $B/catch_main.o & pids+=($!)
fi
if [[ $MODE != test-only ]]; then
  $NVCC $NVFLAGS bench/bench_vision.cu -lcublasLt -o $B/bench_vision & pids+=($!)
fi
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[[ $fail == 0 ]] || { echo "vision: build failed"; exit 1; }
if [[ $MODE != bench-only ]]; then
  $NVCC -gencode=arch=compute_90a,code=sm_90a $B/test_vision_gpu.o $B/catch_main.o -lcublasLt -o $B/test_vision_gpu
fi
echo "vision: built in $(( $(date +%s) - t0 )) s"

[[ -n ${BUILD_ONLY:-} ]] && exit 0
rc=0
if [[ $MODE != bench-only ]]; then
  echo "== test [gpu][vision] =="
  set +e
  $B/test_vision_gpu "[vision]" 2>&1 | tee "${OUT:-$B}/vision_test.txt"
  [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
  set -e
fi
if [[ $MODE != test-only ]]; then
  echo "== bench (released shape) =="
  ARGS=("$@")
  [[ -n ${OUT:-} ]] && ARGS+=(--out "$OUT/vision_bench.md")
  $B/bench_vision "${ARGS[@]}" || rc=1
fi
exit $rc
