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
