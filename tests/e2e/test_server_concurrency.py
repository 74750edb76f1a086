"""End-to-end test of `dsv41 serve` under concurrency (issue 12): shared engine steps, stalled and cancelling
clients, the API key, /metrics, SIGTERM drain.

Usage: test_server_concurrency.py DSV41_BINARY MODEL_DIR
127.0.0.1 only; every wait is bounded (request timeouts, joins with timeouts, a deadline for the whole run).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import check, exit_with_summary, free_port, mval, parse_metrics  # noqa: E402

import openai

BIN, MODEL = sys.argv[1:3]
KEY = "sekret-e2e"
START = time.time()


def http(method, url, body=None, key=KEY, timeout=30):
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
    if key:
        req.add_header("Authorization", "Bearer " + key)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics(base):
    """/metrics of the server at base, parsed (a failed check when it is not Prometheus text)."""
    code, text = http("GET", base + "/metrics", key=None)
    check(code == 200, f"/metrics 200: {code}")
    out, ok = parse_metrics(text)
    check(ok, "/metrics parses as Prometheus text, every sample typed")
    return out


def longest_step(ms):
    """An upper bound of the longest engine step so far: the smallest dsv41_step_seconds bucket holding every step."""
    n = mval(ms, "dsv41_step_seconds_count")
    full = [float(dict(lab)["le"]) for (name, lab), v in ms.items()
            if name == "dsv41_step_seconds_bucket" and dict(lab)["le"] != "+Inf" and v >= n]
    return min(full) if full else float("inf")


def start(port, *extra, env_key=True):
    env = dict(os.environ)
    if env_key:
        env["DSV41_API_KEY"] = KEY  # the key from the environment
    p = subprocess.Popen([BIN, "serve", "--model", MODEL, "--port", str(port), "--model-name", "tiny", "--no-cache",
                          "--max-running", "16", "--keepalive-ms", "50", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if http("GET", base + "/health", key=None, timeout=2)[0] == 200:
                return p, base
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise SystemExit("server did not start")


def prompt_of(i):
    return [{"role": "user", "content": f"Tell me about the number {i}."}]


def stream_text(client, i, max_tokens=16):
    text, finish = "", None
    for ch in client.chat.completions.create(model="tiny", messages=prompt_of(i), max_tokens=max_tokens, seed=100 + i,
                                             temperature=0.9, stream=True):
        if ch.choices and ch.choices[0].delta.content:
            text += ch.choices[0].delta.content
        if ch.choices and ch.choices[0].finish_reason:
            finish = ch.choices[0].finish_reason
    return text, finish


def raw_stream_request(port, body):
    """A streaming request on a raw socket; returns the socket (the caller reads or not)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: " + str(len(data)).encode() +
              b"\r\n\r\n" + data)
    return s


