#!/usr/bin/env bash
# Packs .peers/deepgemm.tar.xz for bench/peers/deepgemm.sh on the dev machine (the GPU machine has no network), from
# the public repositories as the fetch tool mirrors them (fetch github:deepseek-ai/DeepGEMM, github:NVIDIA/cutlass and
# github:fmtlib/fmt first): DeepGEMM at 54e2261 with the CUTLASS and fmt headers its submodules pin. .peers/ is
# ignored (.git/info/exclude), never committed.
#   bash bench/peers/pack_deepgemm.sh [MIRRORS=/work/.mirror]
set -euo pipefail
cd "$(dirname "$0")/../.."
M=${1:-/work/.mirror}
DG=54e2261 CUTLASS=f3fde58372d33e9a5650ba7b80fc48b3b49d40c8 FMT=553ec11ec06fbe0beebfbb45f9dc3c9eabd83d28
T=$(mktemp -d)
mkdir -p "$T/deepgemm/third-party/cutlass" "$T/deepgemm/third-party/fmt" .peers
git -C "$M/deepseek-ai+DeepGEMM/repo" archive "$DG" | tar -x -C "$T/deepgemm"
# (the mirror lacks some large media blobs outside include/; git archive says so and still writes include/ whole)
git -C "$M/NVIDIA+cutlass/repo" archive "$CUTLASS" include 2>/dev/null | tar -x -C "$T/deepgemm/third-party/cutlass" || true
n=$(git -C "$M/NVIDIA+cutlass/repo" ls-tree -r "$CUTLASS" include | wc -l)
[[ $(find "$T/deepgemm/third-party/cutlass/include" -type f | wc -l) -eq $n ]] || { echo "CUTLASS headers incomplete"; exit 1; }
git -C "$M/fmtlib+fmt/repo" archive "$FMT" include | tar -x -C "$T/deepgemm/third-party/fmt"
tar cJf .peers/deepgemm.tar.xz -C "$T" deepgemm
rm -rf "$T"
grep -qx ".peers/" .git/info/exclude 2>/dev/null || echo ".peers/" >> .git/info/exclude
ls -la .peers/deepgemm.tar.xz
