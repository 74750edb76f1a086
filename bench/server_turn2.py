"""Turn 2 against turn 1 through `dsv41 serve --cache-dir` (issue 11): time to first token (TTFT) of a chat whose
first user message is a history of about H tokens (cut from the bundled model's held-out text), then of the second
turn that repeats it with the answer and a short question. Turn 1 runs cold; turn 2 resumes from the blocks turn 1
stored (windows kept in the server's memory); then the server restarts and turn 2 runs again (global KV from disk,
windows rebuilt by SPEC §5 replay). Streaming requests; TTFT = request sent to the first content delta, median of
R runs (each run uses a fresh cache directory and a history of its own).

  python3 bench/server_turn2.py DSV41_BINARY MODEL_DIR [--histories 1536,3584] [--runs 3] [--device cpu|cuda]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "e2e"))
from e2e_common import start_server, stop_server  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("bin")
ap.add_argument("model")
ap.add_argument("--histories", default="1536,3584")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--device", default="cpu")
a = ap.parse_args()


def start(cache):
    return start_server([a.bin, "serve", "--model", a.model, "--cache-dir", cache, "--device", a.device], timeout=120)


def stop(p):
    stop_server(p, timeout=30)


def chat(base, messages):
    """Streams one completion; returns (ttft s, text, usage)."""
    body = {"messages": messages, "max_tokens": 8, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, text, usage = None, "", None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                piece = ch.get("delta", {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text += piece
    return (ttft if ttft is not None else time.perf_counter() - t0), text, usage


with open(os.path.join(a.model, "heldout_sample.txt"), encoding="utf-8") as f:
    corpus = f.read()
print(f"server {a.bin} --device {a.device}, model {a.model}, {a.runs} runs (medians), max_tokens 8, greedy\n")
print("| history (target) | turn-1 prompt | turn-1 TTFT ms | turn-2 prompt | cached | turn-2 TTFT ms | (x faster) "
      "| after restart: cached | TTFT ms | (x faster) |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for H in [int(x) for x in a.histories.split(",")]:
    rows = []
    for r in range(a.runs):
        # about 4 characters per token on this text; a different cut per run so no run reuses another's blocks
        chars = H * 4
        start_at = (r * 997) % max(1, len(corpus) - 1)
        hist = (corpus[start_at:] + "\n" + corpus) * (1 + chars // len(corpus))
        turn1 = [{"role": "user", "content": "Summarize this text:\n" + hist[:chars]}]
        cache = tempfile.mkdtemp(prefix="dsv41_turn2_")
        try:
            p, base = start(cache)
            try:
                t1, reply, u1 = chat(base, turn1)
                turn2 = turn1 + [{"role": "assistant", "content": reply},
                                 {"role": "user", "content": "Now in one sentence?"}]
                t2, _, u2 = chat(base, turn2)
            finally:
                stop(p)
            p, base = start(cache)
            try:
                t3, _, u3 = chat(base, turn2)
            finally:
                stop(p)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        rows.append((u1["prompt_tokens"], t1, u2["prompt_tokens"], u2["prompt_tokens_details"]["cached_tokens"], t2,
                     u3["prompt_tokens_details"]["cached_tokens"], t3))
    med = lambda i: statistics.median(x[i] for x in rows)  # noqa: E731
    print(f"| {H} | {med(0):.0f} | {med(1) * 1e3:.1f} | {med(2):.0f} | {med(3):.0f} | {med(4) * 1e3:.1f} | "
          f"{med(1) / med(4):.1f} | {med(5):.0f} | {med(6) * 1e3:.1f} | {med(1) / med(6):.1f} |", flush=True)