port = free_port()
server, base = start(port, "--shutdown-timeout", "2")
sent = {"chat200": 0, "chat401": 0, "models401": 0}
try:
    # The API key: 401 without it or with a wrong one, /health and /metrics stay open.
    code, body = http("GET", base + "/v1/models", key=None)
    check(code == 401 and json.loads(body)["error"]["code"] == "invalid_api_key", f"401 without the key: {code}")
    sent["models401"] += 1
    code, _ = http("POST", base + "/v1/chat/completions", {"messages": prompt_of(0), "max_tokens": 2}, key="wrong")
    check(code == 401, f"401 with a wrong key: {code}")
    sent["chat401"] += 1
    try:
        openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0, timeout=10).models.list()
        check(False, "openai client with a wrong key accepted")
    except openai.AuthenticationError:
        check(True, "openai client: AuthenticationError with a wrong key")

    client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, timeout=60, max_retries=0)
    # Each request alone, then 16 at once: the same text for the same seed.
    n = 16
    t0 = time.time()
    alone = [stream_text(client, i) for i in range(n)]
    t_alone = time.time() - t0
    sent["chat200"] += n
    results, errors = [None] * n, []

    def worker(i):
        try:
            results[i] = stream_text(client, i)
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            errors.append(repr(e))

    t0 = time.time()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    t_conc = time.time() - t0
    sent["chat200"] += n
    check(not errors, f"16 concurrent streams without errors: {errors[:2]}")
    same = sum(1 for i in range(n) if results[i] == alone[i])
    check(same == n, f"16 concurrent streams each equal their single-request output ({same}/{n})")
    check(all(a[0] for a in alone), "single-request outputs are not empty")
    print(f"16 streams: one by one {t_alone:.2f} s, concurrently {t_conc:.2f} s")

    # A stalled reader (sends a streaming request, never reads) does not delay a second client.
    kw = dict(model="tiny", messages=prompt_of(99), max_tokens=8, seed=1, temperature=0)
    t0 = time.time()
    ref = client.chat.completions.create(**kw)
    t_ref = time.time() - t0
    stalled = raw_stream_request(port, {"messages": prompt_of(98), "max_tokens": 400, "stream": True})
    time.sleep(0.3)
    t0 = time.time()
    other = client.chat.completions.create(**kw)
    t_other = time.time() - t0
    sent["chat200"] += 2
    check(other.choices[0].message.content == ref.choices[0].message.content, "second client's answer unchanged")
    check(t_other < 2 * t_ref + 0.5, f"stalled reader does not delay a second client: {t_other:.2f} s vs {t_ref:.2f} s")
    stalled.close()
    sent["chat200"] += 1  # the stalled stream had begun with 200

    # A client that closes during the prefill of a long prompt: cancelled, the slot freed, the next request prompt.
    deadline = time.time() + 20
    while time.time() < deadline and mval(metrics(base), "dsv41_running_requests") > 0:
        time.sleep(0.05)  # the stalled request's cancel (its socket closed above)
    before = metrics(base)
    long_prompt = [{"role": "user", "content": " ".join(f"w{i}" for i in range(600))}]
    s = raw_stream_request(port, {"messages": long_prompt, "max_tokens": 50, "stream": True})
    s.recv(1)  # the response began: the request is submitted (its role chunk comes first)
    s.close()
    sent["chat200"] += 1  # its response (a stream) had begun with 200
    t_close = time.time()
    cancelled_at = None
    while time.time() < t_close + 10:
        ms = metrics(base)
        if mval(ms, "dsv41_engine_requests_total", finish="cancelled") > mval(before, "dsv41_engine_requests_total",
                                                                             finish="cancelled"):
            cancelled_at = time.time()
            break
        time.sleep(0.02)
    check(cancelled_at is not None, "a client gone during prefill is cancelled (/metrics shows it)")
    if cancelled_at:
        print(f"cancel noticed {cancelled_at - t_close:.2f} s after the close")
        # Noticed when the running prefill chunk ends: 2 s, or two of the longest step where steps are slower (an
        # instrumented build).
        bound = max(2.0, 2 * longest_step(ms))
        check(cancelled_at - t_close < bound, f"cancel within {bound:.1f} s of the close (2 s, or two of the longest "
                                              f"step): {cancelled_at - t_close:.2f} s")
        check(mval(ms, "dsv41_completion_tokens_total") == mval(before, "dsv41_completion_tokens_total"),
              "the cancelled request generated nothing (it was still in prefill)")
        free_by = time.time() + 2
        while mval(ms, "dsv41_running_requests") > 0 and time.time() < free_by:
            ms = metrics(base)
        check(mval(ms, "dsv41_running_requests") == 0, "its slot is free")
    t0 = time.time()
    client.chat.completions.create(**kw)
    sent["chat200"] += 1
    check(time.time() - t0 < 2 * t_ref + 0.5, f"the following request is served promptly: {time.time() - t0:.2f} s")

    # Limits: too many messages 400, a body over the limit 413.
    code, body = http("POST", base + "/v1/chat/completions", {"messages": prompt_of(0) * 3000, "max_tokens": 1})
    check(code == 400 and json.loads(body)["error"]["code"] == "too_many_messages", f"too many messages: {code}")
    code, body = http("POST", base + "/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "x" * (9 << 20)}], "max_tokens": 1})
    check(code == 413, f"body too large: {code}")
    code, body = http("POST", base + "/v1/chat/completions",
                      {"messages": prompt_of(0), "logprobs": True, "top_logprobs": 21, "max_tokens": 1})
    check(code == 400 and "top_logprobs" in json.loads(body)["error"]["message"], "top_logprobs 21: a clear 400")
    code, body = http("POST", base + "/v1/chat/completions", {"messages": prompt_of(0), "frobnicate": 1})
    check(code == 400 and "frobnicate" in json.loads(body)["error"]["message"], "an unknown field: a clear 400")
    r = client.chat.completions.create(model="tiny", messages=prompt_of(1), max_tokens=4, reasoning_effort="medium")
    check(isinstance((r.choices[0].message.model_extra or {}).get("reasoning_content"), str),
          "reasoning_effort medium accepted (thinking)")
    sent["chat200"] += 1

    # /metrics: counters match what was sent. The server counts a request after its last byte is written, so the
    # last answer may be read before it is counted: wait (bounded) for it.
    deadline = time.time() + 5
    ms = metrics(base)
    while mval(ms, "dsv41_requests_total", path="/v1/chat/completions", code="200") < sent["chat200"] and \
            time.time() < deadline:
        time.sleep(0.05)
        ms = metrics(base)
    check(mval(ms, "dsv41_requests_total", path="/v1/chat/completions", code="200") == sent["chat200"],
          f"chat 200s counted: {mval(ms, 'dsv41_requests_total', path='/v1/chat/completions', code='200')} "
          f"vs {sent['chat200']}")
    check(mval(ms, "dsv41_requests_total", path="/v1/chat/completions", code="401") == sent["chat401"], "chat 401s counted")
    check(mval(ms, "dsv41_requests_total", path="/v1/models", code="401") >= sent["models401"], "models 401s counted")
    check(mval(ms, "dsv41_requests_total", path="/v1/chat/completions", code="413") == 1, "413 counted")
    ended = sum(mval(ms, "dsv41_engine_requests_total", finish=f)
                for f in ("stop", "length", "cancelled", "cancelled_slow_reader", "error"))
    check(ended == sent["chat200"], f"engine requests ended: {ended} vs {sent['chat200']}")
    check(mval(ms, "dsv41_time_to_first_token_seconds_count") >= sent["chat200"] - 1,
          "TTFT observed for each request that generated")
    check(mval(ms, "dsv41_step_seconds_count") > 0 and mval(ms, "dsv41_prompt_tokens_total") > 0, "steps and tokens")

    # SIGTERM drains: a running stream is cancelled at the deadline (or finishes), new requests are refused, exit 0.
    got = {}

    def long_stream():
        try:
            txt, fin = stream_text(client, 5, max_tokens=1500)
            got["finish"] = fin
        except Exception as e:  # noqa: BLE001
            got["error"] = repr(e)

    t = threading.Thread(target=long_stream)
    t.start()
    time.sleep(0.5)
    server.send_signal(signal.SIGTERM)
    t_sig = time.time()
    time.sleep(0.2)
    try:
        code, _ = http("POST", base + "/v1/chat/completions", {"messages": prompt_of(0), "max_tokens": 2}, timeout=5)
        check(code == 503, f"a request while draining: 503 ({code})")
    except OSError:
        check(True, "a request while draining: refused")
    try:
        rc = server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        rc = None
    t.join(timeout=10)
    check(rc == 0, f"SIGTERM: exit 0 ({rc}) after {time.time() - t_sig:.2f} s")
    check(time.time() - t_sig < 2 + 8, "SIGTERM: within the deadline (2 s), idle keep-alive connections (5 s), a margin")
    check("finish" in got or "error" in got, f"the running stream ended: {got}")
    if rc is None:
        server.kill()
    log = server.stdout.read()
    print(log[-1500:])
    check("draining" in log and "drained" in log, "the drain is logged")
finally:
    if server.poll() is None:
        server.kill()
        server.wait(timeout=10)
print(f"total {time.time() - START:.1f} s")
exit_with_summary()
