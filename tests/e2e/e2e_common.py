"""Shared by the end-to-end scripts: counted checks, a free loopback port."""
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
