"""Perplexity of a UTF-8 text file under an exported model directory, with the PyTorch implementation
in exact mode: the same quantity as `dsv41 perplexity` ([BOS] + tokens, consecutive windows of at most
--context tokens, each one exact prefill predicting its tokens after the first)."""
import argparse
import math
import os
import sys

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(__file__))
from model import Numerics, Transformer  # noqa: E402


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    text = open(a.text, encoding="utf-8").read()
    ids = [tok.token_to_id("<｜begin▁of▁sentence｜>")] + tok.encode(text, add_special_tokens=False).ids
    model = Transformer.from_dir(a.model).eval()
    nm = Numerics.exact()
    nll, count = 0.0, 0
    for start in range(0, len(ids) - 1, a.context):
        w = ids[start:start + a.context]
        if len(w) < 2:
            break
        x = torch.tensor(w, dtype=torch.long).view(1, -1)
        st = model.new_state(1)
        logits = model(x, nm, st, logits="all")["logits"][0].double()
        nll += F.cross_entropy(logits[:-1], x[0, 1:], reduction="sum").item()
        count += len(w) - 1
    print(f"tokens {len(ids)}  predicted {count}  windows of {a.context}  mean NLL {nll / count:.6f} nats  "
          f"perplexity {math.exp(nll / count):.4f}")


if __name__ == "__main__":
    main()
