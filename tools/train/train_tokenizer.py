#!/usr/bin/env python3
"""Byte-level BPE tokenizer for the training corpus, with the special tokens of SPEC §7, and the
Engram token map built from it (SPEC §4.8).

Ids: 0 <｜begin▁of▁sentence｜>, 1 <｜end▁of▁sentence｜>, 2 <｜▁pad▁｜> (as released); the other SPEC §7
tokens (<｜System｜>, <｜User｜>, <｜Assistant｜>, <think>, </think>, ｜DSML｜, <｜deepseek_image｜>) are
appended after the learned vocabulary, as the release appends its added tokens.

Writes DIR/tokenizer.json, DIR/engram_token_map.safetensors (token_map I32 [vocab]) and
DIR/tokenizer_meta.json (vocab size, compressed vocab size, special ids).

Usage: python3 tools/train/train_tokenizer.py [--out DIR] [--vocab 12288]
"""

import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import DEFAULT_OUT, iter_texts, special_ids  # noqa: E402
from model import build_token_map  # noqa: E402

LEADING = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"]
# (content, special): special tokens are dropped by decode(skip_special_tokens=True); the thinking
# and DSML markers are ordinary added tokens so that they stay visible in decoded text.
APPENDED = [("<｜System｜>", True), ("<｜User｜>", True), ("<｜Assistant｜>", True), ("<think>", False),
            ("</think>", False), ("｜DSML｜", False), ("<｜deepseek_image｜>", True)]


def train(out: str, vocab: int, min_frequency: int = 2) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(APPENDED), min_frequency=min_frequency,
                                  special_tokens=LEADING, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(iter_texts(os.path.join(out, "docs_train.jsonl")), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=s, normalized=False) for t, s in APPENDED])
    for i, t in enumerate(LEADING):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    return tok


def write_engram_map(tok: Tokenizer, out: str) -> int:
    table, n = build_token_map(tok)
    save_file({"token_map": torch.tensor(table, dtype=torch.int32)}, os.path.join(out, "engram_token_map.safetensors"))
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--vocab", type=int, default=12288)
    a = ap.parse_args()
    tok = train(a.out, a.vocab)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    tok = Tokenizer.from_file(os.path.join(a.out, "tokenizer.json"))
    n = write_engram_map(tok, a.out)
    meta = {"vocab_size": tok.get_vocab_size(), "engram_compressed_vocab_size": n, "special": special_ids(tok)}
    with open(os.path.join(a.out, "tokenizer_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
