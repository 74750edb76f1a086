"""DeepSeek-V4.1-Flash text model in PyTorch, written from ../../shared/SPEC.md (SPEC below).

One module tree whose state_dict keys are the released tensor names (``embed.weight``,
``layers.{l}.attn.wq_a.weight``, ``mtp.{s}.markov_head.head.weight`` ...), without the ``.scale``
tensors, which only exist in the exported checkpoint. Parameters are FP32 master copies.

The same code runs under three numeric policies (class Numerics):

- ``exact``: the reference numerics of SPEC §3. Every BF16 rounding point, FP8 activation quant
  before FP8/FP4 GEMMs, FP4 fake quant of index queries/keys and compressed KV, FP8 window KV.
  Weights are used as loaded (stored FP8/FP4 values dequantized exactly). Used by check_golden.py.
- ``train``: plain FP32 math (optionally BF16 GEMMs), no rounding, no quantization.
- ``qat``: like ``train`` plus straight-through fake quantization of weights (export formats) and of
  the activations the reference quantizes, so the final phase sees the deployed numerics.

The forward works on a chunk of positions ``state.pos ..`` with an optional per-sequence State
(window history, compressed entries, index keys, compressor pending rows, Engram history, DSpark
window entries), so prefill + one-token decode steps run exactly like the reference; without a
State it is a plain full-sequence (teacher-forced) forward used for training.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

F32 = torch.float32
NEG_INF = float("-inf")

# ---------------------------------------------------------------------------------------------
# Number formats (SPEC §2-3). All functions take and return FP32 tensors.
# ---------------------------------------------------------------------------------------------

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _c(v: float, like: torch.Tensor) -> torch.Tensor:
    """An FP32 scalar tensor on like's device (keeps FP32 arithmetic explicit)."""
    return torch.tensor(v, dtype=F32, device=like.device)


def round_bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).to(F32)


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Nearest-even E4M3 (callers clamp to ±448 first)."""
    return x.to(torch.float8_e4m3fn).to(F32)


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value, ties to the even code, saturating at ±6 (SPEC §3.3)."""
    a = x.abs()
    q = torch.where(a < 2, torch.round(a * 2) * 0.5, torch.where(a < 4, torch.round(a), torch.round(a * 0.5) * 2))
    return torch.copysign(q.clamp(max=6.0), x)


