#!/usr/bin/env python3
"""The golden check of shared/golden/README.md (steps 1-6) for tools/train/model.py in exact mode.

Loads a golden model directory (config.json, model.safetensors, engram_token_map.safetensors),
runs the prefill chunk and every decode step with each layer unit fed its golden inputs and the
golden top-k lists, records outputs, own top-k lists, head logits on golden inputs, DSpark drafts
from golden taps, Engram row ids, and a free run, then prints the statistics the way the C++
check (include/dsv41/model/golden.hpp) does. Exit status 0 when the contract holds, 1 otherwise.

Usage: python3 tools/train/check_golden.py [tests/data/golden/tiny-ced]
"""

import argparse
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Hooks, Numerics, Transformer  # noqa: E402


class GoldenHooks(Hooks):
    def __init__(self, g, L, P, T):
        self.g, self.P, self.T = g, P, T
        self.substitute = True
        self.out, self.preout, self.lists, self.engram = {}, {}, {}, None
        B = g["input_ids"].shape[0]
        self.B = B

    def _rows(self, store, key, shape_tail, p0, val):
        t = store.setdefault(key, torch.zeros(self.B, self.T, *shape_tail))
        t[:, p0:p0 + val.shape[1]] = val

    def unit_input(self, l, p0, H, pre):
        if not self.substitute:
            return H, pre
        S = H.shape[1]
        return self.g[f"h.{l}"][:, p0:p0 + S].clone(), self.g[f"pre.{l}"][:, p0:p0 + S].clone()

    def unit_output(self, l, p0, H, pre):
        if self.substitute:
            self._rows(self.out, l, H.shape[2:], p0, H)
            self._rows(self.preout, l, pre.shape[2:], p0, pre)

    def topk(self, l, p0, lists):
        if not self.substitute:
            return lists
        S, K = lists.shape[1], lists.shape[2]
        t = self.lists.setdefault(l, torch.full((self.B, self.T, K), -1, dtype=torch.long))
        t[:, p0:p0 + S] = lists
        rows = []
        for s in range(S):
            p = p0 + s
            src = self.g[f"prefill_topk.{l}"][:, p] if p < self.P else self.g[f"decode_topk.{l}"][:, p - self.P]
            gk = src.shape[-1]
            r = torch.full((self.B, K), -1, dtype=torch.long)
            r[:, :min(gk, K)] = src[:, :K].long()
            rows.append(r)
        return torch.stack(rows, 1)

    def engram_ids(self, p0, ids):
        if self.engram is None:
            self.engram = torch.full((self.B, self.T, *ids.shape[2:]), -1, dtype=torch.long)
        self.engram[:, p0:p0 + ids.shape[1]] = ids

    def taps(self, p0, taps):
        if not self.substitute:
            return taps
        return self.g["taps"][:, p0:p0 + taps.shape[1]].clone()


