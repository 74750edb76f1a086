#!/usr/bin/env bash
# Builds FlashMLA (sm90a only) from .peers/flashmla.tar.xz (its public source and the CUTLASS headers it pins,
# packed on the dev machine; never committed) into build/peers/, then times its sparse FP8 decode on our shapes.
# On the GPU machine: bash bench/peers/flashmla.sh [build|bench|all]
set -euo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
D=build/peers/flashmla
if [[ $what == build || $what == all ]]; then
  if [[ ! -f $D/.built ]]; then
    # Unpacked once; a second call resumes the build (setup.py's ninja keeps its objects in $D/build).
    [[ -d $D ]] || { mkdir -p build/peers && tar xJf .peers/flashmla.tar.xz -C build/peers; }
    # setup.py runs `git submodule update`; the copy has the submodule's headers already and no .git.
    # CUDA 13 keeps CCCL (cuda/std/...) under include/cccl, which the pinned CUTLASS expects on the include path.
    (cd "$D" && sed -i 's/^subprocess.run(\["git", "submodule"/pass  # &/' setup.py &&
     { grep -q 'include" / "cccl"' setup.py || sed -i 's|^        include_dirs=\[|&\n            Path(CUDA_HOME) / "include" / "cccl",|' setup.py; } &&
     FLASH_MLA_DISABLE_SM100=1 MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=1 python3 setup.py build_ext --inplace > build.log 2>&1 ||
     { grep -n -A4 -E "error|Error" build.log | grep -v "^--$" | head -60; exit 1; })
    touch "$D/.built"
  fi
  ls -la "$D"/flash_mla/*.so
fi
if [[ $what == bench || $what == all ]]; then
  python3 bench/peers/flashmla_decode.py "$PWD/$D" "${OUT:-.}/flashmla_decode.json"
fi
