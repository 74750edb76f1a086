"""FlashMLA's sparse FP8 decode (sm90, the "MODEL1" layout: 64 heads x 512, 128 compressed + 512 window keys per
query) timed on the shapes of our attention rows in bench/README.md, through FlashMLA's own test harness
(its data generator, its kineto timing, its byte and FLOP counts, its reference check).

FlashMLA is not part of this repository: bench/peers/flashmla.sh builds it from a copy of its public source on the
GPU machine. Usage: python3 bench/peers/flashmla_decode.py FLASHMLA_DIR [OUT_JSON]
"""
import dataclasses
import json
import sys


def main():
    root = sys.argv[1]
    sys.path.insert(0, root)
    sys.path.insert(0, root + "/tests")
    import torch
    import lib  # FlashMLA's tests/lib.py
    import test_flash_mla_sparse_decoding as t

    torch.set_default_dtype(torch.bfloat16)
    torch.set_default_device("cuda:0")
    torch.cuda.set_device(0)
    # MODEL1 CONFIG1 of FlashMLA's own performance cases, one query row per sequence (s_q = 1, no MTP) and two.
    base = lib.RawTestParamForDecode(0, 64, 1, 1, 16384, True, topk=128, d_qk=512, extra_s_k=16384, extra_topk=512,
                                     block_size=256, extra_block_size=64, num_runs=30)
    cases = []
    for b, s_q in [(1, 1), (4, 1), (2, 2), (16, 1), (64, 1), (128, 1)]:
        cases.append(dataclasses.replace(base, b=b, s_q=s_q, check_correctness=b <= 16))
    # 2048 rows (our prefill-sized attention row) as 1024 sequences of 2 rows, over shorter caches.
    cases.append(dataclasses.replace(base, b=1024, s_q=2, s_kv=2048, extra_s_k=2048, check_correctness=False))
    rows = []
    for raw in cases:
        p = raw.to_test_param()
        r = t.test_flash_mla(p)
        row = dict(b=raw.b, s_q=raw.s_q, rows=raw.b * raw.s_q, heads=raw.h_q, d_qk=raw.d_qk,
                   keys=f"{raw.topk}+{raw.extra_topk}", us=r.time_usage_per_us, splitkv_us=r.splitkv_time_usage_us,
                   combine_us=r.combine_time_usage_us, gbps=r.achieved_gBps, tflops=r.achieved_tflops,
                   correct=r.is_correct, checked=raw.check_correctness)
        rows.append(row)
        print("ROW", json.dumps(row), flush=True)
    print("| rows (b x s_q) | keys | time (us) | GB/s | % of 4250 GB/s | TFLOP/s | checked |")
    for r in rows:
        print(f"| {r['rows']} ({r['b']}x{r['s_q']}) | {r['keys']} | {r['us']:.1f} | {r['gbps']:.0f} | "
              f"{100 * r['gbps'] / 4250:.0f}% | {r['tflops']:.1f} | {'pass' if r['correct'] and r['checked'] else '-' if not r['checked'] else 'FAIL'} |")
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
