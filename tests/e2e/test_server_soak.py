"""Soak test of `dsv41 serve` (issue 14): many concurrent clients for a fixed time, well-formed requests mixed with
hostile ones; afterwards every well-formed answer equals the same request's answer run alone, /health answered
within a bound all along, /metrics agrees with what was sent, and the server's RSS stayed flat after warm-up.

Usage: test_server_soak.py DSV41_BINARY MODEL_DIR [--seconds 60] [--clients 32] [--health-bound 2.0]
                           [--refusal-fraction 0.02] [--rss-growth 0.10] [--keep-log FILE]

Mixed into the load, each client picking by a seeded draw: chat and completions, streamed and not, greedy and
seeded sampling (16 fixed requests, each run alone first); malformed bodies (bad JSON, wrong types, unknown fields);
bodies over --max-body-bytes sent with Content-Length, with chunked transfer and as a gzip bomb (compressed under the
limit); deeply nested JSON; slow senders (one byte per 100 ms); idle connections (silent, and after half a request
line); clients that vanish mid-stream; clients that close during the prefill of a long prompt.
127.0.0.1 only; every wait is bounded (socket timeouts, joins with timeouts, the soak's deadline).
Python stdlib + openai; raw sockets / http.client for the hostile parts.
"""
import argparse
import http.client
import json
import os
import random
import shlex
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections import Counter

sys.path.insert(0, os.path.dirname(__file__))
import e2e_common  # noqa: E402
from e2e_common import check, exit_with_summary, mval, parse_metrics, start_server, stop_server  # noqa: E402

import openai

ap = argparse.ArgumentParser()
ap.add_argument("binary")
ap.add_argument("model")
ap.add_argument("--seconds", type=float, default=60)
ap.add_argument("--clients", type=int, default=32)
ap.add_argument("--health-bound", type=float, default=2.0, help="seconds /health may take during the soak")
ap.add_argument("--refusal-fraction", type=float, default=0.02, help="429/503 share of well-formed requests allowed")
ap.add_argument("--rss-growth", type=float, default=0.10, help="allowed RSS growth after the first minute")
ap.add_argument("--keep-log", help="copy the server's log here")
ap.add_argument("--server-args", default="", help="more dsv41 serve arguments (e.g. --no-cache)")
ap.add_argument("--skip", default="", help="comma-separated hostile kinds to leave out (e.g. nested/1), to measure "
                                           "the rest while a known server bug is open")
A = ap.parse_args()
SKIP = set(filter(None, A.skip.split(",")))

MAX_BODY = 256 << 10   # --max-body-bytes
IDLE = 10              # --idle-timeout (s): reading a request, an idle connection (keep-alive: min(IDLE, 5))
T0 = time.time()
TMP = tempfile.mkdtemp(prefix="dsv41-soak-")
LOG = os.path.join(TMP, "server.log")

# ---------------------------------------------------------------------------------------------- bookkeeping
lock = threading.Lock()
seen = Counter()       # (path, status) of every response whose status line we read
actions = Counter()    # action name -> times run
wf = Counter()         # well-formed: ok, mismatch, refused, error
problems = []          # (action, what) of each failure, the first few printed
usage_completion = [0]
stop_at = [0.0]


def note(path, code):
    with lock:
        seen[(path, code)] += 1


def problem(action, what):
    with lock:
        problems.append((action, what))


# ---------------------------------------------------------------------------------------------- the requests
def chat_spec(k):
    return {"kind": "chat", "messages": [{"role": "user", "content": f"Tell me a short story about the number {k}."}],
            "max_tokens": 8 + 2 * k, "seed": 1000 + k, "temperature": 0.0 if k % 2 == 0 else 0.8}


def comp_spec(k):
    prompts = ["import os\n", "def main():\n", "# A list of prime numbers\n", "class Stack:\n",
               "The quick brown fox", "for i in range(10):\n", "Once upon a time", "SELECT * FROM"]
    return {"kind": "comp", "prompt": prompts[k], "max_tokens": 8 + 2 * k, "seed": 2000 + k,
            "temperature": 0.0 if k % 2 == 0 else 0.8}


SPECS = [chat_spec(k) for k in range(8)] + [comp_spec(k) for k in range(8)]


