#!/usr/bin/env bash
# Static instruction counts of the decode kernels (tools/gpu/sass/hot_kernels.cu) at a base revision and in the
# working tree, side by side: the instructions of each innermost loop, all of it and its decode path with one 8-row
# tile (tools/gpu/sass_loops.py --tiles 1). No GPU needed.
#   bash tools/gpu/sass_compare.sh e112cfb
set -euo pipefail
cd "$(dirname "$0")/../.."
base=${1:?usage: sass_compare.sh BASE_REVISION}
bash tools/gpu/sass_tools.sh >/dev/null
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git worktree add -q --detach "$tmp/base" "$base"
mkdir -p "$tmp/base/tools/gpu/sass"
cp tools/gpu/sass/hot_kernels.cu "$tmp/base/tools/gpu/sass/"  # the same instantiations at both revisions
count() {  # $1: repository root; prints "kernel|instructions in the innermost loop|on its decode path"
  python3 tools/gpu/sass_loops.py --cu "$1/tools/gpu/sass/hot_kernels.cu" --include "$1/include" --tiles 1 \
      --kernel 'skinny_gemm_kernel<.*, 2>|stream_gemm|index_score_kernel<2|wide_gemm' |
    awk '/^## /{sub(/^## void dsv41::gpu::detail::/, ""); sub(/\([^()]*\)$/, "");
                gsub(/\(dsv41::gpu::WFmt\)0/, "FP8"); gsub(/\(dsv41::gpu::WFmt\)1/, "FP4"); k=$0; n=0}
         /\(innermost\)/{if (!n) a=$(NF-1)}
         /decode path/{if (!n++) {match($0, /: [0-9]+ instructions/); print k "|" a "|" substr($0, RSTART + 2, RLENGTH - 15)}}'
}
count "$tmp/base" | sort >"$tmp/a"
count "$PWD" | sort >"$tmp/b"
# One iteration of a GEMM's loop is 4 K blocks of 16 weight rows (per matrix); of the indexer's, 8 keys x 4 K blocks.
echo "| kernel | loop, $base | loop now | decode path, $base | decode path now | x (decode path) |"
echo "|---|---:|---:|---:|---:|---:|"
join -t'|' "$tmp/a" "$tmp/b" | awk -F'|' '{printf "| %s | %s | %s | %s | %s | %.2f |\n", $1, $2, $4, $3, $5, $3 / $5}'
