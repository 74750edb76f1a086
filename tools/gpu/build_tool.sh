# Sourced by tools/gpu/golden.sh and tools/gpu/layer_stack.sh: build_tool SRC NAME builds build/gpu/NAME from
# SRC with nvcc, or reuses one whose stamp (a hash of SRC and every header under include/, tools/gpu and bench)
# matches, so a build made elsewhere can be carried. Where nlohmann-json or utf8proc are not installed
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
  local stamp t0
  # The stamp hashes every header of the library, tools/gpu and bench with SRC, not what `nvcc -M` lists: that list
  # came out differently on the GPU machine (cause not established), so a carried build was always rebuilt there.
  stamp=$( (find include tools/gpu bench -type f \( -name '*.hpp' -o -name '*.cuh' -o -name '*.h' \) | sort | xargs cat
            cat "$src") | sha256sum | cut -c1-16)
  if [[ -x $B/$name && "$(cat "$B/$name.stamp" 2>/dev/null)" == "$stamp" ]]; then
    echo "$name: reusing $B/$name (stamp $stamp)"
  else
    t0=$(date +%s)
    $NVCC $NVFLAGS "$src" $LIB -lcublasLt -o "$B/$name"
    echo "$stamp" > "$B/$name.stamp"
    echo "$name: built in $(( $(date +%s) - t0 )) s"
  fi
}
