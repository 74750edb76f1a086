#!/usr/bin/env bash
# Goldens and the [gpu] suite (session 16 run 3).
set -uo pipefail
cd "$(dirname "$0")/../.."
( bash tools/gpu/build_gpu_tests.sh > build/gpu_tests_build.log 2>&1; echo "build rc $?" >> build/gpu_tests_build.log ) &
bp=$!
for m in tests/data/golden/tiny-ced tests/data/golden/vision-tiny; do
  timeout 200 bash tools/gpu/golden.sh $m --quick > build/golden_$(basename $m).log 2>&1; echo "golden $m rc $?"
  grep -iE "pass|fail|verdict" build/golden_$(basename $m).log | head -5
done
wait $bp; tail -3 build/gpu_tests_build.log
timeout 300 build/gpu/tests/dsv41_gpu_tests "[gpu]" 2>&1 | tail -6
