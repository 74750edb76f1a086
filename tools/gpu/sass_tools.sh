#!/usr/bin/env bash
# cuobjdump and nvdisasm for tools/gpu/sass_loops.py where the CUDA toolkit installed has neither (a minimal
# toolkit: nvcc and ptxas only). NVIDIA's own wheels of the two tools (PyPI), unpacked under .sass-tools/ (ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x .sass-tools/nvidia/cu13/bin/cuobjdump ] && [ -x .sass-tools/nvidia/cu13/bin/nvdisasm ] && exit 0
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cuda-cuobjdump>=13,<14" "nvidia-cuda-nvdisasm>=13,<14"
mkdir -p .sass-tools
for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" .sass-tools; done
chmod +x .sass-tools/nvidia/cu13/bin/*
rm -rf "$tmp"
.sass-tools/nvidia/cu13/bin/cuobjdump --version | tail -1
