#!/usr/bin/env bash
# Everything for the Model<Config, Cuda> work in one device call (issue 4): builds the golden tool and the
# layer-stack bench on the GPU machine while the carried GPU test binary runs, then the golden check on the
# GPU and the released-width layer-stack decode benchmark. Logs and tables go to $OUT (or build/gpu/out).
#
#   bash tools/gpu/session.sh            # carried: .devlibs/dsv41_gpu_tests (+ libutf8proc), .devdeps
#   TESTS="[gpu]" SKIP_STACK=1 bash tools/gpu/session.sh   # every GPU test, no layer-stack bench
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-build/gpu/out}
mkdir -p "$OUT" build/gpu
export OUT LD_LIBRARY_PATH=$PWD/.devlibs:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>/dev/null
t0=$(date +%s)
BUILD_ONLY=1 bash tools/gpu/golden.sh > "$OUT/build_golden.log" 2>&1 & bg1=$!
if [[ -z "${SKIP_STACK:-}" ]]; then BUILD_ONLY=1 bash tools/gpu/layer_stack.sh > "$OUT/build_stack.log" 2>&1 & bg2=$!; else bg2=""; fi
fail=0
TESTS=${TESTS:-[cuda_api],[model],[candidates]}
echo "== GPU tests ($TESTS)"
.devlibs/dsv41_gpu_tests "$TESTS" --durations yes 2>&1 | tee "$OUT/gpu_tests.log" | tail -60 || fail=1
wait $bg1 || { echo "golden build failed"; tail -20 "$OUT/build_golden.log"; fail=1; }
[[ -n $bg2 ]] && { wait $bg2 || { echo "bench build failed"; tail -20 "$OUT/build_stack.log"; fail=1; }; }
echo "== builds: $(cat "$OUT"/build_*.log | grep -h 'built in' | tr '\n' ' ') (wall $(( $(date +%s) - t0 )) s so far)"
echo "== golden on the GPU"
bash tools/gpu/golden.sh tests/data/golden/tiny-ced 2>&1 | tee "$OUT/golden.log" | tail -30 || fail=1
if [[ -z "${SKIP_STACK:-}" ]]; then
  echo "== layer stack"
  bash tools/gpu/layer_stack.sh "$@" 2>&1 | tee "$OUT/layer_stack.log" | tail -40 || fail=1
fi
echo "== total wall $(( $(date +%s) - t0 )) s, fail=$fail"
exit $fail
