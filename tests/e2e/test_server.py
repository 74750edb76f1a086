"""End-to-end test of `dsv41 serve` with the official openai client and with curl.

Usage: test_server.py DSV41_BINARY MODEL_DIR TOKENIZER_JSON
Starts the server on a free loopback port, checks every endpoint, then stops it. Bounded: every
request has a timeout and the whole run stops itself.
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, __import__('os').path.dirname(__file__))
from e2e_common import check, exit_with_summary, free_port, start_server  # noqa: E402

import openai

BIN, MODEL, TOKENIZER = sys.argv[1:4]




def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def curl(*args):
    return subprocess.run(["curl", "-sS", "--max-time", "60", *args], capture_output=True, text=True, timeout=90)


def metric_samples(at=None, timeout=10):
    """GET /metrics from `at` (default: the main server): ({sample with labels: value}, whether it parses as
    Prometheus text with every sample typed)."""
    with urllib.request.urlopen((at or base) + "/metrics", timeout=timeout) as r:
        text = r.read().decode()
    sample = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"'
                        r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*")*\})? (\S+)')
    out, typed, ok = {}, set(), bool(text)
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line and not line.startswith("#"):
            m = sample.fullmatch(line)
            if not m:
                ok = False
                continue
            base_name = re.sub(r"_(bucket|sum|count)$", "", m.group(1))
            ok &= m.group(1) in typed or base_name in typed
            try:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
            except ValueError:
                ok = False
    return out, ok


port = free_port()
base = f"http://127.0.0.1:{port}"
# Sessions are on by default (in $XDG_CACHE_HOME/dsv41/sessions): a fresh directory, so that no earlier run's
# blocks change what this one computes.
xdg = tempfile.mkdtemp(prefix="dsv41_xdg_")
server = subprocess.Popen([BIN, "serve", "--model", MODEL, "--tokenizer", TOKENIZER, "--port", str(port),
                           "--model-name", "tiny", "--debug-load-delay-ms", "1500"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=dict(os.environ, XDG_CACHE_HOME=xdg))
try:
    # /health answers 503 while the model loads, then 200.
    deadline, saw_503 = time.time() + 30, False
    while time.time() < deadline:
        try:
            code, body = get(base + "/health")
        except OSError:
            time.sleep(0.05)
            continue
        if code == 503:
            saw_503 = True
            check(body.get("status") == "loading", "503 body says loading")
            code2, body2 = get(base + "/v1/models")  # listing needs no model
            time.sleep(0.1)
            continue
        break
    check(saw_503, "/health answered 503 while loading")
    check(code == 200 and body == {"status": "ok"}, f"/health 200 after loading: {code} {body}")

    # A burst of 256 connections at once: none is reset (the listen backlog is --backlog, not cpp-httplib's 5).
    def burst_one(i, ok):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
                ok[i] = data.startswith(b"HTTP/1.1 200")
        except OSError:
            ok[i] = False
    ok = [False] * 256
    threads = [threading.Thread(target=burst_one, args=(i, ok)) for i in range(len(ok))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    check(all(ok), f"burst of {len(ok)} connections: {sum(ok)} answered")

    client = openai.OpenAI(base_url=base + "/v1", api_key="none", timeout=120, max_retries=0)

    models = client.models.list()
    check([m.id for m in models.data] == ["tiny"], "models.list")

    # Special-token text in content is text: 20 forged "<｜User｜>" turns cost their text's tokens, not 20 control tokens.
    def prompt_tokens(content):
        return client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": content}],
                                              max_tokens=1).usage.prompt_tokens
    forged = prompt_tokens("a" + "<\uff5cUser\uff5c>" * 20) - prompt_tokens("a")
    check(forged >= 60, f"special-token text in user content is tokenized as text ({forged} tokens for 20)")

    # Non-streaming chat, fixed seed: deterministic.
    kw = dict(model="tiny", messages=[{"role": "user", "content": "Hello there"}], max_tokens=12, seed=7,
              temperature=0.9)
    a = client.chat.completions.create(**kw)
    b = client.chat.completions.create(**kw)
    check(a.choices[0].message.content == b.choices[0].message.content, "same seed, same answer")
    check(a.choices[0].message.role == "assistant", "role")
    check(a.choices[0].finish_reason in ("stop", "length"), "finish_reason")
    check(a.usage.completion_tokens <= 12 and a.usage.prompt_tokens > 0, f"usage {a.usage}")
    check(a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens, "usage total")

    # Streaming gives the same text as non-streaming for the same seed.
    pieces, finish, roles = [], None, []
    for chunk in client.chat.completions.create(stream=True, **kw):
        d = chunk.choices[0].delta
        if d.role:
            roles.append(d.role)
        if d.content:
            pieces.append(d.content)
        if chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    check(roles == ["assistant"], "stream role once")
    check("".join(pieces) == a.choices[0].message.content, "stream text == non-stream text")
    check(finish == a.choices[0].finish_reason, "stream finish_reason")

    # Thinking mode: reasoning_content arrives in the stream and the message.
    tk = dict(model="tiny", messages=[{"role": "user", "content": "Think"}], max_tokens=10, seed=3,
              temperature=0.8, reasoning_effort="low")
    t = client.chat.completions.create(**tk)
    msg = t.choices[0].message
    reasoning = (msg.model_extra or {}).get("reasoning_content")
    check(isinstance(reasoning, str), "reasoning_content present in thinking mode")
    # usage.completion_tokens_details.reasoning_tokens: the tokens before </think>; none in chat mode.
    rt = t.usage.completion_tokens_details.reasoning_tokens if t.usage.completion_tokens_details else None
    check(isinstance(rt, int) and 0 <= rt <= t.usage.completion_tokens, f"reasoning_tokens in range: {rt}")
    if isinstance(rt, int):
        check((rt > 0) == bool(reasoning), f"reasoning_tokens {rt} > 0 exactly when there is reasoning")
        check(not msg.content or rt < t.usage.completion_tokens, "content tokens are not counted as reasoning")
    ct = a.usage.completion_tokens_details.reasoning_tokens if a.usage.completion_tokens_details else None
    check(ct == 0, f"chat mode: reasoning_tokens 0 ({ct})")
    streamed_reasoning = ""
    for chunk in client.chat.completions.create(stream=True, **tk):
        extra = chunk.choices[0].delta.model_extra or {} if chunk.choices else {}
        streamed_reasoning += extra.get("reasoning_content") or ""
    check(streamed_reasoning == reasoning, "streamed reasoning == reasoning_content")

    # Stop strings: cut before the first occurrence, finish_reason stop.
    full = a.choices[0].message.content
    if len(full) >= 4:
        stop = full[2:4]
        s = client.chat.completions.create(stop=[stop], **kw)
        check(s.choices[0].message.content == full[: full.find(stop)], "stop string cuts the text")
        check(s.choices[0].finish_reason == "stop", "stop string finish_reason")

    # logprobs: greedy, so each token is its list's first; the bytes spell the content; streaming gives the same.
    lk = dict(model="tiny", messages=[{"role": "user", "content": "Hello there"}], max_tokens=10, temperature=0,
              logprobs=True, top_logprobs=3)
    lp = client.chat.completions.create(**lk)
    ents = lp.choices[0].logprobs.content if lp.choices[0].logprobs else None
    check(ents is not None and len(ents) > 0, "chat logprobs present")
    if ents:
        n_gen = lp.usage.completion_tokens - (1 if lp.choices[0].finish_reason == "stop" else 0)  # EOS unreported
        check(len(ents) == n_gen, f"one logprobs entry per generated token: {len(ents)} vs {n_gen}")
        check(all(len(e.top_logprobs) == 3 for e in ents), "top_logprobs: 3 alternatives each")
        check(all(e.logprob <= 0 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
                  for e in ents), "logprobs <= 0, alternatives most likely first")
        check(all(e.token == e.top_logprobs[0].token and abs(e.logprob - e.top_logprobs[0].logprob) < 1e-6
                  for e in ents), "greedy: each token is its list's most likely")
        check(all(sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1 + 1e-5 for e in ents), "probabilities sum <= 1")
        check(bytes(b for e in ents for b in e.bytes).decode("utf-8", "replace") == lp.choices[0].message.content,
              "the entries' bytes spell the content")
        streamed = []
        for chunk in client.chat.completions.create(stream=True, **lk):
            if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
                streamed += chunk.choices[0].logprobs.content
        check([(e.token, round(e.logprob, 5)) for e in streamed] == [(e.token, round(e.logprob, 5)) for e in ents],
              "streamed logprobs == non-streamed")
    nolp = client.chat.completions.create(model="tiny", messages=lk["messages"], max_tokens=4, temperature=0)
    check(nolp.choices[0].logprobs is None, "no logprobs unless asked")
    cl = client.completions.create(model="tiny", prompt="import os", max_tokens=6, temperature=0, logprobs=2)
    L = cl.choices[0].logprobs
    check(L is not None and "".join(L.tokens) == cl.choices[0].text and len(L.token_logprobs) == len(L.tokens)
          and all(len(t) <= 2 for t in L.top_logprobs), f"completions legacy logprobs: {L}")
    if L is not None and L.text_offset:
        check(L.text_offset[0] == 0 and all(L.text_offset[i + 1] == L.text_offset[i] + len(L.tokens[i].encode())
                                            for i in range(len(L.tokens) - 1)), "text_offset")
    for bad, what in [(dict(top_logprobs=2), "top_logprobs without logprobs"),
                      (dict(logprobs=True, top_logprobs=21), "top_logprobs above 20"),
                      (dict(logprobs="yes"), "logprobs type"),
                      (dict(logprobs=True, extra_body={"speculative": True}), "logprobs with speculative")]:
        try:
            client.chat.completions.create(model="tiny", messages=lk["messages"], max_tokens=2, **bad)
            check(False, f"{what}: accepted")
        except openai.BadRequestError as e:
            check(e.status_code == 400, what)

    # tool_choice: named forces the call header with that name (the tiny model writes the rest); required forces
    # a call; none leaves tools out. Streamed tool-call deltas concatenate to the message's arguments.
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    dsml = "\uff5cDSML\uff5c"
    header = f"\n\n<{dsml} calls>\n<{dsml} invoke name=\"get_weather\">\n"
    # max_tokens: the forced header is ~60 tokens in the 512-entry test tokenizer.
    tk2 = dict(model="tiny", messages=[{"role": "user", "content": "Weather in Paris?"}], max_tokens=100,
               temperature=0, tools=tools)
    named = client.chat.completions.create(tool_choice={"type": "function", "function": {"name": "get_weather"}}, **tk2)
    m = named.choices[0].message
    # The forced header leaves no plain content: a call, or (truncated inside the call) nothing, or unparsed text
    # starting with the header.
    check(bool(m.tool_calls) or not m.content or m.content.startswith(header),
          f"tool_choice named: the answer is the call ({m})")
    check(named.usage.completion_tokens >= 1, "named: forced tokens count as completion tokens")
    auto = client.chat.completions.create(**tk2)
    check(not (auto.choices[0].message.content or "").startswith(header) or auto.choices[0].message.tool_calls,
          "auto: no forced header")
    req = client.chat.completions.create(tool_choice="required", **tk2)
    rm = req.choices[0].message
    check(bool(rm.tool_calls) or not rm.content or rm.content.startswith(f"\n\n<{dsml} calls>\n<{dsml} invoke name=\""),
          f"tool_choice required: a call is forced ({rm})")
    none = client.chat.completions.create(tool_choice="none", **tk2)
    check(none.usage.prompt_tokens < auto.usage.prompt_tokens, "tool_choice none: tools left out of the prompt")
    deltas, names = {}, {}
    for chunk in client.chat.completions.create(stream=True, tool_choice={"type": "function",
                                                                          "function": {"name": "get_weather"}}, **tk2):
        for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if tc.function and tc.function.name:
                check(tc.index not in names, "one header per streamed call")
                names[tc.index] = tc.function.name
            deltas[tc.index] = deltas.get(tc.index, "") + ((tc.function.arguments or "") if tc.function else "")
    check(names.get(0) == "get_weather", f"streamed: the forced call's header comes at once ({names})")
    if m.tool_calls:
        check(names == {i: c.function.name for i, c in enumerate(m.tool_calls)}, f"streamed call names {names}")
        check(deltas == {i: c.function.arguments for i, c in enumerate(m.tool_calls)},
              f"streamed argument deltas add up: {deltas}")
    for bad, what in [(dict(tool_choice={"type": "function", "function": {"name": "nope"}}), "named tool not in tools"),
                      (dict(tool_choice="sometimes"), "unknown tool_choice")]:
        try:
            client.chat.completions.create(**tk2, **bad)
            check(False, f"{what}: accepted")
        except openai.BadRequestError as e:
            check(e.status_code == 400, what)
    try:
        client.chat.completions.create(model="tiny", messages=tk2["messages"], max_tokens=2, tool_choice="required")
        check(False, "required without tools accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400, "required without tools")

    # /v1/completions, plain and streaming.
    c = client.completions.create(model="tiny", prompt="import os", max_tokens=6, temperature=0)
    check(isinstance(c.choices[0].text, str) and c.usage.completion_tokens <= 6, "completions")
    cs = "".join(ch.choices[0].text for ch in client.completions.create(model="tiny", prompt="import os",
                                                                     max_tokens=6, temperature=0, stream=True))
    check(cs == c.choices[0].text, "streamed completion == completion")

    # Bad requests: 4xx JSON errors, and the server keeps serving.
    for bad, what in [({"messages": "nope"}, "messages not an array"),
                      ({"messages": [{"role": "wizard", "content": "x"}]}, "unknown role"),
                      ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature type"),
                      ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10 ** 9}, "max_tokens range"),
                      ({"messages": [{"role": "user", "content": "x"}], "n": 3}, "n > 1")]:
        try:
            client.chat.completions.create(model="tiny", **bad)
            check(False, f"{what}: accepted")
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            check(e.status_code == 400 and isinstance(body.get("message"), str) and body.get("type") == "invalid_request_error", what)
    try:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x " * 5000}], max_tokens=4)
        check(False, "prompt too long accepted")
    except openai.BadRequestError as e:
        check(e.code == "context_length_exceeded", f"prompt too long code: {e.code}")

    # curl: invalid JSON, unknown route, SSE framing, a client that hangs up mid-stream.
    r = curl("-w", "\n%{http_code}", "-H", "Content-Type: application/json", "-d", "{bad", base + "/v1/chat/completions")
    body, code = r.stdout.rsplit("\n", 1)
    check(code == "400" and json.loads(body)["error"]["type"] == "invalid_request_error", "curl invalid JSON -> 400")
    r = curl("-w", "\n%{http_code}", base + "/v1/nothing")
    check(r.stdout.rsplit("\n", 1)[1] == "404", "curl unknown route -> 404")
    r = curl("-N", "-d", json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stream": True}),
             base + "/v1/chat/completions")
    events = [line for line in r.stdout.split("\n") if line and not line.startswith(":")]  # ": keep-alive" comments
    check(all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]", "curl SSE framing")
    hang = subprocess.Popen(["curl", "-sN", "--max-time", "0.3", "-d",
                             json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 400,
                                         "stream": True}), base + "/v1/chat/completions"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hang.wait(timeout=30)
    code, body = get(base + "/health")
    check(code == 200, "server alive after a client hung up")
    after = client.chat.completions.create(**kw)
    check(after.choices[0].message.content == a.choices[0].message.content, "serves correctly after a hang-up")

    # A non-streamed request whose client hangs up is cancelled within a bounded time (the server polls the
    # connection while it waits), counted as finish "cancelled_client_gone", and its slot is freed. Its prompt's
    # prefill (~1000-1500 tokens, longer than the 0.3 s before the hang-up on either test model) keeps it running
    # whatever the model would generate; 2000 greedy tokens follow. Without the cancel it would run for many
    # seconds and the counter would stay 0.
    gone_key = 'dsv41_engine_requests_total{finish="cancelled_client_gone"}'
    before, _ = metric_samples()
    body = json.dumps({"messages": [{"role": "user", "content": " ".join(f"w{i}" for i in range(400))}],
                       "max_tokens": 2000, "temperature": 0}).encode()
    hs = socket.create_connection(("127.0.0.1", port), timeout=10)
    hs.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(0.3)
    hs.close()
    t_close, gone_at, ms = time.time(), None, before
    while time.time() < t_close + 5:
        ms, _ = metric_samples()
        if ms.get(gone_key, 0) > before.get(gone_key, 0):
            gone_at = time.time()
            break
        time.sleep(0.05)
    check(gone_at is not None, "a non-streamed request whose client hung up is cancelled within 5 s "
                               f"(finish cancelled_client_gone: {ms.get(gone_key)})")
    if gone_at is not None:
        print(f"non-streamed hang-up: cancelled {gone_at - t_close:.2f} s after the close")
        free_by = time.time() + 3
        while ms.get("dsv41_running_requests", 1) > 0 and time.time() < free_by:
            time.sleep(0.05)
            ms, _ = metric_samples()
        check(ms.get("dsv41_running_requests") == 0, "its slot is freed")
    ms, parsed = metric_samples()
    check(parsed, "/metrics parses as Prometheus text, every sample typed")
    after2 = client.chat.completions.create(**kw)
    check(after2.choices[0].message.content == a.choices[0].message.content,
          "serves correctly after a non-streamed hang-up")
finally:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
    shutil.rmtree(xdg, ignore_errors=True)
log = server.stdout.read() if server.stdout else ""
gone_lines = [line for line in log.splitlines() if "cancelled: the client closed the connection" in line]
check(len(gone_lines) == 1, f"the non-streamed hang-up is logged in one line: {gone_lines}")


# --health-port: /health and /metrics on a listener with 2 workers of its own. A server with 2 main workers
# (--threads 2), both held by clients that sent half a request (headers never finished: the main port waits for
# them for --idle-timeout, 30 s): /health on the main port waits in the queue for a worker, /health on the health
# port answers at once. Then the held clients leave and the main port answers the waiting probe.
def timed_get(url, timeout):
    """(status or None when no answer within timeout, body bytes, seconds taken)."""
    t0 = time.time()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read(), time.time() - t0
    except urllib.error.HTTPError as e:
        return e.code, e.read(), time.time() - t0
    except OSError:
        return None, b"", time.time() - t0


def refuses(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return False
    except OSError:
        return True


hp = free_port()
hbase = f"http://127.0.0.1:{hp}"
hlog = tempfile.TemporaryFile(mode="w+")
hsrv, mbase = start_server([BIN, "serve", "--model", MODEL, "--tokenizer", TOKENIZER, "--model-name", "tiny",
                            "--no-cache", "--threads", "2", "--health-port", str(hp)], output=hlog, timeout=60)
mport = int(mbase.rsplit(":", 1)[1])
held, waiting = [], None
try:
    code, body, dt = timed_get(hbase + "/health", 5)
    check(code == 200 and json.loads(body or b"null") == {"status": "ok"}, f"health port /health: {code} {body}")
    for _ in range(2):
        hs = socket.create_connection(("127.0.0.1", mport), timeout=5)
        hs.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # the headers never end
        held.append(hs)
    time.sleep(0.5)  # both workers have taken them (the queue is first come, first served anyway)
    waiting = socket.create_connection(("127.0.0.1", mport), timeout=5)
    waiting.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    waiting.settimeout(1.0)
    try:
        first = waiting.recv(4096)
    except socket.timeout:
        first = None
    check(first is None, f"main port: /health unanswered for 1 s while both workers are held ({first!r})")

    def health_metrics():
        try:
            return metric_samples(hbase, timeout=1)
        except OSError:  # no answer within 1 s
            return {}, False
    before, parsed = health_metrics()
    check(parsed and "dsv41_requests_total{path=\"/health\",code=\"200\"}" in before,
          "health port: /metrics parses as Prometheus text, every sample typed, while the main port is full")
    code, body, dt = timed_get(hbase + "/health", 1)
    check(code == 200 and json.loads(body or b"null") == {"status": "ok"} and dt < 1,
          f"health port: /health 200 within 1 s while the main port is full ({code}, {dt:.2f} s)")
    # Counted once, under its path (no main-port request ends meanwhile: its workers are held).
    key = 'dsv41_requests_total{path="/health",code="200"}'
    by, after = time.time() + 2, before
    while time.time() < by and after.get(key, 0) < before.get(key, 0) + 1:
        after, _ = health_metrics()
    check(after.get(key, 0) == before.get(key, 0) + 1,
          f"a health-port /health counts once in {key}: {before.get(key)} -> {after.get(key)}")
    code, body, dt = timed_get(hbase + "/v1/models", 1)
    check(code == 404 and "error" in json.loads(body or b"{}"), f"health port: /v1/models 404 ({code} {body})")
    r = urllib.request.Request(hbase + "/v1/chat/completions", method="POST", data=b'{"messages": []}',
                               headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=2) as resp:
            pcode = resp.status
    except urllib.error.HTTPError as e:
        pcode = e.code
    except OSError as e:
        pcode = str(e)
    check(pcode == 404, f"health port: POST /v1/chat/completions 404 ({pcode})")

    for hs in held:
        hs.close()
    held = []
    waiting.settimeout(10)
    answer = b""
    try:
        while chunk := waiting.recv(4096):
            answer += chunk
    except OSError:
        pass
    check(answer.startswith(b"HTTP/1.1 200"), f"main port: the waiting /health is answered once the workers are free "
                                              f"({answer[:40]!r})")
    code, body, dt = timed_get(mbase + "/health", 5)
    check(code == 200, f"main port answers again: {code} in {dt:.2f} s")
    # SIGTERM (the drain path) stops both listeners; exit 0.
    hsrv.terminate()
    try:
        rc = hsrv.wait(timeout=20)
    except subprocess.TimeoutExpired:
        rc = "timeout"
    check(rc == 0, f"SIGTERM: the server with a health port exits 0 ({rc})")
    check(refuses(hp) and refuses(mport), "after SIGTERM neither port accepts connections")
finally:
    for hs in held + ([waiting] if waiting else []):
        hs.close()
    if hsrv.poll() is None:
        hsrv.kill()
        hsrv.wait(timeout=10)
hlog.seek(0)
hlines = hlog.read()
check(f"dsv41 serve: health port listening on http://127.0.0.1:{hp}" in hlines, "the health port's startup line")

# A health port that cannot be bound: an error line and a non-zero exit, not a server without probes.
with socket.socket() as taken:
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    tp = taken.getsockname()[1]
    try:
        bad = subprocess.run([BIN, "serve", "--model", MODEL, "--tokenizer", TOKENIZER, "--no-cache",
                              "--port", str(free_port()), "--health-port", str(tp)],
                             capture_output=True, text=True, timeout=60)
        check(bad.returncode != 0 and f"cannot listen on 127.0.0.1:{tp} (--health-port" in bad.stderr,
              f"a taken health port: exit {bad.returncode}, {bad.stderr.strip()[-200:]!r}")
    except subprocess.TimeoutExpired:
        check(False, "a taken health port: the server did not exit within 60 s")

exit_with_summary()