def body_of(spec, stream):
    b = {"model": "tiny", "max_tokens": spec["max_tokens"], "seed": spec["seed"], "temperature": spec["temperature"]}
    if spec["kind"] == "chat":
        b["messages"] = spec["messages"]
    else:
        b["prompt"] = spec["prompt"]
    if stream:
        b["stream"] = True
    return b


def run_openai(client, spec, stream):
    """Returns (text, finish_reason, completion_tokens or None); notes the status."""
    path = "/v1/chat/completions" if spec["kind"] == "chat" else "/v1/completions"
    kw = dict(model="tiny", max_tokens=spec["max_tokens"], seed=spec["seed"], temperature=spec["temperature"])
    api = client.chat.completions if spec["kind"] == "chat" else client.completions
    if spec["kind"] == "chat":
        kw["messages"] = spec["messages"]
    else:
        kw["prompt"] = spec["prompt"]
    if not stream:
        r = api.create(**kw)
        note(path, 200)
        c = r.choices[0]
        text = c.message.content if spec["kind"] == "chat" else c.text
        return text or "", c.finish_reason, r.usage.completion_tokens
    text, finish = "", None
    s = api.create(stream=True, **kw)
    note(path, 200)
    for ch in s:
        if not ch.choices:
            continue
        c = ch.choices[0]
        piece = c.delta.content if spec["kind"] == "chat" else c.text
        text += piece or ""
        finish = c.finish_reason or finish
    return text, finish, None


REF = {}  # (spec index, stream) -> (text, finish)

LONG_PROMPT = " ".join(f"w{i}" for i in range(600))


# ---------------------------------------------------------------------------------------------- raw HTTP
def raw_conn(timeout=30):
    return socket.create_connection(("127.0.0.1", PORT), timeout=timeout)


def read_response(s, limit=1 << 20):
    """Reads until the peer closes (requests send Connection: close); returns (status or None, headers, body)."""
    data = b""
    try:
        while len(data) < limit:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except OSError:
        pass
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    return (int(m.group(1)) if m else None), head, body


def post_raw(path, body, extra=b"", timeout=60):
    s = raw_conn(timeout)
    try:
        s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                  b"Content-Type: application/json\r\n" + extra + b"Content-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        code, head, resp = read_response(s)
    finally:
        s.close()
    if code is not None:
        note(path, code)
    return code, resp


def is_error_json(resp):
    try:
        return isinstance(json.loads(resp)["error"]["message"], str)
    except (ValueError, KeyError, TypeError):
        return False


# Malformed bodies: each a clear 400 with a JSON error (bad JSON, not an object, wrong types, unknown fields).
MALFORMED = [
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1'),
    ("/v1/completions", b'{bad json}'),
    ("/v1/completions", b''),
    ("/v1/completions", b'[1, 2, 3]'),
    ("/v1/completions", b'"just a string"'),
    ("/v1/completions", b'{"prompt": 5, "max_tokens": 1}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": "ten"}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1, "temperature": "hot"}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1, "frobnicate": true}'),
    ("/v1/completions", b'{"prompt": "\xff\xfe\xfd", "max_tokens": 1}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1e308}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1, "stream": "yes"}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1, "seed": 1.5}'),
    ("/v1/completions", b'{"prompt": "x", "max_tokens": 1, "n": 3}'),
    ("/v1/chat/completions", b'{"messages": "hello", "max_tokens": 1}'),
    ("/v1/chat/completions", b'{"messages": [], "max_tokens": 1}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "wizard", "content": "x"}], "max_tokens": 1}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": 5}], "max_tokens": 1}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "tools": 5}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "unknown_field": {}}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "top_logprobs": "all"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "session_id": 7}'),
]
SMALL_OK = b'{"prompt": "x", "max_tokens": 1, "temperature": 0}'


def act_malformed(rng, _client):
    path, body = MALFORMED[rng.randrange(len(MALFORMED))]
    code, resp = post_raw(path, body)
    if code != 400 or not is_error_json(resp):
        problem("malformed", f"{path} {body!r}: {code} {resp[:120]!r}")


