"""End-to-end test of `dsv41 serve --cache-dir`: a second turn that repeats the first continues turn 1's live state
(the active tier: every token turn 1 ran, its prompt and all but its last generated token, is reported in
usage.prompt_tokens_details.cached_tokens); after the server restarted the active tier is empty and the same turn
reuses turn 1's whole stored blocks (the disk tier; the windows, held in memory, come back by window replay). Requests naming a "session_id" get it echoed; a bad one
is a 400. Without --cache-dir the server keeps sessions in $XDG_CACHE_HOME/dsv41/sessions; --no-cache keeps none.

Usage: test_server_sessions.py DSV41_BINARY MODEL_DIR CACHE_DIR
Starts the server on a free loopback port, twice; every request has a timeout and the run stops itself.
"""
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, __import__('os').path.dirname(__file__))
from e2e_common import check, exit_with_summary, start_server, stop_server  # noqa: E402

BIN, MODEL, CACHE = sys.argv[1:4]




XDG = CACHE + "-xdg"  # XDG_CACHE_HOME of every server started here


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def start(*session_args):
    return start_server([BIN, "serve", "--model", MODEL, *(session_args or ("--cache-dir", CACHE))],
                        env=dict(os.environ, XDG_CACHE_HOME=XDG), output=subprocess.PIPE)


def stop(p):
    stop_server(p)


shutil.rmtree(CACHE, ignore_errors=True)
history = "\n".join(f"def function_{i}(x):\n    return x * {i} + {i * i}\n" for i in range(24))
turn1 = [{"role": "user", "content": "Read this module and explain it:\n" + history}]
p, base = start()
try:
    code, r1 = post(base, {"messages": turn1, "max_tokens": 8, "temperature": 0})
    check(code == 200, "turn 1 answered")
    u1 = r1["usage"]
    check(u1["prompt_tokens"] > 128, f"turn 1 prompt spans a block: {u1['prompt_tokens']}")
    check(u1["prompt_tokens_details"]["cached_tokens"] == 0, "turn 1 has nothing cached")
    turn2 = turn1 + [{"role": "assistant", "content": r1["choices"][0]["message"]["content"]},
                     {"role": "user", "content": "And function_3?"}]
    code, r2 = post(base, {"messages": turn2, "max_tokens": 8, "temperature": 0})
    check(code == 200, "turn 2 answered")
    c2 = r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    held1 = u1["prompt_tokens"] + u1["completion_tokens"] - 1  # what turn 1's state ran (generate's contract)
    check(c2 == held1 and c2 < r2["usage"]["prompt_tokens"],
          f"turn 2 continues turn 1's state: {c2} cached of {r2['usage']['prompt_tokens']} (turn 1 ran {held1})")
    check("session_id" not in r2, "no session_id asked, none echoed")
    # The same two turns under a session id: the id is echoed, turn 2 reuses turn 1's blocks.
    sid = "agent-7/task \u00e9"
    code, s1 = post(base, {"messages": turn1, "max_tokens": 8, "temperature": 0, "session_id": sid})
    check(code == 200 and s1.get("session_id") == sid, f"turn 1 with a session id echoes it: {s1.get('session_id')!r}")
    code, s2 = post(base, {"messages": turn2, "max_tokens": 8, "temperature": 0, "session_id": sid})
    cs2 = s2["usage"]["prompt_tokens_details"]["cached_tokens"] if code == 200 else -1
    check(code == 200 and s2.get("session_id") == sid, "turn 2 with the session id echoes it")
    check(cs2 == c2, f"turn 2 with the session id continues its turn 1's state: {cs2} cached (before: {c2})")
    for bad, why in [(7, "not a string"), ("x" * 257, "over 256 bytes"), ("a\nb", "a control character"),
                     ("", "empty")]:
        code, e = post(base, {"messages": turn1, "max_tokens": 1, "session_id": bad})
        check(code == 400 and "session_id" in e.get("error", {}).get("message", ""),
              f"a session_id {why} is a 400 naming session_id: {code} {e}")
    code, _ = post(base, {"messages": turn1, "max_tokens": 1, "session_id": "x" * 256})
    check(code == 200, "a session_id of 256 bytes is fine")
finally:
    stop(p)
p, base = start()  # a new process: the windows are gone, the disk tier is not
try:
    code, r3 = post(base, {"messages": turn2, "max_tokens": 8, "temperature": 0})
    check(code == 200, "turn 2 after a restart answered")
    c3 = r3["usage"]["prompt_tokens_details"]["cached_tokens"]
    p3 = r3["usage"]["prompt_tokens"]
    check(c3 >= 128 and c3 == 128 * ((p3 - 1) // 128),
          f"after a restart the whole blocks turn 2 stored come back from disk: {c3} of {p3} (the live state: {c2})")
    print(f"turn 1: {u1['prompt_tokens']} prompt tokens, 0 cached; turn 2: {r2['usage']['prompt_tokens']} prompt "
          f"tokens, {c2} cached; after a restart: {c3} cached", flush=True)
finally:
    stop(p)
# No --cache-dir: the default directory under XDG_CACHE_HOME, created by the server.
shutil.rmtree(XDG, ignore_errors=True)
default_dir = os.path.join(XDG, "dsv41", "sessions")
p, base = start("--session-block", "128")
try:
    code, d1 = post(base, {"messages": turn1, "max_tokens": 8, "temperature": 0})
    check(code == 200 and d1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "default dir: turn 1 cold")
    stored = [f for f in os.listdir(default_dir) if f.endswith(".dsv41kv")] if os.path.isdir(default_dir) else []
    check(len(stored) >= 3, f"default dir: {default_dir} created and holds turn 1's blocks ({len(stored)} files)")
    code, d2 = post(base, {"messages": turn2, "max_tokens": 8, "temperature": 0})
    check(code == 200 and d2["usage"]["prompt_tokens_details"]["cached_tokens"] == c2,
          "default dir: turn 2 reuses the same blocks")
finally:
    stop(p)
p, base = start("--no-cache")  # the default directory still holds the blocks; --no-cache does not look
try:
    code, n2 = post(base, {"messages": turn2, "max_tokens": 8, "temperature": 0})
    check(code == 200 and n2["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, "--no-cache: nothing cached")
finally:
    stop(p)
shutil.rmtree(CACHE, ignore_errors=True)
shutil.rmtree(XDG, ignore_errors=True)
exit_with_summary()
