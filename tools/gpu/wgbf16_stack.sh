#!/usr/bin/env bash
# Stack prefill with the automatic and the BF16 wgmma MoE kernels, then the goldens (session 16 run 2).
set -uo pipefail
cd "$(dirname "$0")/../.."
A=(--contexts "" --batches "" --prefill 512,2048,4096 --warmup 2 --steps 5 --profile)
bash tools/gpu/layer_stack.sh "${A[@]}" 2>&1 | grep -vE "^\s*$" | tail -40
build/gpu/bench_layer_stack "${A[@]}" --moe-kernel wgmma-bf16 2>&1 | grep -vE "^\s*$" | tail -32
for m in tests/data/golden/tiny-ced tests/data/golden/vision-tiny; do
  [[ -d $m ]] && timeout 200 bash tools/gpu/golden.sh $m --quick 2>&1 | tail -4
done