def pow2_ceil(x: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2 x) on FP32 bits: exponent + 1 when the mantissa is non-zero (x > 0)."""
    b = x.to(F32).contiguous().view(torch.int32)
    e = ((b >> 23) & 0xFF) + ((b & 0x7FFFFF) != 0).to(torch.int32)
    return (e << 23).view(F32)


def fp8_act_quant(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """SPEC §3.2: per `block` channels, s = 2^ceil(log2(max(amax,1e-4)/448)), x := e4m3(x/s)·s."""
    xb = x.unflatten(-1, (-1, block))
    amax = xb.abs().amax(-1, keepdim=True)
    s = pow2_ceil(torch.maximum(amax, _c(1e-4, x)) * _c(1.0 / 448.0, x))
    return (round_e4m3((xb / s).clamp(-448.0, 448.0)) * s).flatten(-2)


def fp4_quant_pow2(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """SPEC §3.3, power-of-two scale per 32 (indexer queries, index keys)."""
    xb = x.unflatten(-1, (-1, block))
    amax = xb.abs().amax(-1, keepdim=True)
    s = pow2_ceil(torch.maximum(amax, _c(6.0 * 2.0**-126, x)) * _c(1.0 / 6.0, x))
    return (round_e2m1((xb / s).clamp(-6.0, 6.0)) * s).flatten(-2)


def fp4_quant_e4m3(x: torch.Tensor, block: int = 16) -> torch.Tensor:
    """SPEC §3.3, E4M3 scale per 16 (compressed main KV)."""
    xb = x.unflatten(-1, (-1, block))
    amax = xb.abs().amax(-1, keepdim=True)
    s = round_e4m3(torch.maximum(amax, _c(6.0 * 2.0**-9, x)) / 6.0)
    return (round_e2m1((xb / s).clamp(-6.0, 6.0)) * s).flatten(-2)


# ---- weight storage formats (export.py writes exactly these) ----


def quant_fp8_blocks(w: torch.Tensor, bo: int = 32, bi: int = 32):
    """FP8 E4M3 with one power-of-two scale per bo x bi block. Returns (values e4m3 as FP32,
    scale exponents as int32 UE8M0 codes [ceil(out/bo), ceil(in/bi)], dequantized FP32)."""
    w = w.detach().to(F32)
    o, i = w.shape
    po, pi = (-o) % bo, (-i) % bi
    wp = F.pad(w, (0, pi, 0, po))
    blk = wp.view((o + po) // bo, bo, (i + pi) // bi, bi)
    amax = blk.abs().amax(dim=(1, 3))
    s = pow2_ceil(torch.clamp(amax / 448.0, min=2.0**-126))
    q = round_e4m3((blk / s[:, None, :, None]).clamp(-448.0, 448.0))
    deq = (q * s[:, None, :, None]).reshape(o + po, i + pi)[:o, :i]
    codes = q.reshape(o + po, i + pi)[:o, :i]
    exps = (s.contiguous().view(torch.int32) >> 23) & 0xFF
    return codes, exps, deq


def quant_fp4_rows(w: torch.Tensor, block: int = 32):
    """FP4 E2M1 with one power-of-two scale per `block` inputs of a row. Returns (values on the
    E2M1 grid as FP32 [out, in], UE8M0 codes int32 [out, in/block], dequantized FP32)."""
    w = w.detach().to(F32)
    shape, i = w.shape, w.shape[-1]
    blk = w.reshape(-1, i // block, block)
    amax = blk.abs().amax(-1)
    s = pow2_ceil(torch.clamp(amax / 6.0, min=2.0**-126))
    q = round_e2m1((blk / s[..., None]).clamp(-6.0, 6.0))
    deq = (q * s[..., None]).view(shape)
    exps = ((s.contiguous().view(torch.int32) >> 23) & 0xFF).view(*shape[:-1], i // block)
    return q.view(shape), exps, deq


def quant_weight(w: torch.Tensor, kind: str) -> torch.Tensor:
    """The value a weight of storage `kind` holds after export (dequantized)."""
    if kind == "fp8":
        return quant_fp8_blocks(w)[2]
    if kind == "fp4":
        return quant_fp4_rows(w)[2]
    if kind == "fp8row":  # Engram table: one scale per 32 channels of each row
        return quant_fp8_blocks(w, 1, 32)[2]
    if kind == "bf16":
        return round_bf16(w.to(F32))
    return w.to(F32)


# ---------------------------------------------------------------------------------------------
# Configuration (SPEC §1; the released config.json schema)
# ---------------------------------------------------------------------------------------------


@dataclass
class Config:
    vocab_size: int = 512
    hidden_size: int = 128
    moe_intermediate_size: int = 64
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    head_dim: int = 64
    qk_rope_head_dim: int = 16
    q_lora_rank: int = 64
    o_lora_rank: int = 32
    o_groups: int = 2
    swiglu_limit: float = 10.0
    rms_norm_eps: float = 1e-20
    max_position_embeddings: int = 4096
    rope_theta: float = 10000.0
    rope_scaling: Optional[dict] = None
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    num_experts_per_tok: int = 2
    routed_scaling_factor: float = 1.5
    norm_topk_prob: bool = True
    sliding_window: int = 8
    compress_ratios: list = field(default_factory=lambda: [0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0])
    compress_rope_theta: float = 40000.0
    kv_source_layer_ids: list = field(default_factory=lambda: [2, 4])
    index_source_layer_ids: list = field(default_factory=lambda: [2, 4, 6])
    index_n_heads: int = 4
    index_head_dim: int = 32
    index_topk: int = 6
    candidate_source_layer_id: int = -1
    candidate_topk_blocks: int = 0
    candidate_block_size: int = 0
    hc_mult: int = 4
    hc_sinkhorn_iters: int = 20
    hc_eps: float = 1e-6
    engram_layer_ids: list = field(default_factory=list)
    engram_num_embeddings: list = field(default_factory=list)
    engram_max_ngram_size: int = 0
    engram_vocab_size: int = 0
    engram_n_heads: int = 0
    engram_head_dim: int = 0
    engram_pad_token_id: int = 2
    engram_compressed_vocab_size: int = 0
    num_nextn_predict_layers: int = 0
    dspark_block_size: int = 0
    dspark_noise_token_id: int = 0
    dspark_target_layer_ids: list = field(default_factory=list)
    dspark_markov_rank: int = 0
    dspark_n_routed_experts: int = 0
    dspark_num_experts_per_tok: int = 0
    # top level
    bos_token_id: int = 0
    eos_token_id: int = 1
    pad_token_id: int = 2
    image_token_id: int = -1

    TEXT_KEYS = (
        "vocab_size hidden_size moe_intermediate_size num_hidden_layers num_attention_heads head_dim "
        "qk_rope_head_dim q_lora_rank o_lora_rank o_groups swiglu_limit rms_norm_eps max_position_embeddings "
        "rope_theta rope_scaling n_routed_experts n_shared_experts num_experts_per_tok routed_scaling_factor "
        "norm_topk_prob sliding_window compress_ratios compress_rope_theta kv_source_layer_ids "
        "index_source_layer_ids index_n_heads index_head_dim index_topk candidate_source_layer_id "
        "candidate_topk_blocks candidate_block_size hc_mult hc_sinkhorn_iters hc_eps engram_layer_ids "
        "engram_num_embeddings engram_max_ngram_size engram_vocab_size engram_n_heads engram_head_dim "
        "engram_pad_token_id engram_compressed_vocab_size num_nextn_predict_layers dspark_block_size "
        "dspark_noise_token_id dspark_target_layer_ids dspark_markov_rank dspark_n_routed_experts "
        "dspark_num_experts_per_tok"
    ).split()
    TOP_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "image_token_id")

    @classmethod
    def from_json(cls, path_or_dict) -> "Config":
        j = path_or_dict
        if not isinstance(j, dict):
            with open(j) as f:
                j = json.load(f)
        tc = j.get("text_config", j)
        c = cls()
        for k in cls.TEXT_KEYS:
            if k in tc and tc[k] is not None:
                setattr(c, k, tc[k])
        for k in cls.TOP_KEYS:
            if k in j and j[k] is not None:
                setattr(c, k, j[k])
        if "vision_config" in j:
            raise ValueError("vision checkpoints are out of scope for tools/train")
        return c

    def to_json(self) -> dict:
        """The released config.json schema: top level, quantization_config, text_config."""
        text = {"model_type": "deepseek_v41_text"}
        for k in self.TEXT_KEYS:
            v = getattr(self, k)
            if k == "rope_scaling" and v is None:
                continue
            text[k] = v
        text.update(hidden_act="silu", num_key_value_heads=1, attention_bias=False, tie_word_embeddings=False,
                    scoring_func="sqrtsoftplus", topk_method="noaux_tc")
        return {
            "architectures": ["DeepseekV41ForCausalLM"],
            "model_type": "deepseek_v41",
            "dtype": "bfloat16",
            **{k: getattr(self, k) for k in self.TOP_KEYS},
            "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                    "weight_block_size": [32, 32], "scale_fmt": "ue8m0", "expert_dtype": "fp4"},
            "text_config": text,
        }

    # derived
    @property
    def n_dspark(self) -> int:
        return self.num_nextn_predict_layers if self.dspark_block_size > 0 else 0

    @property
    def n_engram_cols(self) -> int:
        return max(self.engram_max_ngram_size - 1, 0) * self.engram_n_heads


@dataclass
class Role:
    id: int
    dspark: bool
    ratio: int
    mode: str  # window | full | reindex | reuse
    kv_source: int = -1
    index_source: int = -1
    candidate_source: bool = False
    uses_candidates: bool = False
    engram_slot: int = -1
    tap_slot: int = -1
    n_experts: int = 0
    top_k: int = 0


def make_roles(c: Config) -> list:
    """Layer roles derived from the config (SPEC §1): backbone layers then DSpark stages."""
    L, out = c.num_hidden_layers, []
    for l in range(L + c.n_dspark):
        ds = l >= L
        r = Role(id=l, dspark=ds, ratio=c.compress_ratios[l], mode="window",
                 n_experts=c.dspark_n_routed_experts if ds else c.n_routed_experts,
                 top_k=c.dspark_num_experts_per_tok if ds else c.num_experts_per_tok)
        if not ds:
            r.engram_slot = c.engram_layer_ids.index(l) if l in c.engram_layer_ids else -1
            r.tap_slot = c.dspark_target_layer_ids.index(l) if l in c.dspark_target_layer_ids else -1
            if r.ratio > 0:
                r.kv_source = max(k for k in c.kv_source_layer_ids if k <= l)
                r.index_source = max(k for k in c.index_source_layer_ids if k <= l)
                r.mode = "full" if r.kv_source == l else ("reindex" if r.index_source == l else "reuse")
                r.candidate_source = l == c.candidate_source_layer_id
                r.uses_candidates = r.mode in ("full", "reindex") and 0 <= c.candidate_source_layer_id < l
        out.append(r)
    return out


# ---------------------------------------------------------------------------------------------
# Numeric policy
# ---------------------------------------------------------------------------------------------


def _ste(x: torch.Tensor, fn) -> torch.Tensor:
    if not x.requires_grad:
        return fn(x)
    with torch.no_grad():
        d = fn(x.detach()) - x.detach()
    return x + d


class Numerics:
    """round: BF16 rounding points (SPEC §3); quant: activation fake quant (FP8/FP4);
    ste_weights: weights fake-quantized to their storage format each forward (QAT);
    gemm_dtype: dtype of GEMM operands (outputs always FP32)."""

    def __init__(self, round: bool = False, quant: bool = False, ste_weights: bool = False, gemm_dtype=F32):
        self.round, self.quant, self.ste_weights, self.gemm_dtype = round, quant, ste_weights, gemm_dtype

    @classmethod
    def exact(cls):
        return cls(round=True, quant=True)

    @classmethod
    def train(cls, gemm_dtype=F32):
        return cls(gemm_dtype=gemm_dtype)

    @classmethod
    def qat(cls, gemm_dtype=F32):
        return cls(quant=True, ste_weights=True, gemm_dtype=gemm_dtype)

    def bf16(self, x):
        return round_bf16(x) if self.round else x

    def act(self, x):  # FP8 activation quant, block 32
        return _ste(x, fp8_act_quant) if self.quant else x

    def fp4_keys(self, x):  # FP4, pow2 scale per 32
        return _ste(x, fp4_quant_pow2) if self.quant else x

    def fp4_kv(self, x):  # FP4, E4M3 scale per 16
        return _ste(x, fp4_quant_e4m3) if self.quant else x

    def w(self, p: torch.Tensor, kind: str) -> torch.Tensor:
        if self.ste_weights and kind != "f32":
            return _ste(p, lambda t: quant_weight(t, kind))
        return p

    def mm(self, a, b):
        if self.gemm_dtype != F32:
            return (a.to(self.gemm_dtype) @ b.to(self.gemm_dtype)).to(F32)
        return a @ b

    def ein(self, eq, *ops):
        if self.gemm_dtype != F32:
            return torch.einsum(eq, *[o.to(self.gemm_dtype) for o in ops]).to(F32)
        return torch.einsum(eq, *ops)

    def linear(self, x, lin: "Lin", mode: str = "auto"):
        """SPEC §3.4. auto: FP8/FP4 weights quantize the input first, BF16 out; noquant: BF16 out
        without input quant (wo_a); f32: FP32 out (head, gate, ratio>1 compressor, DSpark heads)."""
        w = self.w(lin.weight, lin.kind)
        if mode == "auto" and lin.kind in ("fp8", "fp4"):
            x = self.act(x)
        y = self.mm(x, w.t())
        return y if mode == "f32" else self.bf16(y)


# ---------------------------------------------------------------------------------------------
# Parameter holders (names follow the release)
# ---------------------------------------------------------------------------------------------


class Lin(nn.Module):
    def __init__(self, in_f: int, out_f: int, kind: str):
        super().__init__()
        self.kind, self.in_f, self.out_f = kind, in_f, out_f
        self.weight = nn.Parameter(torch.zeros(out_f, in_f))


class Norm(nn.Module):
    kind = "bf16"

    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class Emb(nn.Module):
    def __init__(self, n: int, dim: int, kind: str = "bf16"):
        super().__init__()
        self.kind = kind
        self.weight = nn.Parameter(torch.zeros(n, dim))


def rmsnorm(nm: Numerics, x: torch.Tensor, norm: Norm, eps: float) -> torch.Tensor:
    """SPEC §3.1: bf16(w · (x · rsqrt(mean(x²) + eps))), FP32 inside, one rounding."""
    x = x.to(F32)
    y = nm.w(norm.weight, "bf16") * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps))
    return nm.bf16(y)


# ---------------------------------------------------------------------------------------------
# RoPE (SPEC §3.5)
# ---------------------------------------------------------------------------------------------


class Rope:
    def __init__(self, rd: int, theta: float, yarn: Optional[dict], max_pos: int):
        self.rd, self.max_pos = rd, max_pos
        freqs = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=F32) / rd))
        if yarn:
            orig = yarn["original_max_position_embeddings"]
            fac, bf, bs = yarn["factor"], yarn["beta_fast"], yarn["beta_slow"]

            def corr(n):
                return rd * math.log(orig / (n * 2 * math.pi)) / (2 * math.log(theta))

            low, high = max(math.floor(corr(bf)), 0), min(math.ceil(corr(bs)), rd - 1)
            ramp = ((torch.arange(rd // 2, dtype=F32) - low) / max(high - low, 1e-3)).clamp(0, 1)
            smooth = 1 - ramp
            freqs = freqs / fac * (1 - smooth) + freqs * smooth
        self.freqs = freqs
        self._tab = {}

    def table(self, device):
        key = str(device)
        t = self._tab.get(key)
        if t is None:
            ang = torch.arange(self.max_pos, dtype=F32)[:, None] * self.freqs[None, :]  # FP32 angles
            t = (torch.cos(ang.double()).to(F32).to(device), torch.sin(ang.double()).to(F32).to(device))
            self._tab[key] = t
        return t

    def cs(self, pos: torch.Tensor):
        """cos, sin [..., rd/2] for an integer position tensor (positions < max_pos)."""
        c, s = self.table(pos.device)
        return c[pos], s[pos]


def rope(nm: Numerics, x: torch.Tensor, cos, sin, inverse: bool = False) -> torch.Tensor:
    """Rotates the trailing rd channels as interleaved pairs; result rounded to BF16."""
    rd = cos.shape[-1] * 2
    t = x[..., -rd:].unflatten(-1, (-1, 2))
    a, b = t[..., 0], t[..., 1]
    if inverse:
        sin = -sin
    r = torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)
    return torch.cat([x[..., :-rd], nm.bf16(r)], -1)


# ---------------------------------------------------------------------------------------------
# Per-sequence state and per-forward context
# ---------------------------------------------------------------------------------------------


class LayerState:
    def __init__(self):
        self.win = None  # [B, <=W-1, D] last window entries before this chunk
        self.E = None  # [B, n, D] compressed main entries (KV sources)
        self.K = None  # [B, n, dI] index keys (KV sources)
        self.pend_kv = None  # [B, <r, D] FP32 rows of the unfinished group (ratio > 1)
        self.pend_z = None


class State:
    """Everything a sequence batch carries between chunks (SPEC §6 caches, as values)."""

    def __init__(self, cfg: Config, batch: int):
        self.pos = 0
        self.batch = batch
        self.layers = [LayerState() for _ in range(cfg.num_hidden_layers + cfg.n_dspark)]
        self.history = np.zeros((batch, 0), dtype=np.int64)  # last N-1 raw ids (Engram)
        self.dspark_kv = [None] * cfg.n_dspark  # per stage [B, pos, D] window entries from main_x


class Hooks:
    """Observation points (all optional). The golden check substitutes inputs and lists."""

    def unit_input(self, l, p0, H, pre):
        return H, pre

    def unit_output(self, l, p0, H, pre):
        pass

    def index_scores(self, l, p0, scores):
        pass

    def topk(self, l, p0, lists):
        return lists

    def engram_ids(self, p0, ids):
        pass

    def taps(self, p0, taps):
        return taps


class Ctx:
    def __init__(self, model, nm, p0, S, state, hooks, index_mode, want_kl):
        self.model, self.nm, self.p0, self.S, self.state, self.hooks = model, nm, p0, S, state, hooks
        self.index_mode = index_mode  # 'topk' (reference) or 'dense' (all visible entries; training warm-up)
        self.want_kl = want_kl
        self.kv = {}  # kv source -> (E, K) including history
        self.sel = {}  # index source -> bool [B, S, n]
        self.cand = None
        self.kl = []  # indexer KL terms
        self.moe_load = []  # per layer [E] token counts


# ---------------------------------------------------------------------------------------------
# Attention, compressor, indexer (SPEC §3.6, §4.2-4.5)
# ---------------------------------------------------------------------------------------------


def sparse_attention(nm: Numerics, q, keys, kmask, sink, scale, want_probs_from: Optional[int] = None):
    """o = attn(q, entries, sink) (SPEC §3.6). q [B,S,H,D]; keys [B,n,D] or [B,S,n,D];
    kmask bool broadcastable to [B,S,n]. Exact mode rounds exp(s-m) to BF16 in the numerator.
    want_probs_from: also return the attention probabilities of keys[from:] summed over heads."""
    if keys.dim() == 3:
        s = nm.ein("bshd,bnd->bhsn", q, keys)
    else:
        s = nm.ein("bshd,bsnd->bhsn", q, keys)
    s = (s * scale).masked_fill(~kmask.unsqueeze(1), NEG_INF)
    sinkv = sink.to(F32).view(1, -1, 1, 1)
    m = s.amax(-1, keepdim=True)
    if not nm.round:
        m = torch.maximum(m, sinkv).detach()
    p = torch.exp(s - m)
    den = p.sum(-1, keepdim=True) + torch.exp(sinkv - m)
    num = nm.bf16(p)
    if keys.dim() == 3:
        o = nm.ein("bhsn,bnd->bshd", num, keys)
    else:
        o = nm.ein("bhsn,bsnd->bshd", num, keys)
    o = nm.bf16(o / den.permute(0, 2, 1, 3))
    probs = None
    if want_probs_from is not None:
        probs = (p[..., want_probs_from:] / den).sum(1)  # [B,S,n_c]
    return o, probs


class Compressor(nn.Module):
    def __init__(self, c: Config, ratio: int):
        super().__init__()
        self.ratio = ratio
        self.wkv = Lin(c.hidden_size, c.head_dim, "bf16")
        if ratio > 1:
            self.wgate = Lin(c.hidden_size, c.head_dim, "bf16")
        self.norm = Norm(c.head_dim)


class Indexer(nn.Module):
    def __init__(self, c: Config, owns_k: bool):
        super().__init__()
        self.wq_b = Lin(c.q_lora_rank, c.index_n_heads * c.index_head_dim, "fp8")
        self.weights_proj = Lin(c.hidden_size, c.index_n_heads, "bf16")
        if owns_k:
            self.wk = Lin(c.head_dim, c.index_head_dim, "bf16")
            self.k_norm = Norm(c.index_head_dim)


def candidate_mask(score: torch.Tensor, vis: torch.Tensor, topk_blocks: int, block: int) -> torch.Tensor:
    """SPEC §4.5 for rows score [..., n] (−inf past each row's `vis` visible entries): blocks of
    `block` entries scored by their best entry, the newest visible block forced in, the top
    `topk_blocks` finite blocks kept. Returns bool [..., n]."""
    n = score.shape[-1]
    pad = (-n) % block
    bs = F.pad(score, (0, pad), value=NEG_INF).unflatten(-1, (-1, block)).amax(-1)
    nb = bs.shape[-1]
    last = torch.div(vis - 1, block, rounding_mode="floor")
    bs = bs.masked_fill(torch.arange(nb, device=score.device) == last.unsqueeze(-1), float("inf"))
    top = bs.topk(min(topk_blocks, nb), dim=-1)
    keep = torch.zeros_like(bs, dtype=torch.bool).scatter_(-1, top.indices, top.values > NEG_INF)
    return keep.repeat_interleave(block, dim=-1)[..., :n]


def topk_lists(score: torch.Tensor, k: int, exact: bool = True) -> torch.Tensor:
    """The k best finite scores per row (ties to the lower index when exact), ascending, padded
    with −1."""
    n = score.shape[-1]
    kk = min(k, n)
    if exact:
        vals, idx = torch.sort(score, dim=-1, descending=True, stable=True)
        vals, idx = vals[..., :kk], idx[..., :kk]
    else:
        vals, idx = score.topk(kk, dim=-1)
    idx = torch.where(vals > NEG_INF, idx, n + 1)
    idx = torch.sort(idx, dim=-1).values
    idx = torch.where(idx > n, -1, idx)
    if kk < k:
        idx = F.pad(idx, (0, k - kk), value=-1)
    return idx


def lists_to_mask(lists: torch.Tensor, n: int, vis: torch.Tensor) -> torch.Tensor:
    """bool [..., n]: listed entries that exist and are visible (j < vis)."""
    ok = (lists >= 0) & (lists < n) & (lists < vis.unsqueeze(-1))
    m = torch.zeros(*lists.shape[:-1], n + 1, dtype=torch.bool, device=lists.device)
    m.scatter_(-1, torch.where(ok, lists, n).long(), True)
    return m[..., :n]


class Attention(nn.Module):
    def __init__(self, c: Config, role: Role):
        super().__init__()
        self.c, self.role = c, role
        d, H, D = c.hidden_size, c.num_attention_heads, c.head_dim
        self.wq_a = Lin(d, c.q_lora_rank, "fp8")
        self.q_norm = Norm(c.q_lora_rank)
        self.wq_b = Lin(c.q_lora_rank, H * D, "fp8")
        self.wkv = Lin(d, D, "fp8")
        self.kv_norm = Norm(D)
        self.wo_a = Lin(H * D // c.o_groups, c.o_groups * c.o_lora_rank, "fp8")
        self.wo_b = Lin(c.o_groups * c.o_lora_rank, d, "fp8")
        self.attn_sink = nn.Parameter(torch.zeros(H))
        if role.mode == "full":
            self.compressor = Compressor(c, role.ratio)
        if role.mode in ("full", "reindex"):
            self.indexer = Indexer(c, role.mode == "full")
        yarn = c.rope_scaling if (role.ratio > 0 and c.rope_scaling and
                                  c.rope_scaling.get("original_max_position_embeddings", 0) > 0) else None
        self.rope = Rope(c.qk_rope_head_dim, c.compress_rope_theta if role.ratio > 0 else c.rope_theta, yarn,
                         c.max_position_embeddings + c.dspark_block_size + 1)

    # -- shared pieces --
    def _q(self, nm, x, cos, sin):
        c = self.c
        qr = rmsnorm(nm, nm.linear(x, self.wq_a), self.q_norm, c.rms_norm_eps)
        q = nm.linear(qr, self.wq_b).unflatten(-1, (c.num_attention_heads, c.head_dim))
        return qr, rope(nm, q, cos.unsqueeze(-2), sin.unsqueeze(-2))

    def _kv(self, nm, x, cos, sin):
        kv = rmsnorm(nm, nm.linear(x, self.wkv), self.kv_norm, self.c.rms_norm_eps)
        return nm.act(rope(nm, kv, cos, sin))  # FP8 window entry

    def _out(self, nm, o, cos, sin):
        c = self.c
        o = rope(nm, o, cos.unsqueeze(-2), sin.unsqueeze(-2), inverse=True)
        G, R = c.o_groups, c.o_lora_rank
        o = o.flatten(-2).unflatten(-1, (G, -1))
        wo_a = nm.w(self.wo_a.weight, "fp8").view(G, R, -1)
        u = nm.bf16(nm.ein("...gk,grk->...gr", o, wo_a)).flatten(-2)  # BF16, no act quant
        return nm.linear(u, self.wo_b)

    # -- compressor (SPEC §4.3) --
    def _compress(self, ctx: Ctx, x):
        nm, c, r = ctx.nm, self.c, self.role.ratio
        comp, idx = self.compressor, self.indexer
        st = ctx.state.layers[self.role.id] if ctx.state is not None else LayerState()
        g0 = 0 if st.E is None else st.E.shape[1]
        if r == 1:
            latent = rmsnorm(nm, nm.linear(x, comp.wkv), comp.norm, c.rms_norm_eps)
        else:
            kv = nm.linear(x.to(F32), comp.wkv, "f32")
            z = nm.linear(x.to(F32), comp.wgate, "f32")
            if st.pend_kv is not None:
                kv, z = torch.cat([st.pend_kv, kv], 1), torch.cat([st.pend_z, z], 1)
            n = kv.shape[1] // r
            pooled = (kv[:, :n * r].unflatten(1, (n, r)) * torch.softmax(z[:, :n * r].unflatten(1, (n, r)), 2)).sum(2)
            latent = rmsnorm(nm, nm.bf16(pooled), comp.norm, c.rms_norm_eps)
            if ctx.state is not None:
                st.pend_kv, st.pend_z = kv[:, n * r:], z[:, n * r:]
        n = latent.shape[1]
        if n:
            gpos = (g0 + torch.arange(n, device=x.device)) * r
            cos, sin = self.rope.cs(gpos)
            k = rmsnorm(nm, nm.linear(latent, idx.wk), idx.k_norm, c.rms_norm_eps)
            K = nm.fp4_keys(rope(nm, k, cos, sin))
            E = nm.fp4_kv(rope(nm, latent, cos, sin))
        else:
            B = x.shape[0]
            E = x.new_zeros(B, 0, c.head_dim)
            K = x.new_zeros(B, 0, c.index_head_dim)
        if st.E is not None:
            E, K = torch.cat([st.E, E], 1), torch.cat([st.K, K], 1)
        if ctx.state is not None:
            st.E, st.K = E, K
        ctx.kv[self.role.id] = (E, K)

    # -- indexer (SPEC §4.4-4.5) --
    def _index(self, ctx: Ctx, x, qr, K, pos):
        nm, c, r, role = ctx.nm, self.c, self.role.ratio, self.role
        nI, dI = c.index_n_heads, c.index_head_dim
        n = K.shape[1]
        vis = torch.clamp(torch.div(pos + 1, r, rounding_mode="floor"), max=n)  # [S]
        detach = ctx.want_kl and not nm.round  # the auxiliary trains only the indexer
        xi, qri = (x.detach(), qr.detach()) if detach else (x, qr)
        cos, sin = self.rope.cs(pos)
        q = nm.linear(qri, self.indexer.wq_b).unflatten(-1, (nI, dI))
        q = nm.fp4_keys(rope(nm, q, cos.unsqueeze(-2), sin.unsqueeze(-2)))
        w = nm.bf16(nm.linear(xi, self.indexer.weights_proj) * float(dI ** -0.5 * nI ** -0.5))
        Kd = K.detach() if detach else K
        dots = torch.einsum("bshd,bnd->bshn", q.to(F32), Kd.to(F32))  # FP32 scores (SPEC §4.4)
        score = (w.to(F32).unsqueeze(-1) * dots.relu()).sum(2)  # [B,S,n]
        visible = torch.arange(n, device=x.device) < vis.unsqueeze(-1)  # [S,n]
        score = score.masked_fill(~visible, NEG_INF)
        raw = score
        if role.candidate_source:
            with torch.no_grad():
                ctx.cand = candidate_mask(score.detach(), vis.expand(score.shape[:-1]), c.candidate_topk_blocks,
                                          c.candidate_block_size)
        elif role.uses_candidates and ctx.cand is not None:
            score = score.masked_fill(~ctx.cand, NEG_INF)
        if ctx.hooks:
            ctx.hooks.index_scores(role.id, ctx.p0, score)
        if ctx.index_mode == "dense" and not ctx.hooks:  # training warm-up: every visible entry
            sel = visible.expand(score.shape)
        else:
            with torch.no_grad():
                lists = topk_lists(score.detach(), c.index_topk, exact=nm.round)
            if ctx.hooks:
                lists = ctx.hooks.topk(role.id, ctx.p0, lists)
            sel = visible.expand(score.shape) if ctx.index_mode == "dense" else lists_to_mask(lists, n, vis)
        ctx.sel[role.id] = sel
        return raw, sel

    def forward(self, ctx: Ctx, x):
        nm, c, role = ctx.nm, self.c, self.role
        B, S, _ = x.shape
        W, D = c.sliding_window, c.head_dim
        pos = ctx.p0 + torch.arange(S, device=x.device)
        cos, sin = self.rope.cs(pos)
        qr, q = self._q(nm, x, cos, sin)
        kv = self._kv(nm, x, cos, sin)
        st = ctx.state.layers[role.id] if ctx.state is not None else None
        if st is not None and st.win is not None and st.win.shape[1]:
            keys = torch.cat([st.win, kv], 1)
        else:
            keys = kv
        kpos = ctx.p0 - (keys.shape[1] - S) + torch.arange(keys.shape[1], device=x.device)
        kmask = (kpos[None, :] <= pos[:, None]) & (kpos[None, :] > pos[:, None] - W)
        kmask = kmask.unsqueeze(0).expand(B, S, -1)
        if st is not None:
            st.win = keys[:, -(W - 1):] if W > 1 else keys[:, :0]
        nwin = keys.shape[1]
        kl_scores = None
        if role.ratio > 0:
            if role.mode == "full":
                self._compress(ctx, x)
            E, K = ctx.kv[role.kv_source]
            if role.mode in ("full", "reindex") and E.shape[1] > 0:
                kl_scores, _ = self._index(ctx, x, qr, K, pos)
            sel = ctx.sel.get(role.index_source)
            if E.shape[1] > 0 and sel is not None:
                keys = torch.cat([keys, E], 1)
                kmask = torch.cat([kmask, sel], -1)
            else:
                kl_scores = None
        want = kl_scores is not None and ctx.want_kl
        scale = float(D ** -0.5)
        qc = ctx.q_chunk
        if qc and S > qc and nwin == S:
            # query chunks see only the window keys they can reach, plus every compressed entry
            outs, probs = [], []
            for t0 in range(0, S, qc):
                t1, k0 = min(S, t0 + qc), max(0, t0 - W + 1)
                kk = torch.cat([keys[:, k0:t1], keys[:, nwin:]], 1)
                km = torch.cat([kmask[:, t0:t1, k0:t1], kmask[:, t0:t1, nwin:]], -1)
                o, p = sparse_attention(nm, q[:, t0:t1], kk, km, self.attn_sink, scale, (t1 - k0) if want else None)
                outs.append(o)
                probs.append(p)
            o = torch.cat(outs, 1)
            probs = torch.cat(probs, 1) if want else None
        else:
            o, probs = sparse_attention(nm, q, keys, kmask, self.attn_sink, scale, nwin if want else None)
        if want:
            self._kl(ctx, probs.detach(), kl_scores, kmask[..., nwin:])
        return self._out(nm, o, cos, sin)

    @staticmethod
    def _kl(ctx, probs, scores, support):
        """V3.2-style indexer auxiliary: KL(attention over compressed entries, summed over heads
        and renormalized || softmax of the index scores), on the entries the attention saw."""
        support = support & torch.isfinite(scores)
        tgt = probs * support
        tot = tgt.sum(-1, keepdim=True)
        rows = (tot.squeeze(-1) > 0).to(F32)
        tgt = tgt / tot.clamp_min(1e-30)
        logq = torch.log_softmax(scores.masked_fill(~support, NEG_INF), -1)
        term = torch.where(support & (tgt > 0), tgt * (torch.log(tgt.clamp_min(1e-30)) - logq), 0.0)
        ctx.kl.append((term.sum(-1) * rows).sum() / rows.sum().clamp_min(1.0))

    # -- DSpark stage attention (SPEC §4.9) --
    def draft(self, nm: Numerics, x, ring, bidx, pidx):
        """x [NB, blk, d] block rows at positions p+1..p+blk; ring [B, Tm, D] this stage's window
        entries of main positions 0..Tm-1; bidx, pidx [NB]: sequence and p of each block."""
        c = self.c
        NB, blk, _ = x.shape
        W = c.sliding_window
        pos = pidx[:, None] + 1 + torch.arange(blk, device=x.device)  # [NB, blk]
        cos, sin = self.rope.cs(pos)
        _, q = self._q(nm, x, cos, sin)
        kv = self._kv(nm, x, cos, sin)  # [NB, blk, D]
        wpos = pidx[:, None] - (W - 1) + torch.arange(W, device=x.device)  # [NB, W]
        valid = (wpos >= 0) & (wpos < ring.shape[1])
        rk = ring[bidx[:, None], wpos.clamp(0, ring.shape[1] - 1)]  # [NB, W, D]
        keys = torch.cat([rk, kv], 1)  # [NB, W+blk, D], the same for every row of a block
        kmask = torch.cat([valid, torch.ones(NB, blk, dtype=torch.bool, device=x.device)], 1)
        kmask = kmask.unsqueeze(1).expand(NB, blk, W + blk)
        o, _ = sparse_attention(nm, q, keys, kmask, self.attn_sink, float(c.head_dim ** -0.5))
        return self._out(nm, o, cos, sin)


# ---------------------------------------------------------------------------------------------
# mHC (SPEC §4.1)
# ---------------------------------------------------------------------------------------------


def hc_mixes(c: Config, H, fn, base, scale):
    hc = c.hc_mult
    z = H.flatten(-2).to(F32)
    rs = torch.rsqrt(z.square().mean(-1, keepdim=True) + c.rms_norm_eps)
    m = (z @ fn.t()) * rs
    pre = torch.sigmoid(m[..., :hc] * scale[0] + base[:hc]) + c.hc_eps
    post = 2 * torch.sigmoid(m[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    C = (m[..., 2 * hc:] * scale[2] + base[2 * hc:]).unflatten(-1, (hc, hc))
    C = torch.softmax(C, -1) + c.hc_eps
    C = C / (C.sum(-2, keepdim=True) + c.hc_eps)
    for _ in range(c.hc_sinkhorn_iters - 1):
        C = C / (C.sum(-1, keepdim=True) + c.hc_eps)
        C = C / (C.sum(-2, keepdim=True) + c.hc_eps)
    return pre, post, C


def hc_pre(nm, H, pre):
    return nm.bf16((pre.unsqueeze(-1) * H).sum(-2))


def hc_post(nm, x, H, post, C):
    return nm.bf16(post.unsqueeze(-1) * x.unsqueeze(-2) + torch.einsum("...jk,...jd->...kd", C, H))


# ---------------------------------------------------------------------------------------------
# MoE (SPEC §4.6)
# ---------------------------------------------------------------------------------------------


class Gate(nn.Module):
    def __init__(self, n_experts: int, d: int):
        super().__init__()
        self.kind = "bf16"
        self.weight = nn.Parameter(torch.zeros(n_experts, d))
        self.bias = nn.Parameter(torch.zeros(n_experts), requires_grad=False)  # noaux_tc balance bias


class Expert(nn.Module):
    def __init__(self, d: int, inter: int, kind: str):
        super().__init__()
        self.w1, self.w2, self.w3 = Lin(d, inter, kind), Lin(inter, d, kind), Lin(d, inter, kind)


class MoE(nn.Module):
    def __init__(self, c: Config, role: Role):
        super().__init__()
        self.c, self.role = c, role
        self.gate = Gate(role.n_experts, c.hidden_size)
        self.experts = nn.ModuleList([Expert(c.hidden_size, c.moe_intermediate_size, "fp4")
                                      for _ in range(role.n_experts)])
        self.shared_experts = Expert(c.hidden_size, c.moe_intermediate_size, "fp8")

    def route(self, nm, x):
        c, k = self.c, self.role.top_k
        logits = x.to(F32) @ nm.w(self.gate.weight, "bf16").t()  # FP32 gate (SPEC §4.6)
        s = torch.sqrt(F.softplus(logits))
        with torch.no_grad():
            b = s.detach() + self.gate.bias
            sel = torch.sort(b, dim=-1, descending=True, stable=True).indices[..., :k]
        w = s.gather(-1, sel)
        if c.norm_topk_prob and k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return sel, w * c.routed_scaling_factor, s

    def _swiglu(self, nm, g, u, weight=None):
        lim = self.c.swiglu_limit
        if lim > 0:
            g, u = g.clamp(max=lim), u.clamp(-lim, lim)
        a = F.silu(g) * u
        if weight is not None:
            a = weight * a
        return nm.bf16(a)

    def forward(self, ctx: Ctx, x):
        nm, c = ctx.nm, self.c
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        sel, w, s = self.route(nm, xf)
        E = self.role.n_experts
        dense_w = torch.zeros(xf.shape[0], E, device=x.device, dtype=F32).scatter(-1, sel, w)  # [N, E]
        W1 = nm.w(torch.stack([e.w1.weight for e in self.experts]), "fp4")  # FP4 rows: per-expert exact
        W3 = nm.w(torch.stack([e.w3.weight for e in self.experts]), "fp4")
        W2 = nm.w(torch.stack([e.w2.weight for e in self.experts]), "fp4")
        xq = nm.act(xf)
        if ctx.sparse_moe:
            y = torch.zeros_like(xf, dtype=F32)
            for e in range(E):
                rows = (sel == e).any(-1).nonzero().squeeze(-1)
                if rows.numel() == 0:
                    continue
                g = nm.bf16(nm.mm(xq[rows], W1[e].t()))
                u = nm.bf16(nm.mm(xq[rows], W3[e].t()))
                a = self._swiglu(nm, g, u, dense_w[rows, e:e + 1])
                y = y.index_add(0, rows, nm.bf16(nm.mm(nm.act(a), W2[e].t())))
        else:
            g = nm.bf16(nm.ein("nd,eid->eni", xq, W1))
            u = nm.bf16(nm.ein("nd,eid->eni", xq, W3))
            a = self._swiglu(nm, g, u, dense_w.t().unsqueeze(-1))
            y = nm.bf16(nm.ein("eni,edi->end", nm.act(a), W2)).sum(0)
        sh = self.shared_experts
        g = nm.linear(xf, sh.w1)
        u = nm.linear(xf, sh.w3)
        ysh = nm.linear(self._swiglu(nm, g, u), sh.w2)
        if self.training:
            with torch.no_grad():
                ctx.moe_load.append((self, torch.bincount(sel.flatten(), minlength=E).float()))
            # sequence-level balance statistic (small complementary aux loss, DeepSeek-V3 style)
            frac = torch.bincount(sel.flatten(), minlength=E).float() / sel.numel()
            prob = (s / s.sum(-1, keepdim=True)).mean(0)
            ctx.balance.append(E * (frac.detach() * prob).sum())
        return nm.bf16(y + ysh).view(shape)


# ---------------------------------------------------------------------------------------------
# Engram (SPEC §4.7-4.8)
# ---------------------------------------------------------------------------------------------


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d //= 2
        r += 1
    for a in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def engram_primes(layer_ids, max_ngram: int, n_heads: int, vocab_start: int):
    """[layer][n-2][head] bucket primes (SPEC §4.8): ascending from vocab_start − 1 for every
    n-gram size, never reusing a prime anywhere in the model."""
    seen, out = set(), []
    for _ in layer_ids:
        per_n = []
        for _n in range(2, max_ngram + 1):
            cur, row = vocab_start - 1, []
            for _h in range(n_heads):
                cand = cur + 1
                while not is_prime(cand) or cand in seen:
                    cand += 1
                seen.add(cand)
                row.append(cand)
                cur = cand
            per_n.append(row)
        out.append(per_n)
    return out


def engram_multipliers(layer_id: int, max_ngram: int, compressed_vocab: int) -> np.ndarray:
    bound = max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)
    x = np.random.default_rng(10007 * layer_id).integers(0, bound, max_ngram, dtype=np.int64)
    return x * 2 + 1


class EngramHash:
    """Table row ids of every position from token ids alone (SPEC §4.8)."""

    def __init__(self, c: Config, token_map: np.ndarray):
        self.c = c
        self.N, self.heads = c.engram_max_ngram_size, c.engram_n_heads
        self.token_map = np.asarray(token_map, dtype=np.int64)
        self.pad = int(self.token_map[c.engram_pad_token_id])
        self.primes = engram_primes(c.engram_layer_ids, self.N, self.heads, c.engram_vocab_size)
        self.mult = [engram_multipliers(l, self.N, c.engram_compressed_vocab_size) for l in c.engram_layer_ids]
        self.flat = [np.array([p for row in lp for p in row], dtype=np.int64) for lp in self.primes]
        self.offsets = [np.concatenate([[0], np.cumsum(f)[:-1]]).astype(np.int64) for f in self.flat]
        self.rows = [int(f.sum()) for f in self.flat]

    def __call__(self, ids: np.ndarray, history: np.ndarray) -> np.ndarray:
        """ids [B, S] raw ids; history [B, h<=N-1] raw ids just before (fewer = sequence start).
        Returns int64 [B, S, n_layers, cols]."""
        c, N = self.c, self.N
        B, S = ids.shape
        allids = np.concatenate([history, ids], 1).astype(np.int64)
        h = history.shape[1]
        dead = allids == c.image_token_id if c.image_token_id >= 0 else np.zeros_like(allids, dtype=bool)
        comp = self.token_map[np.where(dead, 0, allids)]
        toks, blocked = [], np.zeros((B, S), dtype=bool)
        t = h + np.arange(S)
        for s in range(N):
            src = t - s
            blocked = blocked | (src < 0)[None, :]
            srcc = np.clip(src, 0, None)
            blocked = blocked | dead[:, srcc]
            toks.append(np.where(blocked, self.pad, comp[:, srcc]).astype(np.uint64))
        out = np.zeros((B, S, len(self.mult), c.n_engram_cols), dtype=np.int64)
        for li, m in enumerate(self.mult):
            mu = m.astype(np.uint64)
            hsh = toks[0] * mu[0]
            for n in range(2, N + 1):
                hsh = hsh ^ (toks[n - 1] * mu[n - 1])
                for j in range(self.heads):
                    k = (n - 2) * self.heads + j
                    out[:, :, li, k] = np.mod(hsh.view(np.int64), self.flat[li][k]) + self.offsets[li][k]
        return out


class Engram(nn.Module):
    def __init__(self, c: Config, rows: int):
        super().__init__()
        self.c = c
        self.embed = Emb(rows, c.engram_head_dim, "fp8row")
        self.wkv = Lin(c.n_engram_cols * c.engram_head_dim, c.hidden_size * (c.hc_mult + 1), "fp8")
        self.q_weight = nn.Parameter(torch.ones(c.hc_mult, c.hidden_size))
        self.k_weight = nn.Parameter(torch.ones(c.hc_mult, c.hidden_size))

    def forward(self, nm: Numerics, H, hash_ids, tokens):
        c = self.c
        hc, d = c.hc_mult, c.hidden_size
        table = nm.w(self.embed.weight, "fp8row")
        rows = nm.bf16(F.embedding(hash_ids, table)).flatten(-2)
        kv = nm.linear(rows, self.wkv)
        key = kv[..., :hc * d].unflatten(-1, (hc, d)).to(F32)
        value = kv[..., hc * d:].to(F32)
        w = nm.w(self.q_weight, "bf16") * nm.w(self.k_weight, "bf16")
        h = H.to(F32)
        rstd = torch.rsqrt(h.square().mean(-1) + c.rms_norm_eps) * torch.rsqrt(key.square().mean(-1) + c.rms_norm_eps)
        dot = (h * w * key).sum(-1) * rstd * float(d ** -0.5)
        gate = torch.sigmoid(torch.copysign(dot.abs().clamp_min(1e-6).sqrt(), dot))
        if c.image_token_id >= 0:
            gate = gate.masked_fill((tokens == c.image_token_id).unsqueeze(-1), 0.0)
        return nm.bf16(h + gate.unsqueeze(-1) * value.unsqueeze(-2))


# ---------------------------------------------------------------------------------------------
# Blocks, DSpark stages, the model
# ---------------------------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, c: Config, role: Role, engram_rows: int = 0):
        super().__init__()
        self.c, self.role = c, role
        d, hc = c.hidden_size, c.hc_mult
        mix = (2 + hc) * hc
        self.attn = Attention(c, role)
        self.ffn = MoE(c, role)
        self.attn_norm, self.ffn_norm = Norm(d), Norm(d)
        self.hc_attn_fn = nn.Parameter(torch.zeros(mix, hc * d))
        self.hc_ffn_fn = nn.Parameter(torch.zeros(mix, hc * d))
        self.hc_attn_base = nn.Parameter(torch.zeros(mix))
        self.hc_ffn_base = nn.Parameter(torch.zeros(mix))
        self.hc_attn_scale = nn.Parameter(torch.ones(3))
        self.hc_ffn_scale = nn.Parameter(torch.ones(3))
        if role.engram_slot >= 0:
            self.engram = Engram(c, engram_rows)

    def forward(self, ctx: Ctx, H, pre, attn_fn):
        """SPEC §4.1: single-pass mHC around attention and MoE. Returns (H, pre for the next unit)."""
        nm, c = ctx.nm, self.c
        preA, postA, combA = hc_mixes(c, H, self.hc_attn_fn, self.hc_attn_base, self.hc_attn_scale)
        x = rmsnorm(nm, hc_pre(nm, H, pre), self.attn_norm, c.rms_norm_eps)
        H1 = hc_post(nm, attn_fn(x), H, postA, combA)
        preF, postF, combF = hc_mixes(c, H1, self.hc_ffn_fn, self.hc_ffn_base, self.hc_ffn_scale)
        xf = rmsnorm(nm, hc_pre(nm, H1, preA), self.ffn_norm, c.rms_norm_eps)
        H2 = hc_post(nm, self.ffn(ctx, xf), H1, postF, combF)
        return H2, preF


class DSparkStage(Block):
    def __init__(self, c: Config, role: Role, stage: int):
        super().__init__(c, role)
        d, R, V = c.hidden_size, c.dspark_markov_rank, c.vocab_size
        if stage == 0:
            self.main_proj = Lin(d * len(c.dspark_target_layer_ids), d, "fp8")
            self.main_norm = Norm(d)
        if stage == c.n_dspark - 1:
            self.norm = Norm(d)
            self.markov_head = nn.Module()
            self.markov_head.embed = Emb(V, R, "bf16")
            self.markov_head.head = Lin(R, V, "bf16")
            self.confidence_head = nn.Module()
            self.confidence_head.proj = Lin(d + R, 1, "bf16")


class Transformer(nn.Module):
    def __init__(self, c: Config, token_map: Optional[np.ndarray] = None):
        super().__init__()
        self.c = c
        self.roles = make_roles(c)
        self.hash = EngramHash(c, token_map) if (c.engram_layer_ids and token_map is not None) else None
        if c.engram_layer_ids:
            rows = engram_primes(c.engram_layer_ids, c.engram_max_ngram_size, c.engram_n_heads, c.engram_vocab_size)
            rows = [sum(sum(r) for r in lp) for lp in rows]
            if list(rows) != list(c.engram_num_embeddings):
                raise ValueError(f"engram_num_embeddings {c.engram_num_embeddings} != prime sums {rows}")
        L = c.num_hidden_layers
        self.embed = Emb(c.vocab_size, c.hidden_size, "bf16")
        self.layers = nn.ModuleList([
            Block(c, self.roles[l], c.engram_num_embeddings[self.roles[l].engram_slot] if self.roles[l].engram_slot >= 0 else 0)
            for l in range(L)])
        self.norm = Norm(c.hidden_size)
        self.head = Lin(c.hidden_size, c.vocab_size, "bf16")
        self.mtp = nn.ModuleList([DSparkStage(c, self.roles[L + s], s) for s in range(c.n_dspark)])
        self.sparse_moe = False

    # ---- initialization for training ----
    def init_weights(self, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        c = self.c
        L = c.num_hidden_layers
        hc = c.hc_mult

        def normal_(p, std):
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)

        for name, p in self.named_parameters():
            leaf = name.split(".")[-1]
            if name.endswith("norm.weight") or leaf in ("q_weight", "k_weight"):
                nn.init.ones_(p)
            elif leaf == "attn_sink" or leaf == "bias":
                nn.init.zeros_(p)
            elif leaf.endswith("_fn"):
                normal_(p, (p.shape[1]) ** -0.5)
            elif leaf.endswith("_scale"):
                with torch.no_grad():
                    p.fill_(0.1)
            elif leaf.endswith("_base"):
                with torch.no_grad():
                    p.zero_()
                    p[:hc] = math.log(1.0 / (hc - 1))  # pre ≈ 1/hc per stream
                    p[2 * hc:].view(hc, hc).diagonal().fill_(2.0)  # comb starts near identity
            elif name == "embed.weight" or name.endswith("markov_head.embed.weight"):
                normal_(p, 1.0)
            elif name.endswith("engram.embed.weight"):
                normal_(p, 1.0)
            elif "confidence_head" in name or name.endswith("markov_head.head.weight"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = p.shape[1] ** -0.5
                if name.endswith("wo_b.weight") or name.endswith("w2.weight"):
                    std /= math.sqrt(2 * L)
                if name.endswith("compressor.wgate.weight"):
                    std *= 0.1
                if name.endswith("engram.wkv.weight"):
                    std *= 0.5
                normal_(p, std)
        return self

    # ---- forward ----
    def new_state(self, batch: int) -> State:
        return State(self.c, batch)

    def engram_ids(self, ids: torch.Tensor, state: Optional[State]) -> Optional[torch.Tensor]:
        if self.hash is None:
            return None
        hist = state.history if state is not None else np.zeros((ids.shape[0], 0), dtype=np.int64)
        out = self.hash(ids.detach().cpu().numpy().astype(np.int64), hist)
        return torch.from_numpy(out).to(ids.device)

    def forward(self, ids: torch.Tensor, nm: Numerics, state: Optional[State] = None, hooks: Optional[Hooks] = None,
                index_mode: str = "topk", want_kl: bool = False, logits: str = "all", hash_ids=None,
                q_chunk: int = 0, upto_layer: Optional[int] = None):
        """ids [B, S] at positions state.pos.. (0 without a state). Returns a dict with logits
        ([B,S,V] FP32, or [B,1,V] for 'last', None for 'none'), taps [B,S,nt·d], kl, balance."""
        c = self.c
        B, S = ids.shape
        p0 = state.pos if state is not None else 0
        ctx = Ctx(self, nm, p0, S, state, hooks, index_mode, want_kl)
        ctx.q_chunk, ctx.sparse_moe, ctx.balance = q_chunk, self.sparse_moe, []
        if self.hash is not None and hash_ids is None:
            hash_ids = self.engram_ids(ids, state)
        if hooks and hash_ids is not None:
            hooks.engram_ids(p0, hash_ids)
        e = nm.w(self.embed.weight, "bf16")
        H = F.embedding(ids, e).unsqueeze(-2).expand(B, S, c.hc_mult, c.hidden_size).to(F32)
        pre = torch.zeros(B, S, c.hc_mult, device=ids.device, dtype=F32)
        pre[..., 0] = 1.0
        taps = []
        for l, layer in enumerate(self.layers):
            if upto_layer is not None and l >= upto_layer:
                break
            role = self.roles[l]
            if hooks:
                H, pre = hooks.unit_input(l, p0, H, pre)
            if role.engram_slot >= 0:
                H = layer.engram(nm, H, hash_ids[:, :, role.engram_slot], ids)
            if role.tap_slot >= 0:
                taps.append(nm.bf16(H.mean(-2)))
            H, pre = layer(ctx, H, pre, lambda x, layer=layer: layer.attn(ctx, x))
            if hooks:
                hooks.unit_output(l, p0, H, pre)
        out = {"kl": ctx.kl, "balance": ctx.balance, "moe_load": ctx.moe_load, "H": H, "pre": pre}
        out["taps"] = torch.cat(taps, -1) if taps else None
        if upto_layer is not None:
            return out
        if logits != "none":
            Hs, ps = (H[:, -1:], pre[:, -1:]) if logits == "last" else (H, pre)
            out["logits"] = self.head_logits(nm, Hs, ps)
        if state is not None:
            if c.n_dspark and out["taps"] is not None:
                t = hooks.taps(p0, out["taps"]) if hooks else out["taps"]
                kvs = self.dspark_ring_entries(nm, t, p0)
                for s in range(c.n_dspark):
                    prev = state.dspark_kv[s]
                    state.dspark_kv[s] = kvs[s] if prev is None else torch.cat([prev, kvs[s]], 1)
            state.pos += S
            keep = max(c.engram_max_ngram_size - 1, 0)
            hist = np.concatenate([state.history, ids.detach().cpu().numpy().astype(np.int64)], 1)
            state.history = hist[:, hist.shape[1] - min(keep, hist.shape[1]):]
        return out

    def head_logits(self, nm: Numerics, H, pre):
        """Final collapse, norm and FP32 head."""
        x = rmsnorm(nm, hc_pre(nm, H, pre), self.norm, self.c.rms_norm_eps)
        return nm.mm(x.to(F32), nm.w(self.head.weight, "bf16").t())  # FP32 in exact mode

    # ---- DSpark (SPEC §4.9) ----
    def dspark_ring_entries(self, nm: Numerics, taps, p0: int):
        """Each stage's window entries for main positions p0.. from the taps [B, S, nt·d]."""
        c = self.c
        st0 = self.mtp[0]
        mx = rmsnorm(nm, nm.linear(taps, st0.main_proj), st0.main_norm, c.rms_norm_eps)
        pos = p0 + torch.arange(taps.shape[1], device=taps.device)
        out = []
        for stage in self.mtp:
            cos, sin = stage.attn.rope.cs(pos)
            out.append(stage.attn._kv(nm, mx, cos, sin))
        return out

    def dspark_blocks(self, nm: Numerics, rings, bidx, pidx, y, markov_ids=None, ctx_kwargs=None):
        """Draft blocks. rings: per stage [B, Tm, D]; bidx/pidx/y [NB]: sequence, last main position
        p and the main model's token for p+1. markov_ids [NB, blk] (teacher forcing: the tokens
        at p+1..p+blk) or None for greedy drafting. Returns (ids [NB, blk+1], logits [NB, blk, V],
        confidence logits [NB, blk])."""
        c = self.c
        blk, hc, d = c.dspark_block_size, c.hc_mult, c.hidden_size
        NB = y.shape[0]
        ids = torch.full((NB, blk), c.dspark_noise_token_id, dtype=torch.long, device=y.device)
        ids[:, 0] = y
        H = F.embedding(ids, nm.w(self.embed.weight, "bf16")).unsqueeze(-2).expand(NB, blk, hc, d).to(F32)
        pre = torch.zeros(NB, blk, hc, device=y.device, dtype=F32)
        pre[..., 0] = 1.0
        ctx = Ctx(self, nm, 0, blk, None, None, "topk", False)
        ctx.q_chunk, ctx.sparse_moe, ctx.balance = 0, self.sparse_moe, []
        for s, stage in enumerate(self.mtp):
            H, pre = stage(ctx, H, pre, lambda x, stage=stage, s=s: stage.attn.draft(nm, x, rings[s], bidx, pidx))
        last = self.mtp[-1]
        xb = hc_pre(nm, H, pre)
        xn = rmsnorm(nm, xb, last.norm, c.rms_norm_eps)
        logits = xn.to(F32) @ nm.w(self.head.weight, "bf16").t()
        memb = nm.w(last.markov_head.embed.weight, "bf16")
        mhead = nm.w(last.markov_head.head.weight, "bf16")
        out_ids = torch.zeros(NB, blk + 1, dtype=torch.long, device=y.device)
        out_ids[:, 0] = y
        if markov_ids is not None:
            e = F.embedding(markov_ids, memb)
            logits = logits + e.to(F32) @ mhead.t()
            out_ids[:, 1:] = logits.argmax(-1)
        else:
            es, rows = [], []
            for i in range(blk):
                ei = F.embedding(out_ids[:, i], memb)
                li = logits[:, i] + ei.to(F32) @ mhead.t()
                rows.append(li)
                es.append(ei)
                out_ids[:, i + 1] = li.argmax(-1)
            logits, e = torch.stack(rows, 1), torch.stack(es, 1)
        conf = (torch.cat([xb, e], -1).to(F32) @ nm.w(last.confidence_head.proj.weight, "bf16").t()).squeeze(-1)
        return out_ids, logits, conf, ctx

    def draft(self, nm: Numerics, state: State, y: torch.Tensor):
        """Greedy draft after the main model predicted y [B] for position state.pos."""
        B = y.shape[0]
        bidx = torch.arange(B, device=y.device)
        pidx = torch.full((B,), state.pos - 1, dtype=torch.long, device=y.device)
        ids, logits, conf, _ = self.dspark_blocks(nm, state.dspark_kv, bidx, pidx, y)
        return ids, logits, conf

    # ---- loading ----
    @classmethod
    def from_dir(cls, path: str, device="cpu"):
        cfg = Config.from_json(os.path.join(path, "config.json"))
        tensors = load_checkpoint_tensors(path)
        tm = None
        tmp = os.path.join(path, "engram_token_map.safetensors")
        if os.path.exists(tmp):
            from safetensors.torch import load_file
            tm = load_file(tmp)["token_map"].numpy().astype(np.int64)
        elif cfg.engram_layer_ids and os.path.exists(os.path.join(path, "tokenizer.json")):
            from tokenizers import Tokenizer
            tm, _ = build_token_map(Tokenizer.from_file(os.path.join(path, "tokenizer.json")))
            tm = np.asarray(tm, dtype=np.int64)
        m = cls(cfg, tm)
        missing, unexpected = m.load_state_dict(tensors, strict=False)
        if missing or unexpected:
            raise ValueError(f"checkpoint mismatch: missing {missing[:10]} unexpected {unexpected[:10]}")
        return m.to(device)


# ---------------------------------------------------------------------------------------------
# Checkpoint reading (SPEC §2)
# ---------------------------------------------------------------------------------------------


def _ue8m0(t: torch.Tensor) -> torch.Tensor:
    e = t.view(torch.uint8).to(torch.int32)
    return torch.ldexp(torch.ones_like(e, dtype=F32), e - 127)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """I8 [out, in/2] -> E2M1 values FP32 [out, in]: element 2b low nibble, 2b+1 high nibble."""
    b = packed.view(torch.uint8).to(torch.int32)
    nib = torch.stack([b & 0xF, b >> 4], -1).flatten(-2)
    lut = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=F32)
    return lut[nib.long()]