def rel_stat(name, x, g):
    """Per-row rel = ‖x−g‖/‖g‖ over the last dim; median as sorted[n/2] like the C++ check."""
    x, g = x.double().reshape(-1, x.shape[-1]), g.double().reshape(-1, g.shape[-1])
    num = (x - g).norm(dim=-1)
    den = g.norm(dim=-1)
    rel = torch.where(den > 0, num / den.clamp_min(1e-300), num)
    srt = rel.sort().values
    return {"name": name, "rows": rel.numel(), "median": srt[rel.numel() // 2].item(), "max": srt[-1].item(),
            "frac": (rel > 1e-2).double().mean().item(), "pass": True, "nan": bool(torch.isnan(x).any())}


def line(s):
    return (f"  {s['name']:<22} rows {s['rows']:6d}  median {s['median']:.2e}  max {s['max']:.2e}  "
            f">1e-2 {100 * s['frac']:6.2f}%  {'ok' if s['pass'] else 'FAIL'}")


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("dir", nargs="?", default=os.path.join(here, "..", "..", "tests", "data", "golden", "tiny-ced"))
    ap.add_argument("--golden", default=None, help="golden.safetensors (default: DIR/golden.safetensors)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = Transformer.from_dir(args.dir).eval()
    c = model.c
    g = {k: (v.float() if v.dtype in (torch.bfloat16, torch.float32) else v)
         for k, v in load_file(args.golden or os.path.join(args.dir, "golden.safetensors")).items()}
    ids = g["input_ids"].long()
    B, T = ids.shape
    P = int(g["prefill_length"][0])
    L, V, blk = c.num_hidden_layers, c.vocab_size, c.dspark_block_size
    nm = Numerics.exact()
    hooks = GoldenHooks(g, L, P, T)
    nd = T - P if c.n_dspark else 0
    dl = torch.zeros(B, nd, blk, V)
    dc = torch.zeros(B, nd, blk)
    free = torch.zeros(B, T, V)
    with torch.no_grad():
        # 1, 2, 4, 5: units on golden inputs with golden lists, own top-k, DSpark, Engram ids
        st = model.new_state(B)
        model(ids[:, :P], nm, st, hooks, logits="none")
        for t in range(P, T):
            model(ids[:, t:t + 1], nm, st, hooks, logits="none")
            if nd:
                y = g["dspark_draft_ids"][:, t - P, 0].long()
                _, lg, cf = model.draft(nm, st, y)
                dl[:, t - P], dc[:, t - P] = lg, cf
        # 6: free run, no substitution
        hooks.substitute = False
        st = model.new_state(B)
        free[:, :P] = model(ids[:, :P], nm, st, hooks, logits="all")["logits"]
        for t in range(P, T):
            free[:, t] = model(ids[:, t:t + 1], nm, st, hooks, logits="all")["logits"][:, 0]
        # 3: head on golden h.L, pre.L
        head = model.head_logits(nm, g[f"h.{L}"], g[f"pre.{L}"])

    units, frac_sum = [], 0.0
    for l in range(L):
        for kind, mine, gold in (("out", hooks.out[l], g[f"h.{l + 1}"]), ("preout", hooks.preout[l], g[f"pre.{l + 1}"])):
            s = rel_stat(f"{kind}.{l}", mine.flatten(2) if kind == "out" else mine, gold.flatten(2) if kind == "out" else gold)
            s["pass"] = s["median"] <= 1e-3 and s["frac"] <= 0.05
            frac_sum += s["frac"]
            units.append(s)
    mean_frac = frac_sum / max(len(units), 1)

    topk = []
    for l in c.index_source_layer_ids:
        rows = fail = 0
        mine_all = hooks.lists.get(l)
        for phase in ("prefill", "decode"):
            ln, sn = f"{phase}_topk.{l}", f"{phase}_scores.{l}"
            if ln not in g:
                continue
            gl, gs = g[ln].long(), g[sn]
            off = 0 if phase == "prefill" else P
            for b in range(B):
                for r in range(gl.shape[1]):
                    rows += 1
                    glist, sc = gl[b, r], gs[b, r]
                    gsel = glist[glist >= 0]
                    sk = sc[gsel].min().item() if gsel.numel() else float("inf")
                    mine = mine_all[b, off + r] if mine_all is not None else torch.full((c.index_topk,), -1)
                    ok, mcount = True, 0
                    for j in mine.tolist():
                        if j < 0:
                            continue
                        mcount += 1
                        if j >= sc.numel() or not (sc[j].item() >= sk - abs(sk) * 2.0**-7):
                            ok = False
                    if not ok or mcount != gsel.numel():
                        fail += 1
        f = fail / rows if rows else 0.0
        topk.append({"name": f"topk.{l}", "rows": rows, "frac": f, "pass": f <= 0.05})

    head_s = rel_stat("head_logits", head, g["logits"])
    head_s["pass"] = head_s["max"] <= 1e-3
    ds = dsc = None
    if nd:
        ds = rel_stat("dspark_logits", dl, g["dspark_logits"])
        ds["pass"] = ds["median"] <= 1e-3 and ds["frac"] <= 0.15
        dsc = rel_stat("dspark_confidence", dc.unsqueeze(-1), g["dspark_confidence"].unsqueeze(-1))
    fr = rel_stat("free_run_logits", free, g["logits"])
    eng_total = eng_bad = 0
    if "engram_hash_ids" in g:
        ge = g["engram_hash_ids"].long()
        eng_total = ge.numel()
        eng_bad = eng_total if hooks.engram is None else int((hooks.engram.reshape(ge.shape) != ge).sum())
    nan = any(s["nan"] for s in units + [head_s, fr] + ([ds, dsc] if ds else []))

    ok = (not nan and eng_bad == 0 and head_s["pass"] and (ds is None or ds["pass"]) and mean_frac <= 0.02
          and all(u["pass"] for u in units) and all(t["pass"] for t in topk))
    print(f"golden check of {os.path.normpath(args.dir)} (tools/train/model.py, exact mode)")
    print("units (outputs on golden inputs):")
    for s in units:
        print(line(s))
    print(f"  mean share of rows above 1e-2 over units: {100 * mean_frac:.3f}%")
    print("own top-k (share of rows failing):")
    for t in topk:
        print(f"  {t['name']:<22} rows {t['rows']:6d}  failing {100 * t['frac']:6.2f}%  {'ok' if t['pass'] else 'FAIL'}")
    print("head, DSpark, free run:")
    print(line(head_s))
    if ds:
        print(line(ds))
        print(line(dsc))
    print(line(fr))
    print(f"engram ids: {eng_bad} of {eng_total} differ")
    print(f"NaN: {'yes' if nan else 'no'}")
    print(f"result: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
