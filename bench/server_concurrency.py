"""Throughput and latency of `dsv41 serve` at N concurrent streaming sessions, batched against --sequential.

Usage: server_concurrency.py DSV41_BINARY MODEL_DIR [--concurrency 1,4,8,32,64] [--device cpu|cuda]
                             [--max-tokens 32] [--rounds 1] [--no-sequential] [--decode-threads 1,2]
For each mode (batched: --max-running = the largest N; sequential: --sequential, today's one-at-a-time server)
it starts the server on a free 127.0.0.1 port and, for each N, runs N clients at once (each `rounds` requests,
different prompts, greedy), measuring time to first token (TTFT), inter-token latency (ITL: the gaps between
streamed chunks) and completion tokens/s over the wall time. Prints a Markdown table.
"""
import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "e2e"))
from e2e_common import start_server, stop_server  # noqa: E402


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def one(base, i, max_tokens, out):
    body = json.dumps({"messages": [{"role": "user", "content": f"Write about topic number {i}."}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.time()
    first, last, gaps, tokens = None, None, [], 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            if not ev.get("choices"):
                continue
            d = ev["choices"][0]["delta"]
            if d.get("content") or d.get("reasoning_content"):
                now = time.time()
                if first is None:
                    first = now - t0
                else:
                    gaps.append(now - last)
                last = now
    out.append((first, gaps, tokens))


def run_level(base, n, rounds, max_tokens):
    results, threads = [], []

    def client(k):
        for r in range(rounds):
            one(base, k * 1000 + r, max_tokens, results)

    t0 = time.time()
    for k in range(n):
        threads.append(threading.Thread(target=client, args=(k,)))
        threads[-1].start()
    for t in threads:
        t.join(timeout=1800)
    wall = time.time() - t0
    ttft = [r[0] for r in results if r[0] is not None]
    itl = [g for r in results for g in r[1]]
    toks = sum(r[2] for r in results)
    return {"n": n, "tok_s": toks / wall, "ttft50": pct(ttft, 50), "ttft99": pct(ttft, 99), "itl50": pct(itl, 50),
            "itl99": pct(itl, 99), "wall": wall, "tokens": toks}


def serve(binary, model, device, extra):
    return start_server([binary, "serve", "--model", model, "--device", device, "--no-cache", *extra], timeout=300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("model")
    ap.add_argument("--concurrency", default="1,4,8,32,64")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-sequential", action="store_true")
    ap.add_argument("--decode-threads", default="", help="batched runs at each of these --decode-threads (CPU), "
                                                          "e.g. 1,2; default: one run at the server's default")
    a = ap.parse_args()
    levels = [int(x) for x in a.concurrency.split(",")]
    batched = ["--max-running", str(max(levels)), "--max-queued", str(max(levels))]
    modes = [("batched", batched)] if not a.decode_threads else [
        (f"batched, {t} decode threads", batched + ["--decode-threads", t]) for t in a.decode_threads.split(",")]
    if not a.no_sequential:
        modes.append(("sequential", ["--sequential", "--max-queued", str(max(levels))]))
    rows = []
    for name, extra in modes:
        p, base = serve(a.binary, a.model, a.device, extra)
        try:
            one(base, -1, 4, [])  # warm-up
            for n in levels:
                r = run_level(base, n, a.rounds, a.max_tokens)
                r["mode"] = name
                rows.append(r)
                print(f"{name} N={n}: {r['tok_s']:.1f} tok/s", file=sys.stderr, flush=True)
        finally:
            stop_server(p, timeout=30)
    print(f"| server | N | tokens/s | TTFT p50 (s) | TTFT p99 (s) | ITL p50 (ms) | ITL p99 (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['mode']} | {r['n']} | {r['tok_s']:.1f} | {r['ttft50']:.3f} | {r['ttft99']:.3f} | "
              f"{r['itl50'] * 1e3:.1f} | {r['itl99'] * 1e3:.1f} |")


if __name__ == "__main__":
    main()
