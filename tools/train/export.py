#!/usr/bin/env python3
"""Writes a model directory in the released format (SPEC §2) from a tools/train checkpoint.

- config.json: the released schema (top level, quantization_config, text_config);
- model.safetensors: FP8 E4M3 weights + F8_E8M0 (UE8M0) scales per 32x32 block, routed experts as
  FP4 E2M1 packed two per byte (element 2b in the low nibble) with a UE8M0 scale per 32 inputs,
  the Engram tables FP8 with one scale per 32 channels of a row, BF16 and F32 tensors as released;
  scales are the smallest powers of two that fit the block, values rounded to nearest even and
  saturated;
- engram_token_map.safetensors: token_map I32 [vocab];
- tokenizer.json when one is given.

Usage: python3 tools/train/export.py CHECKPOINT.pt OUT_DIR [--tokenizer tokenizer.json]
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import (E2M1_VALUES, Config, Emb, Gate, Lin, Norm, Transformer, quant_fp4_rows,  # noqa: E402
                   quant_fp8_blocks)

F32_LEAVES = ("attn_sink", "hc_attn_fn", "hc_ffn_fn", "hc_attn_base", "hc_ffn_base", "hc_attn_scale",
              "hc_ffn_scale", "bias", "bias_vl")


def storage_kinds(model: Transformer) -> dict:
    """parameter name -> fp8 | fp4 | fp8row | bf16 | f32 (SPEC §2)."""
    kinds = {}
    for mname, mod in model.named_modules():
        pre = mname + "." if mname else ""
        if isinstance(mod, (Lin, Emb)):
            kinds[pre + "weight"] = mod.kind
        elif isinstance(mod, (Norm, Gate)):
            kinds[pre + "weight"] = "bf16"
    for name, _ in model.named_parameters():
        leaf = name.split(".")[-1]
        if name not in kinds:
            kinds[name] = "f32" if leaf in F32_LEAVES else "bf16"  # q_weight / k_weight: BF16
    return kinds


def _e8m0(exps: torch.Tensor) -> torch.Tensor:
    return exps.to(torch.uint8).view(torch.float8_e8m0fnu)


def pack_fp4(q: torch.Tensor) -> torch.Tensor:
    """E2M1 values [out, in] -> I8 [out, in/2], element 2b in the low nibble."""
    grid = torch.tensor(E2M1_VALUES, device=q.device)
    idx = torch.searchsorted(grid, q.abs().contiguous())
    if not torch.equal(grid[idx.clamp(max=7)], q.abs()):
        raise ValueError("value off the E2M1 grid")
    code = idx.to(torch.int32) | ((q < 0).to(torch.int32) << 3)
    byte = code[:, 0::2] | (code[:, 1::2] << 4)
    return byte.to(torch.uint8).view(torch.int8)


def export_tensors(model: Transformer) -> dict:
    out = {}
    kinds = storage_kinds(model)
    for name, p in model.state_dict().items():
        p = p.detach().float()  # quantized on the model's device, stored from the CPU
        kind = kinds[name]
        base = name[: -len(".weight")] if name.endswith(".weight") else name
        if kind == "fp8":
            codes, exps, _ = quant_fp8_blocks(p)
            out[name] = codes.to(torch.float8_e4m3fn)
            out[base + ".scale"] = _e8m0(exps)
        elif kind == "fp8row":
            codes, exps, _ = quant_fp8_blocks(p, 1, 32)
            out[name] = codes.to(torch.float8_e4m3fn)
            out[base + ".scale"] = _e8m0(exps)
        elif kind == "fp4":
            q, exps, _ = quant_fp4_rows(p)
            out[name] = pack_fp4(q)
            out[base + ".scale"] = _e8m0(exps)
        elif kind == "bf16":
            out[name] = p.to(torch.bfloat16)
        else:
            out[name] = p.to(torch.float32)
    return {k: v.cpu().contiguous() for k, v in out.items()}


def export_dir(model: Transformer, out_dir: str, token_map=None, tokenizer_json: str = None):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.c.to_json(), f, indent=2)
    save_file(export_tensors(model), os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    if token_map is not None:
        tm = torch.as_tensor(np.asarray(token_map), dtype=torch.int32)
        save_file({"token_map": tm}, os.path.join(out_dir, "engram_token_map.safetensors"))
    if tokenizer_json:
        shutil.copyfile(tokenizer_json, os.path.join(out_dir, "tokenizer.json"))
    return os.path.getsize(os.path.join(out_dir, "model.safetensors"))


def load_training_checkpoint(path: str):
    """A train.py checkpoint -> (model with the weights, token map)."""
    ck = torch.load(path, map_location="cpu", weights_only=False)
    cfg = Config.from_json(ck["config"])
    tm = np.asarray(ck["token_map"], dtype=np.int64) if ck.get("token_map") is not None else None
    model = Transformer(cfg, tm)
    model.load_state_dict(ck["model"])
    return model, tm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", help="train.py checkpoint (.pt) or a model directory to re-export")
    ap.add_argument("out_dir")
    ap.add_argument("--tokenizer", default=None, help="tokenizer.json to copy into the directory")
    a = ap.parse_args()
    if os.path.isdir(a.checkpoint):
        model = Transformer.from_dir(a.checkpoint)
        tm = model.hash.token_map if model.hash is not None else None
    else:
        model, tm = load_training_checkpoint(a.checkpoint)
    tok = a.tokenizer
    if tok is None and not os.path.isdir(a.checkpoint):
        cand = os.path.join(os.path.dirname(os.path.abspath(a.checkpoint)), "tokenizer.json")
        tok = cand if os.path.exists(cand) else None
    size = export_dir(model, a.out_dir, tm, tok)
    print(f"wrote {a.out_dir}: model.safetensors {size / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
