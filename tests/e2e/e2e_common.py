"""Shared by the end-to-end scripts: counted checks, a free loopback port, a server started and stopped, the
Prometheus text of /metrics parsed."""
import re
import socket
import sys

_counts = {"passed": 0, "failed": 0}


def check(cond, what):
    if cond:
        _counts["passed"] += 1
    else:
        _counts["failed"] += 1
        print("FAIL:", what, flush=True)


def exit_with_summary():
    """Prints the closing 'N passed, N failed' line and exits non-zero on any failure."""
    print(f"{_counts['passed']} passed, {_counts['failed']} failed")
    sys.exit(1 if _counts["failed"] else 0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cmd, env=None, timeout=60, output=None):
    """Starts `cmd` (a `dsv41 serve ...` argument list without --port) on a free loopback port and waits for
    /health to answer 200. Returns (process, base URL); kills it and exits the script if it never does."""
    import subprocess
    import time
    import urllib.error
    import urllib.request
    port = free_port()
    out = subprocess.DEVNULL if output is None else output
    p = subprocess.Popen([*cmd, "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return p, base
        except (OSError, urllib.error.HTTPError):
            pass
        time.sleep(0.2)
    p.kill()
    raise SystemExit("server did not become ready")


def stop_server(p, timeout=20):
    """SIGTERM, then SIGKILL if it has not exited within timeout seconds."""
    import subprocess
    p.terminate()
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait(timeout=timeout)


_METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
                          r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*")*)?\})? (-?[0-9.eE+-]+|\+Inf|NaN)$')


def parse_metrics(text):
    """Parses /metrics strictly as Prometheus text (0.0.4): ({(name, frozenset(labels)): value}, whether every
    line parses and every sample's metric is typed). Bad lines are printed."""
    out, typed, ok = {}, set(), True
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            ok &= len(parts) == 4 and parts[3] in ("counter", "gauge", "histogram", "summary")
            typed.add(parts[2])
            continue
        m = _METRIC_LINE.match(line)
        if not m:
            ok = False
            print("bad metrics line:", line)
            continue
        name, labels = m.group(1), frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"', m.group(3) or ""))
        ok &= name in typed or re.sub(r"_(bucket|sum|count)$", "", name) in typed
        out[(name, labels)] = float(m.group(5))
    return out, ok


def mval(ms, name, **labels):
    """The sample of parse_metrics' dict with exactly these labels (0 when absent)."""
    return ms.get((name, frozenset(labels.items())), 0.0)
