#!/usr/bin/env python3
"""Trains a small DeepSeek-V4.1-Flash-architecture model (tools/train/model.py) on the corpus of
data.py, then exports it in the released format (export.py).

Phases (backbone steps split by --dense-frac / --qat-frac, then --dspark-steps):
  1. dense  : teacher-forced LM loss; attention sees the window plus every visible compressed
              entry; the indexers learn the V3.2 auxiliary: KL(attention over compressed entries,
              summed over heads || softmax of index scores), inputs detached, so the auxiliary
              trains only the indexers.
  2. sparse : attention sees the window plus the indexer's top-k (with hierarchical candidates at
              Reindex layers), KL on the selected entries.
  3. qat    : as sparse with straight-through fake quantization of every weight to its export
              format (FP8 blocks, FP4 experts, BF16, FP8 Engram rows) and of the activations the
              reference quantizes (FP8 before FP8/FP4 GEMMs, FP8 window KV, FP4 keys and KV).
  4. dspark : backbone frozen; the three DSpark stages, Markov and confidence heads are trained
              on teacher-forced blocks at every (sub-sampled) position: 0.5·CE(data) + 0.5·KL to
              the frozen model's next-token distribution, plus BCE of the confidence logit on
              "draft argmax == main argmax". QAT numerics.
MoE balance: the noaux_tc gate bias moves by --bias-rate·sign(mean load − load) after every step,
plus a small sequence-level balance loss (--balance-weight).

Resumable: OUT/ckpt.pt is written every --save-every steps and at phase ends; rerunning the same
command continues. A --time-budget (seconds, default 450) caps each phase's share of wall time
(backbone ≤ 68%, QAT ≤ 80%, DSpark ≤ 95% cumulative) so the whole run fits 8 minutes.

Logs: stdout and OUT/log.jsonl (train loss every --log-every steps, held-out loss every
--eval-every steps and at phase ends). At the end: OUT/export/ (model directory) and a check that
the export loads and runs in exact mode (prefill, decode, DSpark draft).
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from data import DEFAULT_OUT, TokenStream  # noqa: E402
from export import export_dir  # noqa: E402
from model import Config, Numerics, Transformer, small_config  # noqa: E402

PHASES = ("dense", "sparse", "qat", "dspark")
BUDGET_END = {"dense": 0.68, "sparse": 0.68, "qat": 0.80, "dspark": 0.95}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_OUT, help="directory of data.py / train_tokenizer.py outputs")
    ap.add_argument("--out", default=None, help="run directory (default DATA/run-SIZE)")
    ap.add_argument("--size", default="small", choices=["small", "toy"])
    ap.add_argument("--device", default=None)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=1400, help="backbone steps (dense + sparse + qat)")
    ap.add_argument("--dense-frac", type=float, default=0.1)
    ap.add_argument("--qat-frac", type=float, default=0.15)
    ap.add_argument("--dspark-steps", type=int, default=300)
    ap.add_argument("--dspark-batch", type=int, default=8)
    ap.add_argument("--dspark-seq", type=int, default=512)
    ap.add_argument("--dspark-stride", type=int, default=2, help="anchor positions every N tokens")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dspark-lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--kl-weight", type=float, default=1.0)
    ap.add_argument("--balance-weight", type=float, default=1e-4)
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--q-chunk", type=int, default=256)
    ap.add_argument("--gemm", default="bf16", choices=["bf16", "fp32"], help="GEMM operand dtype (train/qat)")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--eval-batches", type=int, default=8)
    ap.add_argument("--save-every", type=int, default=200)
    ap.add_argument("--time-budget", type=float, default=400.0,
                    help="seconds of training wall time (steps, evals, saves) over all phases")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fresh", action="store_true", help="ignore an existing OUT/ckpt.pt")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--check-seq", type=int, default=64, help="tokens of the exact-mode export check")
    ap.add_argument("--threads", type=int, default=0)
    return ap.parse_args(argv)


class Run:
    def __init__(self, a):
        self.a = a
        self.dev = torch.device(a.device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if a.threads:
            torch.set_num_threads(a.threads)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        self.out = a.out or os.path.join(a.data, f"run-{a.size}")
        os.makedirs(self.out, exist_ok=True)
        self.ck_path = os.path.join(self.out, "ckpt.pt")
        self.log_f = open(os.path.join(self.out, "log.jsonl"), "a")
        self.train = TokenStream(os.path.join(a.data, "train.bin"))
        self.val = TokenStream(os.path.join(a.data, "val.bin"))
        gd = torch.bfloat16 if (a.gemm == "bf16" and self.dev.type == "cuda") else torch.float32
        self.nm_train, self.nm_qat = Numerics.train(gd), Numerics.qat(gd)
        n_dense = int(round(a.steps * a.dense_frac))
        n_qat = int(round(a.steps * a.qat_frac))
        self.plan = {"dense": n_dense, "sparse": a.steps - n_dense - n_qat, "qat": n_qat, "dspark": a.dspark_steps}
        self.state = {"phase": 0, "step": 0, "phase_step": 0, "dstep": 0, "elapsed": 0.0, "replanned": [],
                      "sec_per_step": None}
        self._mark = None
        if os.path.exists(self.ck_path) and not a.fresh:
            self._resume()
        else:
            self._fresh()

    # ---------------------------------------------------------------- setup
    def _fresh(self):
        from safetensors.torch import load_file
        with open(os.path.join(self.a.data, "tokenizer_meta.json")) as f:
            meta = json.load(f)
        self.token_map = load_file(os.path.join(self.a.data, "engram_token_map.safetensors"))["token_map"].numpy()
        self.cfg = small_config(meta["vocab_size"], meta["engram_compressed_vocab_size"], meta["special"], self.a.size)
        self.cfg.max_position_embeddings = max(self.cfg.max_position_embeddings, self.a.seq)
        self.model = Transformer(self.cfg, self.token_map).init_weights(self.a.seed).to(self.dev)
        self._make_opts()
        self.log({"event": "start", "params": sum(p.numel() for p in self.model.parameters()),
                  "plan": self.plan, "device": str(self.dev), "config": self.cfg.to_json()["text_config"]})

    def _resume(self):
        ck = torch.load(self.ck_path, map_location="cpu", weights_only=False)
        self.cfg = Config.from_json(ck["config"])
        self.token_map = np.asarray(ck["token_map"], dtype=np.int64)
        self.model = Transformer(self.cfg, self.token_map)
        self.model.load_state_dict(ck["model"])
        self.model.to(self.dev)
        self.state = ck["state"]
        self.plan = ck["plan"]
        self._make_opts()
        if self.state["phase"] >= PHASES.index("dspark"):  # dspark, or a finished run
            self._freeze_backbone()
        self.opt.load_state_dict(ck["opt"])
        if ck.get("dopt") is not None:
            self.dopt.load_state_dict(ck["dopt"])
        self.log({"event": "resume", "state": self.state})

    def _make_opts(self):
        decay, no_decay = [], []
        for n, p in self.model.named_parameters():
            if not p.requires_grad or n.startswith("mtp."):
                continue
            big = p.dim() == 2 and not (n.endswith("embed.weight") or "_fn" in n)
            (decay if big else no_decay).append(p)
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": self.a.wd},
                                      {"params": no_decay, "weight_decay": 0.0}],
                                     lr=self.a.lr, betas=(0.9, 0.95), eps=1e-8)
        mtp = [p for n, p in self.model.named_parameters() if n.startswith("mtp.") and p.requires_grad]
        self.dopt = torch.optim.AdamW(mtp, lr=self.a.dspark_lr, betas=(0.9, 0.95), weight_decay=0.0) if mtp else None

    def _freeze_backbone(self):
        for n, p in self.model.named_parameters():
            if not n.startswith("mtp.") or n.endswith("gate.bias"):
                p.requires_grad_(False)

    # ---------------------------------------------------------------- utilities
    def log(self, rec):
        rec = {"t": round(self.state["elapsed"], 1), **rec}
        self.log_f.write(json.dumps(rec) + "\n")
        self.log_f.flush()
        print(json.dumps(rec) if rec.get("event") in ("start", "resume") else
              " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()
                       if k != "config"), flush=True)

    def save(self):
        ck = {"config": self.cfg.to_json(), "token_map": self.token_map.tolist(), "model": self.model.state_dict(),
              "opt": self.opt.state_dict(), "dopt": self.dopt.state_dict() if self.dopt else None,
              "state": self.state, "plan": self.plan, "args": vars(self.a)}
        tmp = self.ck_path + ".tmp"
        torch.save(ck, tmp)
        os.replace(tmp, self.ck_path)

    def lr_at(self, step, total, base):
        if step < self.a.warmup:
            return base * (step + 1) / self.a.warmup
        frac = min(1.0, (step - self.a.warmup) / max(1, total - self.a.warmup))
        return base * (self.a.min_lr_frac + (1 - self.a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * frac)))

    def batch(self, stream, step, B, T, seed_offset=0):
        ids = stream.batch(step, B, T, self.a.seed + seed_offset)
        h = self.model.hash(ids[:, :-1], np.zeros((B, 0), np.int64)) if self.model.hash is not None else None
        ids = torch.from_numpy(ids).to(self.dev, non_blocking=True)
        h = torch.from_numpy(h).to(self.dev, non_blocking=True) if h is not None else None
        return ids, h

    def _sync(self):
        if self.dev.type == "cuda":
            torch.cuda.synchronize()

    def maybe_replan(self, phase, k, k0, k1):
        """After a few timed steps, shrink the remaining step counts (never grow them) so the rest
        fits the time budget; the LR schedules follow the new totals."""
        st, a = self.state, self.a
        key = "backbone" if phase != "dspark" else "dspark"
        if key in st["replanned"] or a.time_budget <= 0:
            return
        if k == k0:
            self._sync()
            self._mark = time.time()
            return
        if k != k1 or self._mark is None:
            return
        self._sync()
        sps = (time.time() - self._mark) / (k1 - k0)
        st["replanned"].append(key)
        if key == "backbone":
            st["sec_per_step"] = sps
            left = BUDGET_END["qat"] * a.time_budget - st["elapsed"]
            names = [p for p in ("dense", "sparse", "qat") if PHASES.index(p) >= st["phase"]]
            rem = {p: self.plan[p] - (st["phase_step"] if p == phase else 0) for p in names}
            cost = {p: sps * (1.5 if p == "qat" else 1.0) * 1.05 for p in names}  # QAT ~1.5x, evals ~5%
        else:
            left = BUDGET_END["dspark"] * a.time_budget - st["elapsed"]
            names, rem, cost = ["dspark"], {"dspark": self.plan["dspark"] - st["dstep"]}, {"dspark": sps * 1.05}
        need = sum(rem[p] * cost[p] for p in names)
        if need > left > 0:
            f = left / need
            for p in names:
                done = self.plan[p] - rem[p]
                self.plan[p] = done + max(1, int(rem[p] * f))
        self.log({"event": "replan", "phase": phase, "sec_per_step": round(sps, 4), "needed_s": round(need, 1),
                  "left_s": round(left, 1), "plan": self.plan})

    def update_bias(self, loads):
        with torch.no_grad():
            for moe, load in loads:
                moe.gate.bias.add_(self.a.bias_rate * torch.sign(load.mean() - load))

    # ---------------------------------------------------------------- backbone
    def backbone_loss(self, ids, h, nm, mode, train=True):
        x, y = ids[:, :-1], ids[:, 1:]
        out = self.model(x, nm, index_mode="dense" if mode == "dense" else "topk", want_kl=train,
                         logits="all", hash_ids=h, q_chunk=self.a.q_chunk)
        ce = F.cross_entropy(out["logits"].flatten(0, 1), y.flatten())
        kl = torch.stack(out["kl"]).mean() if out["kl"] else ce.new_zeros(())
        bal = torch.stack(out["balance"]).mean() if out["balance"] else ce.new_zeros(())
        return ce, kl, bal, out

    @torch.no_grad()
    def evaluate(self, nm, mode):
        self.model.eval()
        tot, n = 0.0, 0
        for arr in self.val.sequential(min(self.a.batch, 8), self.a.seq, self.a.eval_batches):
            h = self.model.hash(arr[:, :-1], np.zeros((arr.shape[0], 0), np.int64)) if self.model.hash else None
            ids = torch.from_numpy(arr).to(self.dev)
            h = torch.from_numpy(h).to(self.dev) if h is not None else None
            ce, _, _, _ = self.backbone_loss(ids, h, nm, mode, train=False)
            tot, n = tot + ce.item(), n + 1
        self.model.train()
        return tot / max(n, 1)

    def run_backbone_phase(self, phase):
        a, st = self.a, self.state
        nm = self.nm_qat if phase == "qat" else self.nm_train
        n = self.plan[phase]
        total = self.plan["dense"] + self.plan["sparse"] + self.plan["qat"]
        self.model.train()
        t_last, tok_last = time.time(), 0
        while st["phase_step"] < n:
            if st["elapsed"] > BUDGET_END[phase] * a.time_budget:
                self.log({"event": "time_guard", "phase": phase, "done": st["phase_step"], "planned": n})
                break
            t0 = time.time()
            self.maybe_replan(phase, st["step"], 5, 25)
            n = self.plan[phase]
            total = self.plan["dense"] + self.plan["sparse"] + self.plan["qat"]
            lr = self.lr_at(st["step"], total, a.lr)
            for g in self.opt.param_groups:
                g["lr"] = lr
            ids, h = self.batch(self.train, st["step"], a.batch, a.seq)
            ce, kl, bal, out = self.backbone_loss(ids, h, nm, phase)
            loss = ce + a.kl_weight * kl + a.balance_weight * bal
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_([p for g in self.opt.param_groups for p in g["params"]], a.clip)
            self.opt.step()
            self.update_bias(out["moe_load"])
            st["step"] += 1
            st["phase_step"] += 1
            tok_last += ids.numel() - ids.shape[0]
            if self.dev.type == "cuda" and (st["step"] % a.log_every == 0):
                torch.cuda.synchronize()
            if st["step"] % a.log_every == 0 or st["phase_step"] == n:
                dt = time.time() - t_last
                self.log({"phase": phase, "step": st["step"], "loss": loss.item(), "ce": ce.item(), "kl": kl.item(),
                          "bal": bal.item(), "gnorm": gn.item(), "lr": lr, "tok_s": tok_last / max(dt, 1e-9)})
                t_last, tok_last = time.time(), 0
            if st["step"] % a.eval_every == 0:
                self.log({"phase": phase, "step": st["step"], "val_ce": self.evaluate(nm, phase)})
            if st["step"] % a.save_every == 0:
                self.save()
            st["elapsed"] += time.time() - t0
        t0 = time.time()
        self.log({"phase": phase, "step": st["step"], "val_ce": self.evaluate(nm, phase), "event": "phase_end"})
        st["elapsed"] += time.time() - t0

    # ---------------------------------------------------------------- DSpark
    def dspark_loss(self, ids, h, nm, train=True):
        c, a = self.cfg, self.a
        blk = c.dspark_block_size
        B, T1 = ids.shape
        T = T1 - 1
        x = ids[:, :-1]
        with torch.no_grad():
            out = self.model(x, nm, index_mode="topk", logits="all", hash_ids=h, q_chunk=a.q_chunk)
        main = out["logits"]  # [B, T, V]
        rings = self.model.dspark_ring_entries(nm, out["taps"], 0)
        p = torch.arange(0, T - 1, a.dspark_stride, device=ids.device)
        bidx = torch.arange(B, device=ids.device).repeat_interleave(p.numel())
        pidx = p.repeat(B)
        tpos = pidx[:, None] + 1 + torch.arange(blk, device=ids.device)  # [NB, blk] row positions
        valid = tpos <= T - 1
        tposc = tpos.clamp(max=T - 1)
        y = ids[bidx, pidx + 1]
        markov = ids[bidx[:, None], tposc]
        _, logits, conf, dctx = self.model.dspark_blocks(nm, rings, bidx, pidx, y, markov)
        target = ids[bidx[:, None], tposc + 1]
        teacher = main[bidx[:, None], tposc]
        lv, tv, te, cv = logits[valid], target[valid], teacher[valid], conf[valid]
        ce = F.cross_entropy(lv, tv)
        kl = F.kl_div(torch.log_softmax(lv, -1), torch.log_softmax(te, -1), log_target=True, reduction="batchmean")
        label = (lv.argmax(-1) == te.argmax(-1)).float()
        bce = F.binary_cross_entropy_with_logits(cv, label)
        bal = torch.stack(dctx.balance).mean() if dctx.balance else ce.new_zeros(())
        agree = label.view(-1).mean()
        return ce, kl, bce, bal, agree, dctx

    @torch.no_grad()
    def evaluate_dspark(self, nm):
        self.model.eval()
        vals = []
        for arr in self.val.sequential(self.a.dspark_batch, self.a.dspark_seq, max(2, self.a.eval_batches // 2)):
            h = self.model.hash(arr[:, :-1], np.zeros((arr.shape[0], 0), np.int64)) if self.model.hash else None
            ids = torch.from_numpy(arr).to(self.dev)
            h = torch.from_numpy(h).to(self.dev) if h is not None else None
            ce, kl, bce, _, agree, _ = self.dspark_loss(ids, h, nm, train=False)
            vals.append((ce.item(), kl.item(), agree.item()))
        self.model.train()
        v = np.array(vals).mean(0) if vals else np.zeros(3)
        return {"val_draft_ce": float(v[0]), "val_draft_kl": float(v[1]), "val_draft_agree": float(v[2])}

    def run_dspark_phase(self):
        a, st = self.a, self.state
        nm = self.nm_qat
        self._freeze_backbone()
        n = self.plan["dspark"]
        self.model.train()
        while st["dstep"] < n:
            if st["elapsed"] > BUDGET_END["dspark"] * a.time_budget:
                self.log({"event": "time_guard", "phase": "dspark", "done": st["dstep"], "planned": n})
                break
            t0 = time.time()
            self.maybe_replan("dspark", st["dstep"], 3, 10)
            n = self.plan["dspark"]
            lr = self.lr_at(st["dstep"], n, a.dspark_lr)
            for g in self.dopt.param_groups:
                g["lr"] = lr
            ids, h = self.batch(self.train, st["dstep"], a.dspark_batch, a.dspark_seq, seed_offset=7919)
            ce, kl, bce, bal, agree, dctx = self.dspark_loss(ids, h, nm)
            loss = 0.5 * ce + 0.5 * kl + 0.1 * bce + a.balance_weight * bal
            self.dopt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(self.dopt.param_groups[0]["params"], a.clip)
            self.dopt.step()
            self.update_bias(dctx.moe_load)
            st["dstep"] += 1
            if self.dev.type == "cuda" and st["dstep"] % a.log_every == 0:
                torch.cuda.synchronize()
            if st["dstep"] % a.log_every == 0 or st["dstep"] == n:
                self.log({"phase": "dspark", "dstep": st["dstep"], "loss": loss.item(), "draft_ce": ce.item(),
                          "draft_kl": kl.item(), "conf_bce": bce.item(), "agree": agree.item(), "gnorm": gn.item(),
                          "lr": lr})
            if st["dstep"] % a.eval_every == 0:
                self.log({"phase": "dspark", "dstep": st["dstep"], **self.evaluate_dspark(nm)})
            if st["dstep"] % a.save_every == 0:
                self.save()
            st["elapsed"] += time.time() - t0
        t0 = time.time()
        self.log({"phase": "dspark", "dstep": st["dstep"], "event": "phase_end", **self.evaluate_dspark(nm)})
        st["elapsed"] += time.time() - t0

    # ---------------------------------------------------------------- main
    def run(self):
        st = self.state
        while st["phase"] < len(PHASES):
            phase = PHASES[st["phase"]]
            if phase == "dspark":
                if self.cfg.n_dspark and self.plan["dspark"] > 0:
                    self.run_dspark_phase()
            else:
                self.run_backbone_phase(phase)
            st["phase"] += 1
            st["phase_step"] = 0
            self.save()
        if not self.a.no_export:
            self.export_and_check()

    def export_and_check(self):
        exp = os.path.join(self.out, "export")
        tok = os.path.join(self.a.data, "tokenizer.json")
        size = export_dir(self.model, exp, self.token_map, tok if os.path.exists(tok) else None)
        model_cpu = Transformer(self.cfg, self.token_map)
        model_cpu.load_state_dict({k: v.detach().cpu() for k, v in self.model.state_dict().items()})
        self.log({"event": "export", "dir": exp, "model_safetensors_MiB": size / 2**20})
        self.log({"event": "export_check", **check_export(exp, self.val, self.a.check_seq, model_cpu,
                                                          Numerics.qat())})


@torch.no_grad()
def check_export(path, val: TokenStream, T: int, ref_model=None, ref_nm=None):
    """Loads an exported directory like check_golden.py does and runs it in exact mode: prefill of
    T/2 held-out tokens, one-token decode steps for the rest with a greedy DSpark draft after each,
    teacher forced. Returns the exact-mode held-out loss, the loss of the reference (training) model
    on the same tokens, and the share of draft rows that equal the next main argmax."""
    model = Transformer.from_dir(path).eval()
    nm = Numerics.exact()
    ids = torch.from_numpy(np.asarray(val.data[:T + 1], dtype=np.int64)).view(1, -1)
    P = T // 2
    st = model.new_state(1)
    logits = [model(ids[:, :P], nm, st, logits="all")["logits"]]
    drafts = []
    for t in range(P, T):
        lg = model(ids[:, t:t + 1], nm, st, logits="all")["logits"]
        logits.append(lg)
        if model.c.n_dspark:
            d_ids, d_lg, d_conf = model.draft(nm, st, lg[:, -1].argmax(-1))
            drafts.append((t, d_ids))
    logits = torch.cat(logits, 1)
    ce = F.cross_entropy(logits[0], ids[0, 1:T + 1]).item()
    res = {"exact_ce": ce, "nan": bool(torch.isnan(logits).any())}
    # the same tokens in one full-sequence (training-style) forward of the loaded export
    full = model(ids[:, :T], nm, logits="all")["logits"]
    res["exact_full_seq_ce"] = F.cross_entropy(full[0], ids[0, 1:T + 1]).item()
    rel = ((full - logits).norm(dim=-1) / logits.norm(dim=-1)).flatten()
    res["full_vs_incremental_median_rel"] = rel.median().item()
    res["full_vs_incremental_rows_above_1e-2"] = (rel > 1e-2).float().mean().item()
    if ref_model is not None:  # the training model in its QAT numerics (same weights, no BF16 roundings)
        ref_model = ref_model.eval()
        out = ref_model(ids[:, :T], ref_nm or Numerics.qat(), logits="all")
        res["qat_ce"] = F.cross_entropy(out["logits"][0].float().cpu(), ids[0, 1:T + 1]).item()
    if drafts:
        main_arg = logits[0].argmax(-1)  # [T]
        hit = tot = 0
        for t, d in drafts:
            for i in range(1, d.shape[1]):
                if t + i < T:
                    tot += 1
                    hit += int(d[0, i].item() == main_arg[t + i].item())
        res["draft_agree"] = hit / max(tot, 1)
    return res


def main(argv=None):
    a = parse_args(argv)
    torch.manual_seed(a.seed)
    Run(a).run()


if __name__ == "__main__":
    main()