def load_checkpoint_tensors(path: str) -> dict:
    """Every tensor of a model directory, dequantized to FP32 under its parameter name."""
    from safetensors import safe_open
    files = []
    idx = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    raw = {}
    for fn in files:
        with safe_open(os.path.join(path, fn), "pt") as f:
            for k in f.keys():
                raw[k] = f.get_tensor(k)
    out = {}
    for k, t in raw.items():
        if k.endswith(".scale"):
            continue
        if k.endswith(".weight") and k[:-7] + ".scale" in raw:
            s = _ue8m0(raw[k[:-7] + ".scale"])
            if t.dtype == torch.int8 or t.dtype == torch.uint8:  # FP4, one scale per 32 inputs
                v = unpack_fp4(t)
                out[k] = v * s.repeat_interleave(v.shape[1] // s.shape[1], 1)
            else:
                v = t.to(F32)
                bo = 1 if k.endswith("engram.embed.weight") else 32  # Engram table: 1 x 32 blocks
                ss = s.repeat_interleave(bo, 0)[: v.shape[0]].repeat_interleave(32, 1)[:, : v.shape[1]]
                out[k] = v * ss
        else:
            out[k] = t.to(F32)
    return out


# ---------------------------------------------------------------------------------------------
# Engram token map from a tokenizer (SPEC §4.8)
# ---------------------------------------------------------------------------------------------


def build_token_map(tokenizer):
    """token id -> compressed id, and the compressed vocabulary size. Tokens whose decoded text
    normalizes alike share an id (NFKC, NFD, strip accents, lowercase, runs of space/tab/CR/LF to
    one space, strip, a text that is exactly one space kept as is); a token that decodes to an
    incomplete UTF-8 sequence is keyed by its raw token string; ids in first-seen order.
    `tokenizer` is a tokenizers.Tokenizer."""
    from tokenizers import Regex, normalizers

    keep_space = "\ue000"  # private-use placeholder so Strip leaves a lone space alone
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "), normalizers.Replace(Regex(r"^ $"), keep_space),
        normalizers.Strip(), normalizers.Replace(keep_space, " "),
    ])
    n = tokenizer.get_vocab_size(with_added_tokens=True)
    keys, table = {}, []
    for i in range(n):
        text = tokenizer.decode([i], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tokenizer.id_to_token(i)
        else:
            key = norm.normalize_str(text) or text
        if key not in keys:
            keys[key] = len(keys)
        table.append(keys[key])
    return table, len(keys)


# ---------------------------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------------------------


def engram_rows_for(c: Config):
    pr = engram_primes(c.engram_layer_ids, c.engram_max_ngram_size, c.engram_n_heads, c.engram_vocab_size)
    return [sum(sum(r) for r in lp) for lp in pr]


def small_config(vocab: int, compressed_vocab: int, special: dict, size: str = "small") -> Config:
    """Training configs with the release's layer pattern scaled down to 8 layers: 0-1 window only,
    2-3 ratio 2 (Full 2, Reuse 3), 4-7 ratio 1 (Full + candidate source 4, Reuse 5, Reindex 6,
    Reuse 7); Engram at 1 and 3; DSpark taps 5, 6, 7; 3 DSpark stages."""
    if size == "small":
        c = Config(vocab_size=vocab, hidden_size=256, moe_intermediate_size=192, num_hidden_layers=8,
                   num_attention_heads=8, head_dim=64, qk_rope_head_dim=16, q_lora_rank=128, o_lora_rank=64,
                   o_groups=4, sliding_window=128, n_routed_experts=16, num_experts_per_tok=2,
                   index_n_heads=4, index_head_dim=32, index_topk=64, candidate_topk_blocks=16,
                   candidate_block_size=8, engram_max_ngram_size=3, engram_n_heads=2, engram_head_dim=32,
                   engram_vocab_size=12000, dspark_markov_rank=32, dspark_n_routed_experts=8,
                   dspark_num_experts_per_tok=2, max_position_embeddings=4096,
                   rope_scaling={"rope_type": "yarn", "factor": 4, "beta_fast": 32, "beta_slow": 1,
                                 "original_max_position_embeddings": 1024})
    elif size == "toy":
        c = Config(vocab_size=vocab, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=8,
                   num_attention_heads=2, head_dim=32, qk_rope_head_dim=8, q_lora_rank=32, o_lora_rank=32,
                   o_groups=2, sliding_window=16, n_routed_experts=4, num_experts_per_tok=2,
                   index_n_heads=2, index_head_dim=32, index_topk=8, candidate_topk_blocks=3,
                   candidate_block_size=4, engram_max_ngram_size=3, engram_n_heads=2, engram_head_dim=32,
                   engram_vocab_size=500, dspark_markov_rank=16, dspark_n_routed_experts=4,
                   dspark_num_experts_per_tok=2, max_position_embeddings=4096,
                   rope_scaling={"rope_type": "yarn", "factor": 4, "beta_fast": 32, "beta_slow": 1,
                                 "original_max_position_embeddings": 64})
    else:
        raise ValueError(size)
    c.swiglu_limit, c.rms_norm_eps, c.routed_scaling_factor = 10.0, 1e-20, 1.5
    c.compress_ratios = [0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0]
    c.compress_rope_theta = 40000.0
    c.kv_source_layer_ids, c.index_source_layer_ids = [2, 4], [2, 4, 6]
    c.candidate_source_layer_id = 4
    c.engram_layer_ids = [1, 3]
    c.engram_compressed_vocab_size = compressed_vocab
    c.engram_pad_token_id = special["pad"]
    c.engram_num_embeddings = engram_rows_for(c)
    c.num_nextn_predict_layers, c.dspark_block_size = 3, 5
    c.dspark_noise_token_id = special["system"]
    c.dspark_target_layer_ids = [5, 6, 7]
    c.bos_token_id, c.eos_token_id, c.pad_token_id = special["bos"], special["eos"], special["pad"]
    c.image_token_id = special["image"]
    return c
