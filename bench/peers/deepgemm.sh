#!/usr/bin/env bash
# Builds DeepGEMM (its JIT's C++ module; kernels compile at first use) from .peers/deepgemm.tar.xz into build/peers/,
# then times the FP8 GEMM peers on our shapes (bench/peers/gemm_peers.py: torch's row-wise _scaled_mm and DeepGEMM)
# beside ours (the harness's gemm rows, same run), then torch's dense attention (bench/peers/attention_peers.py)
# beside our attention rows. The tarball holds DeepGEMM 54e2261 with the CUTLASS (f3fde58) and fmt (553ec11)
# headers it pins, packed on the dev machine from their public repositories (bench/peers/pack_deepgemm.sh); never
# committed.
# On the GPU machine (carry .peers): bash bench/peers/deepgemm.sh [build|bench|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
D=build/peers/deepgemm
if [[ $what == build || $what == all ]]; then
  if [[ ! -f $D/.built ]]; then (  # a failed build leaves the torch peers to run (bench, below)
    [[ -d $D ]] || { mkdir -p build/peers && tar xJf .peers/deepgemm.tar.xz -C build/peers; }
    (cd "$D" && ln -sfn "$PWD/third-party/cutlass/include/cutlass" deep_gemm/include/cutlass &&
     ln -sfn "$PWD/third-party/cutlass/include/cute" deep_gemm/include/cute &&
     { python3 -c "import wheel" 2>/dev/null ||  # setup.py imports wheel only for its wheel command
       sed -i 's/^from wheel.bdist_wheel import bdist_wheel as _bdist_wheel$/_bdist_wheel = object  # no wheel here/' setup.py; } &&
     DG_USE_LOCAL_VERSION=0 MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build > build.log 2>&1 ||
     { grep -n -A4 -E "error|Error" build.log | grep -v "^--$" | head -60; exit 1; }
     so=$(find build -name "_C*.so" -type f | head -n 1) && [[ -n $so ]] && ln -sf "$PWD/$so" deep_gemm/)
    touch "$D/.built" ) || echo "DeepGEMM: build failed (build/peers/deepgemm/build.log)"
  fi
  ls -la "$D"/deep_gemm/_C*.so || true
fi
if [[ $what == bench || $what == all ]]; then
  python3 bench/peers/gemm_peers.py "$([[ -f $D/.built ]] && echo "$PWD/$D")" "${OUT:-.}/gemm_peers.json"
  [[ -x build/gpu/harness ]] || OPS=gemm bash tools/gpu/run_all.sh --checks-only > /dev/null 2>&1 || true
  build/gpu/harness --bench-only --only=gemm 2>&1 | grep -E "gemm_fp8 (wq_b|wo_b|wq_a)" || true
  python3 bench/peers/attention_peers.py "${OUT:-.}/attention_peers.json"  # torch SDPA, 64 x 512, 640 keys
  build/gpu/harness --bench-only --only=attention 2>&1 | grep -E "attention" || true
fi
