#!/usr/bin/env bash
# The CLI's `--device cuda` on the bundled model, for the GPU machine (binary built here and carried as
# .devlibs/dsv41 with its shared libraries): generation (plain and speculative, GPU and CPU), held-out
# perplexity on both devices, and the OpenAI-compatible server on the GPU answering curl.
#
#   LD_LIBRARY_PATH=.devlibs bash tools/gpu/cli_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
D=${DSV41:-.devlibs/dsv41}
M=models/dsv41-tiny-py
fail=0
for dev in cuda cpu; do
  for spec in "" --speculative; do
    echo "== generate --device $dev $spec"
    $D generate --device $dev --model $M --prompt "def parse_args(argv):" --max-tokens 64 $spec || fail=1
  done
done
for dev in cuda cpu; do
  echo "== perplexity --device $dev"
  $D perplexity --device $dev --model $M --text $M/heldout_sample.txt || fail=1
done
echo "== serve --device cuda"
PORT=18431
$D serve --device cuda --model $M --port $PORT > /tmp/serve.log 2>&1 &
pid=$!
for i in $(seq 1 100); do
  [[ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$PORT/health)" == 200 ]] && break
  sleep 0.2
done
body='{"model":"m","messages":[{"role":"user","content":"Write a haiku about caches."}],"max_tokens":32,"temperature":0}'
curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' -d "$body" | head -c 600 || fail=1
echo
curl -s -N http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \
  -d "${body%\}},\"stream\":true}" | tail -n 4 || fail=1
kill $pid; wait $pid 2>/dev/null
tail -3 /tmp/serve.log
exit $fail
