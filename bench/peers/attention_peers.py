"""Dense attention peer on our attention shapes (issue 13 item 7): torch's scaled_dot_product_attention (whichever
backend it picks, named in the output) with 64 heads x 512, 640 keys (our 128 window + 512 selected entries per row),
BF16, for R query rows over one set of keys, against our sparse kernel over the same count (the harness's attention
rows, bench/peers/deepgemm.sh prints them beside). CUDA events per call, median of 30 after 5 warm-ups.

    python3 bench/peers/attention_peers.py [OUT.json]
"""
import json
import sys

import torch
import torch.nn.functional as F

H, D, NK = 64, 512, 640
ROWS = [1, 4, 16, 64, 128, 2048]


def median_us(fn, warmup=5, iters=30):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    times.sort()
    return times[len(times) // 2]


def backend_of(q, k, v):
    """The SDPA backend torch takes for these inputs (the first of flash, efficient, cudnn, math that runs)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH):
        try:
            with sdpa_kernel([b]):
                F.scaled_dot_product_attention(q, k, v)
            return b
        except Exception:  # noqa: BLE001 (not available for this shape)
            continue
    return None


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else None
    from torch.nn.attention import sdpa_kernel
    print(f'torch {torch.__version__}, {torch.cuda.get_device_name()}')
    print('| rows | backend | us | GB/s of K and V | TFLOP/s |')
    print('|---:|---|---:|---:|---:|')
    res = []
    k = torch.randn(1, H, NK, D, device='cuda', dtype=torch.bfloat16)
    v = torch.randn(1, H, NK, D, device='cuda', dtype=torch.bfloat16)
    for r in ROWS:
        q = torch.randn(1, H, r, D, device='cuda', dtype=torch.bfloat16)
        b = backend_of(q, k, v)
        if b is None:
            print(f'| {r} | none ran | - | - | - |')
            res.append(dict(rows=r, backend=None))
            continue
        with sdpa_kernel([b]):
            us = median_us(lambda: F.scaled_dot_product_attention(q, k, v))
        kv_bytes = 2.0 * H * NK * D * 2
        flops = 4.0 * H * r * NK * D
        print(f'| {r} | {b.name} | {us:.1f} | {kv_bytes / (us * 1e-6) / 1e9:.0f} | {flops / (us * 1e-6) / 1e12:.1f} |')
        res.append(dict(rows=r, backend=b.name, us=us))
    if out:
        with open(out, 'w') as f:
            json.dump(res, f, indent=1)


if __name__ == '__main__':
    main()
