#!/usr/bin/env bash
# Session 18 run 1: session 17's pending decode-MoE run (tools/gpu/decode_moe_next.sh), then a profiled stack decode
# (sections, graph replay) at batch 1 and 64 with fused routing (then --fused-routing, the default since); the [gpu] tests build in the background for run 2.
#   bash tools/gpu/s18_run1.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
( bash tools/gpu/build_gpu_tests.sh > build/gpu_tests_build.log 2>&1; echo "build rc $?" >> build/gpu_tests_build.log ) &
bash tools/gpu/decode_moe_next.sh
build/gpu/bench_layer_stack --contexts 4096 --batches 1,64 --steps 10 --profile --graph 2>&1 \
  | grep -E "^\| |graph replay" | cut -c1-240