def act_oversized(rng, _client):
    kinds = [k for k in ("content-length", "chunked", "gzip") if "oversized/" + k not in SKIP]
    if not kinds:
        return
    kind = rng.choice(kinds)
    path = "/v1/completions"
    if kind == "content-length":
        code, resp = post_raw(path, b'{"prompt": "' + b"a" * (2 * MAX_BODY) + b'", "max_tokens": 1}')
        if code != 413 or not is_error_json(resp):
            problem("oversized/content-length", f"{code} {resp[:120]!r}")
        return
    # Valid JSON padded with whitespace: a 200 means the body limit was not applied.
    if kind == "chunked":
        s = raw_conn(60)
        try:
            s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                      b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            piece = b" " * (64 << 10)
            s.sendall(b"%x\r\n%s\r\n" % (len(SMALL_OK), SMALL_OK))
            # A server may refuse on the headers (411/413) and close: read its answer before a reset can drop it.
            if not select.select([s], [], [], 0.5)[0]:
                try:
                    for _ in range(4 * MAX_BODY // len(piece)):
                        s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                    s.sendall(b"0\r\n\r\n")
                except OSError:
                    pass
            code, _, resp = read_response(s)
        finally:
            s.close()
        if code is not None:
            note(path, code)
        if code not in (411, 413):
            problem("oversized/chunked", f"a chunked body of {4 * MAX_BODY} bytes (limit {MAX_BODY}): {code} {resp[:100]!r}")
        return
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    comp = z.compress(SMALL_OK) + z.compress(b" " * (64 * MAX_BODY)) + z.flush()  # 16 MiB in ~17 KB
    code, resp = post_raw(path, comp, extra=b"Content-Encoding: gzip\r\n")
    if code not in (413, 415):
        problem("oversized/gzip", f"a gzip body of {len(comp)} bytes inflating to {64 * MAX_BODY} (limit {MAX_BODY}): "
                                  f"{code} {resp[:100]!r}")


def act_nested(rng, _client):
    """Nesting as deep as the body limit allows (~130k levels): a 400 (or a 200 where the field is free-form),
    never a crash."""
    kinds = [k for k in ("body", "messages", "tools", "metadata") if "nested/" + k not in SKIP]
    if not kinds:
        return
    kind = rng.choice(kinds)
    d = MAX_BODY // 2 - 128
    deep = b"[" * d + b"]" * d
    chat = b'{"max_tokens": 1, "messages": [{"role": "user", "content": '
    if kind == "body":  # the whole body: not an object
        code, resp = post_raw("/v1/completions", deep)
        ok = code == 400
    elif kind == "messages":  # a message's content: not text
        code, resp = post_raw("/v1/chat/completions", chat + deep + b"}]}")
        ok = code == 400
    elif kind == "tools":  # a tool that is not an object
        code, resp = post_raw("/v1/chat/completions", chat + b'"x"}], "tools": [' + deep + b"]}")
        ok = code == 400
    else:  # metadata (free-form): answered, 200 or 400
        d = MAX_BODY // 8
        code, resp = post_raw("/v1/completions", b'{"prompt": "x", "max_tokens": 1, "metadata": ' + b'{"a": ' * d +
                              b"1" + b"}" * d + b"}")
        ok = code in (200, 400)
    if not ok:
        problem(f"nested/{kind}", f"{code} {resp[:120]!r}")


def act_slow_sender(rng, _client):
    """A well-formed completions request sent one byte per 100 ms; its answer equals the alone run."""
    k = 8 + rng.randrange(8)
    body = json.dumps(body_of(SPECS[k], False)).encode()
    req = (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: " +
           str(len(body)).encode() + b"\r\n\r\n" + body)
    s = raw_conn(IDLE + 60)
    try:
        for i in range(len(req)):
            s.sendall(req[i:i + 1])
            time.sleep(0.1)
        code, _, resp = read_response(s)
    finally:
        s.close()
    if code is not None:
        note("/v1/completions", code)
    with lock:
        wf["slow_sender"] += 1
    if code in (429, 503):
        with lock:
            wf["refused"] += 1
        return
    try:
        r = json.loads(resp)
        got = (r["choices"][0]["text"], r["choices"][0]["finish_reason"])
    except (ValueError, KeyError, IndexError, TypeError):
        got = None
    if code != 200 or got != REF[(k, False)]:
        with lock:
            wf["mismatch" if code == 200 else "error"] += 1
        problem("slow_sender", f"spec {k}: {code} {got!r} vs {REF[(k, False)]!r}")
    else:
        with lock:
            wf["ok"] += 1


def act_idle(rng, _client):
    """A connection that sends nothing (or half a request line): the server closes it within its timeouts."""
    half = rng.random() < 0.5
    s = raw_conn(IDLE + 10)
    t = time.time()
    try:
        if half:
            s.sendall(b"POST /v1/completions HTT")
        code, _, _ = read_response(s)
    finally:
        s.close()
    waited = time.time() - t
    if code is not None:
        note("other", code)  # a 408/400 may come before the close (not compared with /metrics)
    if waited > IDLE + 5:
        problem("idle", f"{'half a request line' if half else 'a silent connection'} kept {waited:.1f} s "
                        f"(idle timeout {IDLE} s)")


def act_vanish(rng, client):
    """A stream closed after a few chunks, through the openai client or a raw socket."""
    if rng.random() < 0.5:
        s = client.chat.completions.create(model="tiny", messages=SPECS[rng.randrange(8)]["messages"], max_tokens=400,
                                           temperature=0.7, seed=rng.randrange(1 << 30), stream=True)
        note("/v1/chat/completions", 200)
        for i, _ in enumerate(s):
            if i >= 3:
                break
        s.response.close()
        return
    body = json.dumps({"prompt": SPECS[8 + rng.randrange(8)]["prompt"], "max_tokens": 400, "stream": True}).encode()
    s = raw_conn(30)
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        data = b""
        while data.count(b"data: ") < 3:
            d = s.recv(4096)
            if not d:
                break
            data += d
        m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
        if m:
            note("/v1/completions", int(m.group(1)))
        if not m or m.group(1) != b"200":
            problem("vanish", f"{data[:120]!r}")
    finally:
        s.close()


def act_cancel_prefill(rng, _client):
    """A long prompt's stream closed as soon as its headers arrive (during the prefill)."""
    body = json.dumps({"messages": [{"role": "user", "content": LONG_PROMPT + f" {rng.randrange(1 << 30)}"}],
                       "max_tokens": 200, "stream": True}).encode()
    s = raw_conn(30)
    try:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        data = b""
        while b"\r\n" not in data:
            d = s.recv(64)
            if not d:
                break
            data += d
        m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
        code = int(m.group(1)) if m else None
        if code is not None:
            note("/v1/chat/completions", code)
        if code == 200:
            with lock:
                actions["cancel_prefill_200"] += 1
        elif code not in (429, 503):
            problem("cancel_prefill", f"{data[:120]!r}")
    finally:
        s.close()


def act_well_formed(rng, client, chat, stream):
    k = rng.randrange(8) + (0 if chat else 8)
    path = "/v1/chat/completions" if SPECS[k]["kind"] == "chat" else "/v1/completions"
    try:
        text, finish, used = run_openai(client, SPECS[k], stream)
    except openai.APIStatusError as e:
        note(path, e.status_code)
        with lock:
            wf["refused" if e.status_code in (429, 503) else "error"] += 1
        if e.status_code not in (429, 503):
            problem("well_formed", f"spec {k} stream={stream}: {e.status_code} {e.message[:120]}")
        return
    except (openai.APIError, OSError) as e:
        with lock:
            wf["error"] += 1
        problem("well_formed", f"spec {k} stream={stream}: {e!r}"[:200])
        return
    with lock:
        if (text, finish) == REF[(k, stream)]:
            wf["ok"] += 1
        else:
            wf["mismatch"] += 1
            problems.append(("well_formed", f"spec {k} stream={stream}: {(text, finish)!r} vs {REF[(k, stream)]!r}"))
        if used:
            usage_completion[0] += used


ACTIONS = [  # name, weight, function(rng, client)
    ("chat", 3, lambda r, c: act_well_formed(r, c, True, False)),
    ("chat_stream", 3, lambda r, c: act_well_formed(r, c, True, True)),
    ("completions", 3, lambda r, c: act_well_formed(r, c, False, False)),
    ("completions_stream", 3, lambda r, c: act_well_formed(r, c, False, True)),
    ("malformed", 3, act_malformed),
    ("oversized", 1, act_oversized),
    ("nested", 1, act_nested),
    ("slow_sender", 1, act_slow_sender),
    ("idle", 1, act_idle),
    ("vanish", 1, act_vanish),
    ("cancel_prefill", 1, act_cancel_prefill),
]


def worker(i):
    rng = random.Random(7919 * (i + 1))
    client = openai.OpenAI(base_url=BASE + "/v1", api_key="none", timeout=120, max_retries=0)
    names = [a[0] for a in ACTIONS if a[0] not in SKIP]
    weights = [a[1] for a in ACTIONS if a[0] not in SKIP]
    fns = {a[0]: a[2] for a in ACTIONS}
    while time.time() < stop_at[0] and server.poll() is None:
        name = rng.choices(names, weights)[0]
        with lock:
            actions[name] += 1
        try:
            fns[name](rng, client)
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported
            problem(name, f"{e!r}"[:200])
    client.close()


# ---------------------------------------------------------------------------------------------- samplers
health = []   # (t, status, seconds)
rss = []      # (t, kB)


def health_sampler():
    while time.time() < stop_at[0] and server.poll() is None:
        t = time.time()
        try:
            with urllib.request.urlopen(BASE + "/health", timeout=10) as r:
                code = r.status
                r.read()
        except urllib.error.HTTPError as e:
            code = e.code
        except OSError:
            code = None
        dt = time.time() - t
        if code is not None:
            note("/health", code)
        health.append((t - T0, code, dt))
        time.sleep(max(0.0, 1.0 - dt))


def vmrss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None


def rss_sampler(t_start):
    while time.time() < stop_at[0] + 1 and server.poll() is None:
        v = vmrss(server.pid)
        if v:
            rss.append((time.time() - t_start, v))
        time.sleep(2.0)


# ---------------------------------------------------------------------------------------------- /metrics
def metrics():
    with urllib.request.urlopen(BASE + "/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode())


# ---------------------------------------------------------------------------------------------- the run
threads_n = 2 * A.clients + 16  # each client may hold a pooled keep-alive connection and a raw one
cmd = [A.binary, "serve", "--model", A.model, "--model-name", "tiny", "--max-running", "8", "--max-queued", "32",
       "--threads", str(threads_n), "--max-body-bytes", str(MAX_BODY), "--idle-timeout", str(IDLE),
       "--write-timeout", "5", "--request-timeout", "120", "--keepalive-ms", "100", "--shutdown-timeout", "5",
       *shlex.split(A.server_args)]
logf = open(LOG, "w")
env = dict(os.environ, XDG_CACHE_HOME=os.path.join(TMP, "xdg"))  # sessions on (the default), in a temp dir
server, BASE = start_server(cmd, env=env, output=logf)
PORT = int(BASE.rsplit(":", 1)[1])
print("server:", " ".join(cmd[1:]), "port", PORT, flush=True)
try:
    # Each well-formed request alone, streamed and not (streamed equals not streamed).
    alone = openai.OpenAI(base_url=BASE + "/v1", api_key="none", timeout=120, max_retries=0)
    for k, spec in enumerate(SPECS):
        for stream in (False, True):
            text, finish, _ = run_openai(alone, spec, stream)
            REF[(k, stream)] = (text, finish)
        check(REF[(k, False)] == REF[(k, True)], f"spec {k}: streamed equals not streamed alone: "
                                                 f"{REF[(k, True)]!r} vs {REF[(k, False)]!r}")
    empty = [k for k in range(len(SPECS)) if not REF[(k, False)][0]]  # a sampled one may stop at once
    check(len(empty) <= 2, f"alone answers are not empty (at most 2 of 16): {[(k, REF[(k, False)]) for k in empty]}")
    alone.close()
    # The server counts a request in its logger, after the last byte is written: a client that has read a whole
    # stream can ask /metrics before its request is counted. Wait (bounded) until the alone runs are all counted.
    deadline = time.time() + 10
    while True:
        ms0, _ = metrics()
        counted = all(mval(ms0, "dsv41_requests_total", path=p, code=str(c)) == n for (p, c), n in seen.items())
        if counted or time.time() > deadline:
            break
        time.sleep(0.1)
    check(counted, f"/metrics counts the alone runs {dict(seen)}")
    with lock:
        seen.clear()  # from here on: what the soak sent (ms0 holds the alone runs)
    print(f"references: {len(REF)} alone runs in {time.time() - T0:.1f} s", flush=True)

    t_start = time.time()
    stop_at[0] = t_start + A.seconds
    samplers = [threading.Thread(target=health_sampler, daemon=True),
                threading.Thread(target=rss_sampler, args=(t_start,), daemon=True)]
    workers = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(A.clients)]
    for t in samplers + workers:
        t.start()
    last_print = t_start
    while time.time() < stop_at[0] and server.poll() is None:
        time.sleep(1)
        if time.time() - last_print >= 60:
            last_print = time.time()
            with lock:
                print(f"  {time.time() - t_start:5.0f} s: {sum(actions.values())} actions, well-formed {dict(wf)}, "
                      f"{len(problems)} problems, rss {rss[-1][1] if rss else '?'} kB", flush=True)
    for t in workers:
        t.join(timeout=max(1.0, stop_at[0] + IDLE + 90 - time.time()))
    stuck = sum(t.is_alive() for t in workers)
    for t in samplers:
        t.join(timeout=15)
    elapsed = time.time() - t_start
    check(server.poll() is None, f"the server is alive after the soak (exit {server.poll()})")
    check(stuck == 0, f"every client finished within its bounds ({stuck} still running)")

    # Well-formed answers.
    n_wf = wf["ok"] + wf["mismatch"] + wf["refused"] + wf["error"]
    print(f"soak: {elapsed:.0f} s, {A.clients} clients, {sum(actions.values())} actions: {dict(sorted(actions.items()))}")
    print(f"well-formed: {n_wf} ({dict(wf)}); {n_wf / elapsed:.2f} per s")
    check(n_wf > 0 and wf["ok"] > 0, "well-formed requests were answered")
    check(wf["mismatch"] == 0, f"every well-formed answer equals its alone run ({wf['mismatch']} differ)")
    check(wf["error"] == 0, f"no well-formed request failed ({wf['error']})")
    check(wf["refused"] <= A.refusal_fraction * max(n_wf, 1),
          f"429/503 refusals {wf['refused']} <= {A.refusal_fraction:.0%} of {n_wf}")
    by_action = Counter(a for a, _ in problems)
    for a, n in sorted(by_action.items()):
        print(f"problems [{a}]: {n}; first: {next(w for b, w in problems if b == a)}")
    for a in ("malformed", "oversized/content-length", "oversized/chunked", "oversized/gzip", "nested/body", "nested/messages",
              "nested/tools", "nested/metadata", "idle", "vanish", "cancel_prefill", "slow_sender"):
        check(by_action[a] == 0, f"{a}: answered as expected ({by_action[a]} not)")
    others = {a: n for a, n in by_action.items() if a not in (
        "malformed", "oversized/content-length", "oversized/chunked", "oversized/gzip", "nested/body", "nested/messages",
        "nested/tools", "nested/metadata", "idle", "vanish", "cancel_prefill", "slow_sender", "well_formed")}
    check(not others, f"no other failures: {others}")

    # /health during the soak.
    codes = Counter(c for _, c, _ in health)
    lat = sorted(d for _, _, d in health)
    if lat:
        print(f"/health: {len(health)} samples, codes {dict(codes)}, latency median {lat[len(lat) // 2] * 1e3:.0f} ms, "
              f"p99 {lat[int(0.99 * (len(lat) - 1))] * 1e3:.0f} ms, max {lat[-1] * 1e3:.0f} ms")
    check(len(health) >= 0.5 * elapsed, f"/health sampled about every second ({len(health)} in {elapsed:.0f} s)")
    check(codes.get(200, 0) == len(health), f"/health 200 throughout: {dict(codes)}")
    slow = [(round(t, 1), round(d, 2)) for t, _, d in health if d > A.health_bound]
    check(not slow, f"/health within {A.health_bound} s throughout: {len(slow)} slower, first {slow[:5]}")

    # /metrics after the soak: idle, then its counters agree with what was sent.
    deadline = time.time() + 30
    while True:
        ms, parsed = metrics()
        idle = mval(ms, "dsv41_running_requests") == 0 and mval(ms, "dsv41_queue_depth") == 0
        agree = all(mval(ms, "dsv41_requests_total", path=p, code=str(c)) - mval(ms0, "dsv41_requests_total", path=p,
                                                                                 code=str(c)) == n
                    for (p, c), n in seen.items() if p != "other")
        if (idle and agree) or time.time() > deadline:
            break
        time.sleep(0.5)
    check(parsed, "/metrics parses as Prometheus text, every sample typed")
    check(idle, "after the soak no request is running or queued")
    for (p, c), n in sorted(seen.items()):
        if p == "other":
            continue
        got = mval(ms, "dsv41_requests_total", path=p, code=str(c)) - mval(ms0, "dsv41_requests_total", path=p, code=str(c))
        check(got == n, f"/metrics requests_total{{path={p},code={c}}}: {got:.0f} vs {n} seen "
                        f"(all seen: {dict(seen)}, actions {dict(actions)})")
    for (name, labels), v in ms.items():
        if name == "dsv41_requests_total":
            lab = dict(labels)
            if lab["path"] in ("/v1/chat/completions", "/v1/completions", "/health") and \
                    (lab["path"], int(lab["code"])) not in seen and lab["path"] != "/health":
                check(v - ms0.get((name, labels), 0.0) == 0, f"/metrics counts {lab} that were never sent: {v}")
    started = sum(n for (p, c), n in seen.items() if p.startswith("/v1/") and c == 200)
    ended = sum(mval(ms, "dsv41_engine_requests_total", finish=f) - mval(ms0, "dsv41_engine_requests_total", finish=f)
                for f in ("stop", "length", "cancelled", "cancelled_slow_reader", "error"))
    check(ended == started, f"engine requests ended {ended:.0f} == 200 answers on /v1 {started}")
    cancelled = sum(mval(ms, "dsv41_engine_requests_total", finish=f) - mval(ms0, "dsv41_engine_requests_total", finish=f)
                    for f in ("cancelled", "cancelled_slow_reader"))
    check(actions["cancel_prefill_200"] <= cancelled <= actions["cancel_prefill_200"] + actions["vanish"],
          f"cancelled {cancelled:.0f}: every prefill close ({actions['cancel_prefill_200']}), at most the vanished "
          f"streams besides ({actions['vanish']})")
    check(mval(ms, "dsv41_engine_requests_total", finish="error") == mval(ms0, "dsv41_engine_requests_total", finish="error"),
          "no engine request ended in error")
    refused_seen = sum(n for (p, c), n in seen.items() if p.startswith("/v1/") and c == 429)
    check(mval(ms, "dsv41_refused_total") - mval(ms0, "dsv41_refused_total") == refused_seen,
          f"refused_total {mval(ms, 'dsv41_refused_total'):.0f} == 429s seen {refused_seen}")
    check(mval(ms, "dsv41_completion_tokens_total") - mval(ms0, "dsv41_completion_tokens_total") >= usage_completion[0],
          "completion tokens counted cover the non-streamed answers' usage")
    print("metrics:", {f"{n}{dict(l) if l else ''}": v for (n, l), v in sorted(ms.items(), key=str)
                       if n.startswith("dsv41_") and not n.endswith("_bucket")})

    # RSS: flat after the first minute (the first half of a shorter soak).
    warm = min(60.0, A.seconds / 2)
    after = [v for t, v in rss if t >= warm]
    check(len(after) >= 2, f"RSS sampled after {warm:.0f} s ({len(after)} samples)")
    if rss and after:
        base, end, peak = after[0], after[-1], max(v for _, v in rss)
        print(f"RSS kB: start {rss[0][1]}, at {warm:.0f} s {base}, end {end}, max {peak} "
              f"({len(rss)} samples every 2 s); series: {[v for _, v in rss[::max(1, len(rss) // 20)]]}")
        check(end <= base * (1 + A.rss_growth), f"RSS grew {100 * (end / base - 1):.1f}% after {warm:.0f} s "
                                                f"(at most {100 * A.rss_growth:.0f}%)")
    # A clean SIGTERM after all that.
    server.terminate()
    try:
        rc = server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, f"SIGTERM after the soak: exit 0 ({rc})")
finally:
    if server.poll() is None:
        stop_server(server)
    logf.close()
    if A.keep_log:
        with open(LOG) as f, open(A.keep_log, "w") as g:
            g.write(f.read())
    with open(LOG, errors="replace") as f:
        tail = f.read()[-2000:]
    if e2e_common._counts["failed"] or server.returncode not in (0, None):
        print("server log tail:\n" + tail)
    shutil.rmtree(TMP, ignore_errors=True)
print(f"total {time.time() - T0:.1f} s")
exit_with_summary()
