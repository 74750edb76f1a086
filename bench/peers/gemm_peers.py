"""FP8 GEMM peers on our shapes (issue 13 item 7): torch's _scaled_mm with row-wise scales and DeepGEMM's
fp8_gemm_nt (SM90: 1x128 activation scales, 128x128 weight scales), y[M, N] = x[M, K] . w[N, K]^T in BF16.
Each call on one of several rotated copies (more bytes than twice the L2), CUDA events per call, median of 30 after
5 warm-ups. DeepGEMM's output is checked against a BF16 reference with its own calc_diff (its tests' bound 1e-3).

    python3 bench/peers/gemm_peers.py DEEPGEMM_DIR [OUT.json]   (DEEPGEMM_DIR: the built checkout, or '' for torch only)
"""
import json
import math
import sys

import torch

SHAPES = [(1, 32768, 1280), (4, 32768, 1280), (64, 32768, 1280), (2048, 32768, 1280),
          (4, 5120, 8192), (2048, 5120, 8192), (2048, 1280, 5120), (4096, 5120, 8192)]
L2_BYTES = 60 << 20


def median_us(fn, n_copies, warmup=5, iters=30):
    for i in range(warmup):
        fn(i % n_copies)
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(i % n_copies)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    times.sort()
    return times[len(times) // 2]


def copies_for(nbytes):
    return max(1, math.ceil(2 * L2_BYTES / max(nbytes, 1)))


def torch_rowwise(m, n, k):
    nc = copies_for(n * k + m * k)
    xs, ws, sa, sb = [], [], [], []
    for _ in range(nc):
        xs.append(torch.randn(m, k, device='cuda').to(torch.float8_e4m3fn))
        ws.append(torch.randn(n, k, device='cuda').to(torch.float8_e4m3fn))
        sa.append(torch.rand(m, 1, device='cuda') + 0.5)
        sb.append(torch.rand(1, n, device='cuda') + 0.5)

    def run(i):
        torch._scaled_mm(xs[i], ws[i].t(), scale_a=sa[i], scale_b=sb[i], out_dtype=torch.bfloat16)
    try:
        return median_us(run, nc), None
    except Exception as e:  # noqa: BLE001 (report, do not stop the other peers)
        return None, f'{type(e).__name__}: {e}'[:200]


def deepgemm(dg_dir, m, n, k):
    sys.path.insert(0, dg_dir)
    sys.path.insert(0, dg_dir + '/tests')
    import deep_gemm
    from deep_gemm.testing import calc_diff
    from generators import KernelType, MajorTypeAB, generate_normal
    nc = copies_for(n * k + m * k)
    sets = [generate_normal(m, n, k, MajorTypeAB.KMajor, MajorTypeAB.KMajor, False, torch.bfloat16,
                            KernelType.Kernel1D2D, use_ue8m0=False) for _ in range(nc)]
    a, b, _, d, ref = sets[0]
    deep_gemm.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=True)
    diff = float(calc_diff(d, ref))

    def run(i):
        a, b, _, d, _ = sets[i]
        deep_gemm.fp8_gemm_nt(a, b, d, disable_ue8m0_cast=True)
    return median_us(run, nc), diff


def main():
    dg_dir = sys.argv[1] if len(sys.argv) > 1 else ''
    out = sys.argv[2] if len(sys.argv) > 2 else None
    print(f'torch {torch.__version__}, {torch.cuda.get_device_name()}')
    rows = []
    print('| M | N | K | torch _scaled_mm row-wise us | TFLOP/s | DeepGEMM fp8_gemm_nt us | TFLOP/s | DeepGEMM diff |')
    print('|---:|---:|---:|---:|---:|---:|---:|---|')
    for m, n, k in SHAPES:
        flops = 2.0 * m * n * k
        t_us, t_err = torch_rowwise(m, n, k)
        d_us, d_diff, d_err = None, None, None
        if dg_dir:
            try:
                d_us, d_diff = deepgemm(dg_dir, m, n, k)
            except Exception as e:  # noqa: BLE001
                d_err = f'{type(e).__name__}: {e}'[:200]
        tf = lambda us: f'{flops / (us * 1e-6) / 1e12:.0f}' if us else '-'
        print(f'| {m} | {n} | {k} | {t_us:.1f} | {tf(t_us)} | ' if t_us else f'| {m} | {n} | {k} | {t_err} | - | ',
              end='')
        print(f'{d_us:.1f} | {tf(d_us)} | {d_diff:.2e} |' if d_us else f'{d_err or "not run"} | - | - |')
        rows.append(dict(M=m, N=n, K=k, torch_us=t_us, torch_error=t_err, deepgemm_us=d_us, deepgemm_diff=d_diff,
                         deepgemm_error=d_err))
    if out:
        with open(out, 'w') as f:
            json.dump(rows, f, indent=1)


if __name__ == '__main__':
    main()
