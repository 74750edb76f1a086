#!/usr/bin/env bash
# One script for the GPU machine: builds the GPU harness with nvcc (no CMake packages needed there:
# no Catch2, no nlohmann-json), runs every GPU check of tests/gpu against the CPU reference, then
# times the kernels at the released shapes and prints the table (also written as markdown to
# $OUT/gpu_results.md, or build/gpu/out/ when OUT is unset).
#
#   bash tools/gpu/run_all.sh [--checks-only | --bench-only]     (OPS="attention moe": only those ops; copy always)
#
# Build products go to build/gpu/ (ignored by git). A harness or ref_cpu.o already there is reused
# only when its stamp (a hash of the sources it was built from) matches the current sources, so a
# build made on another machine can be carried to save device time; anything stale is rebuilt.
# The CPU reference (tests/gpu/ref_cpu.cpp, which includes nlohmann-json through cpu/ops.hpp) is a
# host-only object; the .cu files never include it.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build/gpu
OUTDIR=${OUT:-$B/out}
mkdir -p "$B" "$OUTDIR"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CXX=${CXX:-g++}
NVFLAGS="-std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 -Iinclude"
CXXFLAGS="-std=c++20 -O2 -ffp-contract=off -Iinclude"

hash_of() { find "$@" -type f \( -name '*.hpp' -o -name '*.cuh' -o -name '*.cu' -o -name '*.cpp' \) | sort | xargs cat | sha256sum | cut -c1-16; }
# ref_cpu.o: the project headers it includes (as g++ lists them); the harness: the CUDA headers and checks.
REF_DEPS=$($CXX -std=c++20 -Iinclude -MM -MG tests/gpu/ref_cpu.cpp | tr -d '\\' | tr ' ' '\n' | grep -E '^(include|tests)/' | sort -u)
REF_STAMP=$(cat $REF_DEPS | sha256sum | cut -c1-16)
ALL_STAMP=$(echo "$REF_STAMP $(hash_of include/dsv41/backend/cuda include/dsv41/numeric include/dsv41/core tests/gpu bench/gpu_bench.cuh tools/gpu)" | sha256sum | cut -c1-16)

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null || true

if [[ -x $B/harness && "$(cat $B/harness.stamp 2>/dev/null)" == "$ALL_STAMP" ]] &&
   $B/harness --checks-only --only=none > /dev/null 2>&1; then
  echo "harness: reusing $B/harness (stamp $ALL_STAMP)"
else
  t0=$(date +%s)
  pids=()
  if [[ ! -f $B/ref_cpu.o || "$(cat $B/ref_cpu.stamp 2>/dev/null)" != "$REF_STAMP" ]]; then
    ( $CXX $CXXFLAGS -c tests/gpu/ref_cpu.cpp -o $B/ref_cpu.o && echo "$REF_STAMP" > $B/ref_cpu.stamp ) & pids+=($!)
  fi
  $NVCC $NVFLAGS -c bench/gpu_harness.cu -o $B/harness.o & pids+=($!)
  for p in "${pids[@]}"; do wait "$p"; done
  $NVCC -gencode=arch=compute_90a,code=sm_90a $B/harness.o $B/ref_cpu.o -lcublasLt -o $B/harness
  echo "$ALL_STAMP" > $B/harness.stamp
  echo "harness: built in $(( $(date +%s) - t0 )) s"
fi

# One process per op, so that a device fault in one check cannot hide the others.
MD="$OUTDIR/gpu_results.md"
: > "$MD"
: > "$OUTDIR/harness.log"
MODE=${1:-all}
fail=0
if [[ $MODE != --bench-only ]]; then
  for op in ${OPS:-rmsnorm act_quant gemm attention indexer mhc moe}; do
    $B/harness --checks-only --only=$op --md="$MD" 2>&1 | tee -a "$OUTDIR/harness.log" | grep -v '^device:' || fail=1
  done
fi
if [[ $MODE != --checks-only ]]; then
  echo >> "$MD"
  for op in copy ${OPS:-rmsnorm act_quant gemm attention indexer mhc moe}; do
    $B/harness --bench-only --only=$op --md="$MD.$op" >> "$OUTDIR/harness.log" 2>&1 || fail=1
  done
  first=1
  for op in copy rmsnorm act_quant gemm attention indexer mhc moe; do
    [[ -f "$MD.$op" ]] || continue
    if [[ $first == 1 ]]; then cat "$MD.$op" >> "$MD"; first=0; else tail -n +3 "$MD.$op" >> "$MD"; fi
    rm -f "$MD.$op"
  done
  grep -h "ERROR" "$OUTDIR/harness.log" || true
  echo
  tail -n +1 "$MD" | sed -n '/^| op /,$p'
fi
echo "checks: $(grep -c ' PASS ' "$OUTDIR/harness.log" || true) passed, $(grep -cE ' FAIL |ERROR' "$OUTDIR/harness.log" || true) failed"
exit $fail
