#!/usr/bin/env bash
# Builds the [gpu] test binary with plain nvcc on the GPU machine (no CMake packages there), every translation
# unit at once, and prints each unit's compile time (wall seconds, all running together) and their sum. ROOT: the source tree to build
# (default: this one). Headers the machine lacks (nlohmann, Catch2, utf8proc) come from .devdeps/.
#   ROOT=. OUTDIR=build/gpu/tests [DATA=tests/data] bash tools/gpu/build_gpu_tests.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=${ROOT:-.}
B=${OUTDIR:-build/gpu/tests}
mkdir -p "$B"
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
INC="-I$ROOT/include -I.devdeps/include"
# DATA: where the binary finds tests/data (a relative path works when it runs from the repository root, so a
# binary built here can be carried to the GPU machine).
DATA=${DATA:-$PWD/tests/data}
DEFS="-DDSV41_TEST_DATA=\"$DATA\" -DDSV41_FIXTURES=\"$DATA/golden\""
NVFLAGS="-std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 $INC $DEFS"
t0=$(date +%s%N)
pids=()
unit() {  # unit OBJ CMD...: compiles, records the wall time
  local obj=$1; shift
  local s=$(date +%s%N)
  "$@" -c -o "$B/$obj" > "$B/$obj.log" 2>&1 || { cat "$B/$obj.log"; return 1; }
  echo "$obj $(( ($(date +%s%N) - s) / 1000000 ))" >> "$B/times.txt"
}
: > "$B/times.txt"
for f in "$ROOT"/tests/gpu/*.cu; do
  unit "$(basename "$f" .cu).o" $NVCC $NVFLAGS "$f" & pids+=($!)
done
[[ -f $ROOT/tests/gpu/ref_cpu.cpp ]] && { unit ref_cpu.o g++ -std=c++20 -O3 -ffp-contract=off $INC $ROOT/tests/gpu/ref_cpu.cpp & pids+=($!); }
unit catch_main.o g++ -std=c++20 -O2 $INC "$ROOT/tests/catch_main.cpp" & pids+=($!)
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
[[ $fail == 0 ]] || { echo "build failed"; exit 1; }
LIB=/usr/lib/x86_64-linux-gnu/libutf8proc.a
[[ -f $LIB ]] || LIB=.devdeps/lib/libutf8proc.a
# NCCL where the toolkit has it (test_parallel_gpu.cu compiles its NCCL cases only then)
printf '#include <nccl.h>\n' > "$B/has_nccl.cu"
NCCL=""
$NVCC -E "$B/has_nccl.cu" -o /dev/null > /dev/null 2>&1 && NCCL=-lnccl
$NVCC -gencode=arch=compute_90a,code=sm_90a "$B"/*.o $LIB -lcublasLt $NCCL -o "$B/dsv41_gpu_tests"
sort -k2 -n -r "$B/times.txt" | awk '{s += $2; printf "  %-28s %6.1f s\n", $1, $2 / 1000} END {printf "  sum of units %.1f s\n", s / 1000}'
echo "gpu tests: built in $(( ($(date +%s%N) - t0) / 1000000000 )) s wall"
