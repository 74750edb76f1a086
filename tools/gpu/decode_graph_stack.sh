#!/usr/bin/env bash
# Session 18's stack figures for the next GPU run (not yet run): the decode step at 4K and 128K, batch 1 / 8 / 64,
# eager and as a decode loop over one captured step (gpu::DecodeGraph, --graph-loop); then with the shared expert on
# a second stream, then with the routed w2 on BF16 wgmma, then also w1/w3 on it over 4 K ranges (each opt-in);
# --profile: where a step goes.
#   bash tools/gpu/decode_graph_stack.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/gpu
[[ -x build/gpu/bench_layer_stack ]] || BUILD_ONLY=1 bash tools/gpu/layer_stack.sh > build/stack_build.log 2>&1
build/gpu/bench_layer_stack --contexts 4096,131072 --batches 1,8,64 --steps 10 --graph-loop --profile 2>&1 \
  | grep -E "^\| [0-9]|graph loop|^    |profile,|rror"
for o in "--moe-overlap" "--moe-w2-bf16" "--moe-w13-split 4 --moe-w2-bf16"; do
  build/gpu/bench_layer_stack --contexts 4096 --batches 1,8,64 --steps 10 --graph-loop $o 2>&1 | grep -E "^\| [0-9]|graph loop|MoE:|rror"
done
