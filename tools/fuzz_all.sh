#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-14, ASan + UBSan; tests/fuzz/CMakeLists.txt) and runs each over a scratch copy
# of its seed corpus until 1M executions or 15 minutes, whichever comes first (issue 14's budget). Prints each
# target's last libFuzzer status line and its exit code; crashes, leaks and reports land in $WORK/<name>/.
#   bash tools/fuzz_all.sh [WORK=/tmp/fuzz] [targets...]
set -uo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/fuzz}
B=$WORK/build
mkdir -p "$WORK"
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_C_COMPILER=clang-14 \
  -DDSV41_FUZZ=ON -DDSV41_CUDA=OFF > "$WORK/cmake.log" 2>&1 || { tail -20 "$WORK/cmake.log"; exit 1; }
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(config safetensors checkpoint_index tokenizer chat session_blocks server_request image)
for t in "${targets[@]}"; do
  cmake --build "$B" --target fuzz_$t -j "${JOBS:-1}" > "$WORK/build_$t.log" 2>&1 || { echo "$t: build failed"; tail -5 "$WORK/build_$t.log"; continue; }
  mkdir -p "$WORK/$t/corpus" "$WORK/$t/artifacts"
  # the seeds, as listed for the target's replay test (directories copied flat, files as they are)
  grep -o "\"$t|[^\"]*\"" tests/fuzz/CMakeLists.txt | head -1 | sed "s/^\"$t|//; s/\"$//" | tr ',' '\n' | \
    sed "s#\${_data}#tests/data#; s#\${PROJECT_SOURCE_DIR}#.#; s#\${CMAKE_CURRENT_SOURCE_DIR}#tests/fuzz#" | \
    while read -r s; do [[ -d $s ]] && cp -r "$s"/. "$WORK/$t/corpus/" 2>/dev/null; [[ -f $s ]] && cp "$s" "$WORK/$t/corpus/"; done
  [[ -d tests/fuzz/regressions/$t ]] && cp -r tests/fuzz/regressions/$t/. "$WORK/$t/corpus/"
  t0=$(date +%s)
  "$B/tests/fuzz/fuzz_$t" -runs=1000000 -max_total_time=900 -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
    -artifact_prefix="$WORK/$t/artifacts/" "$WORK/$t/corpus" > "$WORK/$t/log.txt" 2>&1
  rc=$?
  echo "$t: rc $rc in $(( $(date +%s) - t0 )) s; $(grep -E '^#[0-9]+' "$WORK/$t/log.txt" | tail -1 | cut -c1-160)"
  grep -E "stat::number_of_executed_units|ERROR|SUMMARY" "$WORK/$t/log.txt" | head -4
done
