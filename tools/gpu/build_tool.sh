# Sourced by tools/gpu/golden.sh and tools/gpu/layer_stack.sh: build_tool SRC NAME builds build/gpu/NAME from
# SRC with nvcc, or reuses one whose stamp (a hash of every repository file SRC includes, as `nvcc -M` lists
# them) matches, so a build made elsewhere can be carried. Where nlohmann-json or utf8proc are not installed
# (the GPU machine), it looks in .devdeps/{include,lib}.
build_tool() {
  local src=$1 name=$2 B=build/gpu
  mkdir -p "$B"
  local NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  local INC="-Iinclude"
  [[ -d .devdeps/include ]] && INC="$INC -I.devdeps/include"
  local LIB=/usr/lib/x86_64-linux-gnu/libutf8proc.a
  [[ -f $LIB ]] || LIB=.devdeps/lib/libutf8proc.a
  local NVFLAGS="-std=c++20 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -O3 $INC"
  local deps stamp t0
  deps=$($NVCC -std=c++20 --expt-relaxed-constexpr $INC -M "$src" 2>/dev/null | tr -d '\\' | tr ' ' '\n' |
         grep -E '^(include|tools|bench|tests)/' | sort -u)
  stamp=$(cat $deps | sha256sum | cut -c1-16)
  if [[ -x $B/$name && "$(cat "$B/$name.stamp" 2>/dev/null)" == "$stamp" ]]; then
    echo "$name: reusing $B/$name (stamp $stamp)"
  else
    t0=$(date +%s)
    $NVCC $NVFLAGS "$src" $LIB -lcublasLt -o "$B/$name"
    echo "$stamp" > "$B/$name.stamp"
    echo "$name: built in $(( $(date +%s) - t0 )) s"
  fi
}
