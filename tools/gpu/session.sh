#!/usr/bin/env bash
# One device call for the model on the GPU: builds the [gpu] test binary, the golden tool and the layer-stack
# bench on the GPU machine (all at once), runs the GPU tests and the golden check, then (unless SKIP_STACK) the
# released-width layer-stack decode bench. With BASE=DIR (a source tree of an earlier commit, e.g. from
# `git archive`), its layer-stack bench is built and run too, in the same call, for before/after figures.
# Logs and tables go to $OUT (or build/gpu/out).
#
#   bash tools/gpu/session.sh                               # tests [gpu], golden, bench
#   TESTS="[cuda_api]" SKIP_STACK=1 bash tools/gpu/session.sh
#   BASE=.devbase STACK_ARGS="--steps 10" bash tools/gpu/session.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/gpu/out}
mkdir -p "$OUT" build/gpu
export OUT
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>/dev/null
t0=$(date +%s)
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
bash tools/gpu/build_gpu_tests.sh > "$OUT/build_tests.log" 2>&1 & bt=$!
BUILD_ONLY=1 bash tools/gpu/golden.sh > "$OUT/build_golden.log" 2>&1 & bg=$!
bs=""; bb=""
if [[ -z "${SKIP_STACK:-}" ]]; then
  BUILD_ONLY=1 bash tools/gpu/layer_stack.sh > "$OUT/build_stack.log" 2>&1 & bs=$!
  if [[ -n "${BASE:-}" ]]; then
    ( s=$(date +%s); $NVCC -std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 \
        -I"$BASE/include" -I.devdeps/include "$BASE/bench/bench_layer_stack.cu" .devdeps/lib/libutf8proc.a \
        -o build/gpu/bench_layer_stack_base && echo "base bench: built in $(( $(date +%s) - s )) s" ) \
      > "$OUT/build_base.log" 2>&1 & bb=$!
  fi
fi
fail=0
wait $bt || { echo "test build failed"; tail -40 "$OUT/build_tests.log"; fail=1; }
cat "$OUT/build_tests.log" | tail -16
TESTS=${TESTS:-[gpu]}
if [[ -x build/gpu/tests/dsv41_gpu_tests ]]; then
  echo "== GPU tests ($TESTS)"
  build/gpu/tests/dsv41_gpu_tests "$TESTS" --durations yes > "$OUT/gpu_tests.log" 2>&1 || fail=1
  grep -E "^[0-9.]+ s: |passed|failed|FAILED|REQUIRE|CHECK|with expansion" "$OUT/gpu_tests.log" | tail -50
fi
wait $bg || { echo "golden build failed"; tail -20 "$OUT/build_golden.log"; fail=1; }
echo "== golden on the GPU"
bash tools/gpu/golden.sh tests/data/golden/tiny-ced > "$OUT/golden.log" 2>&1 || fail=1
grep -E "result|FAIL|error|ms/step|device" "$OUT/golden.log" | head -20
if [[ -n $bs ]]; then
  wait $bs || { echo "bench build failed"; tail -20 "$OUT/build_stack.log"; fail=1; }
  echo "== layer stack (this tree)"
  bash tools/gpu/layer_stack.sh ${STACK_ARGS:-} > "$OUT/layer_stack.log" 2>&1 || fail=1
  grep -E "^\|" "$OUT/layer_stack.log" | head -40
fi
if [[ -n $bb ]]; then
  wait $bb || { echo "base bench build failed"; tail -20 "$OUT/build_base.log"; fail=1; }
  echo "== layer stack (BASE=$BASE)"
  build/gpu/bench_layer_stack_base ${STACK_ARGS:-} > "$OUT/layer_stack_base.log" 2>&1 || fail=1
  grep -E "^\|" "$OUT/layer_stack_base.log" | head -40
fi
cat "$OUT"/build_*.log | grep -h "built in" 
echo "== total wall $(( $(date +%s) - t0 )) s, fail=$fail"
exit $fail
