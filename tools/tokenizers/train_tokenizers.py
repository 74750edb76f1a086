#!/usr/bin/env python3
"""Train the small byte-level BPE tokenizers used by tests/unit/test_tokenizer.cpp.

Writes tests/data/tokenizers/{gpt2,llama3,dsv3}/tokenizer.json, each trained with the
`tokenizers` package on text found on this machine (Python stdlib sources, the CJK sample
files of the stdlib test suite, /usr/share/doc, and the zh/ja/ko Rust-by-example pages when
rustup's docs are installed):

  gpt2   GPT-2 style: ByteLevel(use_regex=True), merges in the legacy "a b" string form.
  llama3 Llama-3 / cl100k style: Split(regex) + ByteLevel(use_regex=False), ignore_merges.
  dsv3   DeepSeek-V3 style: Sequence of three Split regexes + ByteLevel, DeepSeek special
         tokens (<｜begin▁of▁sentence｜> ..., <think> as a non-special added token).

Usage: python3 tools/tokenizers/train_tokenizers.py [--out tests/data/tokenizers]
The corpus is a deterministic selection (sorted paths, fixed byte budget), so rerunning on the
same machine reproduces the files.
"""
import argparse
import glob
import gzip
import html
import json
import os
import re
import sys
import sysconfig

from tokenizers import Tokenizer, AddedToken, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Regex

GPT2_VOCAB = 4096
LLAMA3_VOCAB = 6000
DSV3_VOCAB = 8000

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek-V3's tokenizer.json pre_tokenizer (note the raw CR/LF characters in the classes).
DSV3_PATTERNS = [
    r"\p{N}{1,3}",
    "[一-龥\u3040-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]


def read_text(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read(200_000)
        else:
            with open(path, "rb") as f:
                data = f.read(200_000)
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError):
        return None


def strip_html(text):
    text = re.sub(r"(?s)<(script|style)[^>]*>.*?</\1>", " ", text)
    text = re.sub(r"<[^>]+>", " ", text)
    return html.unescape(text)


def corpus():
    """Yields documents; the same files in the same order on every run."""
    stdlib = sysconfig.get_paths()["stdlib"]
    budget = {"py": 12_000_000, "doc": 4_000_000, "cjk": 6_000_000}
    used = {k: 0 for k in budget}

    def take(kind, text):
        if text is None or used[kind] >= budget[kind]:
            return None
        used[kind] += len(text.encode("utf-8"))
        return text

    for p in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
        if "site-packages" in p:
            continue
        t = take("py", read_text(p))
        if t:
            yield t
    for p in sorted(glob.glob(os.path.join(stdlib, "test", "cjkencodings", "*-utf8.txt"))):
        t = take("cjk", read_text(p))
        if t:
            yield t
    for lang in ("zh", "ja", "ko"):
        pat = os.path.expanduser(
            f"~/.rustup/toolchains/*/share/doc/rust/html/rust-by-example/{lang}/**/*.html")
        for p in sorted(glob.glob(pat, recursive=True))[:400]:
            t = read_text(p)
            t = take("cjk", strip_html(t) if t else None)
            if t:
                yield t
    for p in sorted(glob.glob("/usr/share/doc/**/*", recursive=True)):
        if os.path.isfile(p) and (p.endswith((".txt", ".md", ".gz")) or "copyright" in p):
            t = take("doc", read_text(p))
            if t:
                yield t
    print(f"corpus bytes: {used}", file=sys.stderr)


def finish(tok, path, legacy_merges=False, ignore_merges=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.loads(tok.to_str())
    if legacy_merges:
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                   for m in data["model"]["merges"]]
    if ignore_merges is not None:
        data["model"]["ignore_merges"] = ignore_merges
    text = json.dumps(data, ensure_ascii=False, indent=1)
    Tokenizer.from_str(text)  # must load back
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"{path}: {len(text.encode('utf-8'))} bytes, vocab {tok.get_vocab_size()}", file=sys.stderr)


def train(tok, vocab, special):
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, min_frequency=2, special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)


def gpt2(out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    train(tok, GPT2_VOCAB, ["<|endoftext|>"])
    finish(tok, os.path.join(out, "gpt2", "tokenizer.json"), legacy_merges=True)


def llama3(out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train(tok, LLAMA3_VOCAB, ["<|begin_of_text|>", "<|end_of_text|>"])
    tok.add_special_tokens(["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"] +
                           [f"<|reserved_special_token_{i}|>" for i in range(4)])
    finish(tok, os.path.join(out, "llama3", "tokenizer.json"), ignore_merges=True)


def dsv3(out):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Sequence([])
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False) for p in DSV3_PATTERNS] +
        [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    train(tok, DSV3_VOCAB, ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"])
    tok.add_special_tokens([f"<｜place▁holder▁no▁{i}｜>" for i in range(3)] + [
        "<｜System｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "｜DSML｜",
        "<｜deepseek_image｜>"])
    # As in DeepSeek-R1/V3: the thinking tags are plain (non-special, normalized) added tokens.
    tok.add_tokens([AddedToken("<think>", special=False, normalized=True),
                    AddedToken("</think>", special=False, normalized=True),
                    AddedToken("<tool_result>", special=False, normalized=False),
                    AddedToken("</tool_result>", special=False, normalized=False)])
    finish(tok, os.path.join(out, "dsv3", "tokenizer.json"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                  "tests", "data", "tokenizers"))
    args = ap.parse_args()
    out = os.path.normpath(args.out)
    gpt2(out)
    llama3(out)
    dsv3(out)


if __name__ == "__main__":
    main()
