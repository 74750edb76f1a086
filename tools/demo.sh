#!/usr/bin/env bash
# Installs what is missing, builds the dsv41 CLI and runs it on the bundled model models/dsv41-tiny-py:
# inspect (shape, schedule, parameters, cache sizes, checkpoint validation), a generation with DSpark
# speculative decoding, and the perplexity of held-out text. Then the layer-by-layer golden check of
# the CPU reference against DeepSeek's reference outputs (tests/data/golden/tiny-ced).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD=${BUILD:-build/demo}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV41_BUILD_TESTS=OFF -DDSV41_CUDA=OFF >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target dsv41_cli
DSV41="$BUILD/examples/cli/dsv41"
MODEL=${1:-models/dsv41-tiny-py}
"$DSV41" inspect "$MODEL"
echo
echo "== dsv41 generate (greedy, DSpark speculative decoding) =="
"$DSV41" generate --model "$MODEL" --prompt $'import os\nimport sys\n\n\ndef ' --max-tokens 80 --speculative
echo
echo "== dsv41 perplexity of held-out text =="
"$DSV41" perplexity --model "$MODEL" --text "$MODEL/heldout_sample.txt"
echo
echo "== dsv41 golden: the CPU reference against DeepSeek's reference outputs =="
"$DSV41" golden tests/data/golden/tiny-ced
