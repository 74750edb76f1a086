#!/usr/bin/env python3
"""Median gpu__time_duration per kernel and grid from `ncu --csv --metrics gpu__time_duration.sum` output, in launch
order of first appearance: python3 tools/gpu/ncu_summary.py FILE.csv"""
import csv, statistics, sys

rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
if not rows:
    sys.exit("no csv rows")
head = rows[0]
ki, gi, bi = head.index("Kernel Name"), head.index("Grid Size"), head.index("Block Size")
ui, vi = head.index("Metric Unit"), head.index("Metric Value")
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
times = {}
for r in rows[1:]:
    key = (r[ki].split("(")[0], r[gi], r[bi])
    times.setdefault(key, []).append(float(r[vi].replace(",", "")) * scale.get(r[ui], 1.0))
for (k, g, b), v in times.items():
    print(f"{k:40s} grid {g:14s} block {b:12s} n {len(v):4d} median {statistics.median(v):8.2f} us")
