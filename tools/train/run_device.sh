#!/usr/bin/env bash
# One device call: a short GPU smoke run, then the real training run, then the export sharded so that
# every file comes back (the device tool returns files of at most 16 MiB). Needs tools/train/work/
# {train.bin,val.bin,tokenizer.json,tokenizer_meta.json,engram_token_map.safetensors} carried along.
set -euo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-300}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 tools/train/train.py --size toy --batch 2 --seq 64 --steps 6 --dense-frac 0.2 --qat-frac 0.2 \
  --dspark-steps 2 --dspark-batch 2 --dspark-seq 32 --log-every 2 --eval-every 4 --eval-batches 1 \
  --save-every 100 --warmup 2 --check-seq 32 --out /tmp/smoke --fresh > /tmp/smoke.log 2>&1 || { tail -40 /tmp/smoke.log; exit 1; }
echo "smoke run ok"
python3 tools/train/train.py --out /tmp/run --time-budget "$BUDGET" --fresh
python3 tools/train/shard.py /tmp/run/export "$OUT/model" --max-bytes 15000000
cp /tmp/run/log.jsonl "$OUT/log.jsonl"
ls -la "$OUT/model"
