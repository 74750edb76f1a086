#!/usr/bin/env bash
# Installs the build and test dependencies from Debian's packages when they are missing.
# The CUDA toolkit (nvcc, CCCL) comes with the machine image and is used when present.
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config catch2 libfmt-dev libpng-dev libjpeg-dev nlohmann-json3-dev libcli11-dev libutf8proc-dev
      libcpp-httplib-dev libbenchmark-dev libxxhash-dev libhiredis-dev redis-server libonig-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The server's end-to-end test talks to it with the official openai client.
python3 -c "import openai" 2>/dev/null || python3 -m pip install -q --disable-pip-version-check openai
