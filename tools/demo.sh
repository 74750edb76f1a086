#!/usr/bin/env bash
# Installs what is missing, builds the dsv41 CLI and runs it on the bundled model: inspect, then the
# layer-by-layer golden check against DeepSeek's reference outputs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh
BUILD=${BUILD:-build/demo}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDSV41_BUILD_TESTS=OFF -DDSV41_CUDA=OFF
cmake --build "$BUILD" -j "$(nproc)" --target dsv41_cli
MODEL=${1:-tests/data/golden/tiny-ced}
"$BUILD/examples/cli/dsv41" inspect "$MODEL"
"$BUILD/examples/cli/dsv41" golden "$MODEL"
