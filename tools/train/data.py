#!/usr/bin/env python3
"""Training corpus from freely redistributable text on this machine, a deterministic held-out
split, and token streams for train.py.

Sources
- The Python standard library sources (``*.py`` under the interpreter's stdlib directory, without
  site-packages): PSF License 2.0.
- Debian package documentation (README*, NEWS*, changelog*, gzip-decompressed; never the
  ``copyright`` files themselves) of packages whose ``copyright`` file is machine-readable (DEP-5)
  and lists only licenses from FREE_LICENSES; the licenses of every used package are recorded.

Split: a document is held out when the first 8 hex digits of sha256(its source id) mod 1000 are
below 1000·held_out (default 3%): stable under any change to the rest of the corpus.

Commands
  python3 tools/train/data.py collect  [--out DIR]   # DIR/docs_{train,val}.jsonl + manifest.json
  python3 tools/train/data.py tokenize [--out DIR]   # DIR/{train,val}.bin (uint16 ids), needs DIR/tokenizer.json
Each document is encoded as BOS + text + EOS; the .bin files are the documents concatenated.
"""

import argparse
import gzip
import hashlib
import json
import os
import re
import sys
import sysconfig

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "work")

FREE_LICENSES = re.compile(
    r"^(GPL|LGPL|AGPL|BSD|Expat|MIT|X11|Apache|ISC|Zlib|zlib|public-domain|Public-Domain|PD|Artistic|PSF|Python|"
    r"MPL|CC0|GFDL-NIV|GFDL-1\.\d\+?-no-invariant|Unicode|BSL|Boost|curl|OpenSSL|SSLeay|Perl|FSFAP|FSFUL|FSFULLR|"
    r"permissive|other-permissive|NTP|Unlicense|WTFPL)", re.I)
DOC_NAME = re.compile(r"^(README|NEWS|changelog)([.-].*)?$", re.I)


def stdlib_dir() -> str:
    return sysconfig.get_paths()["stdlib"]


def python_docs(max_bytes: int):
    root = stdlib_dir()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("site-packages", "__pycache__"))
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            p = os.path.join(dirpath, fn)
            if os.path.getsize(p) > max_bytes:
                continue
            try:
                with open(p, encoding="utf-8") as f:
                    text = f.read()
            except (UnicodeDecodeError, OSError):
                continue
            yield "python-stdlib/" + os.path.relpath(p, root), text, "PSF-2.0"


def debian_licenses(pkg_dir: str):
    """The License: names of a DEP-5 copyright file, or None when not machine-readable."""
    p = os.path.join(pkg_dir, "copyright")
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    if not re.search(r"^Format:\s*\S*(dep5|copyright-format)", text, re.M | re.I):
        return None
    names = set()
    for m in re.finditer(r"^License:\s*(.+)$", text, re.M):
        for part in re.split(r"\s+(?:or|and)\s+|,\s*", m.group(1).strip()):
            part = part.strip().strip("()")
            if part:
                names.add(part)
    return names


def debian_docs(max_bytes: int, total_bytes: int):
    root = "/usr/share/doc"
    if not os.path.isdir(root):
        return
    used = 0
    for pkg in sorted(os.listdir(root)):
        d = os.path.join(root, pkg)
        if not os.path.isdir(d) or os.path.islink(d):
            continue
        lic = debian_licenses(d)
        if not lic or not all(FREE_LICENSES.match(x) for x in lic):
            continue
        for fn in sorted(os.listdir(d)):
            p = os.path.join(d, fn)
            if not os.path.isfile(p) or os.path.islink(p) or not DOC_NAME.match(fn) or fn.lower().startswith("copyright"):
                continue
            try:
                if fn.endswith(".gz"):
                    with gzip.open(p, "rb") as f:
                        raw = f.read(max_bytes + 1)
                else:
                    with open(p, "rb") as f:
                        raw = f.read(max_bytes + 1)
                text = raw[:max_bytes].decode("utf-8")
            except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
                continue
            if len(raw) > max_bytes:  # cut at a line end
                text = text[: text.rfind("\n") + 1]
            if not text.strip():
                continue
            used += len(text.encode())
            if used > total_bytes:
                return
            yield f"debian-doc/{pkg}/{fn}", text, "Debian package " + pkg + ": " + " | ".join(sorted(lic))


def is_held_out(source_id: str, share: float) -> bool:
    return int(hashlib.sha256(source_id.encode()).hexdigest()[:8], 16) % 1000 < int(round(1000 * share))


def collect(out: str, held_out: float, max_file: int, debian_total: int):
    os.makedirs(out, exist_ok=True)
    counts = {"train": [0, 0], "val": [0, 0]}
    licenses = {}
    with open(os.path.join(out, "docs_train.jsonl"), "w") as ftr, open(os.path.join(out, "docs_val.jsonl"), "w") as fva:
        for gen in (python_docs(max_file), debian_docs(max_file, debian_total)):
            for sid, text, lic in gen:
                split = "val" if is_held_out(sid, held_out) else "train"
                (fva if split == "val" else ftr).write(json.dumps({"id": sid, "text": text}) + "\n")
                counts[split][0] += 1
                counts[split][1] += len(text.encode())
                licenses.setdefault(lic, 0)
                licenses[lic] += 1
    manifest = {
        "sources": {"python-stdlib": stdlib_dir(), "debian-doc": "/usr/share/doc (README*, NEWS*, changelog*)"},
        "held_out_share": held_out, "split_rule": "sha256(id)[:8] mod 1000 < 1000*share",
        "documents": {k: v[0] for k, v in counts.items()}, "bytes": {k: v[1] for k, v in counts.items()},
        "licenses": licenses,
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"collected train {counts['train'][0]} docs / {counts['train'][1] / 2**20:.1f} MiB, "
          f"val {counts['val'][0]} docs / {counts['val'][1] / 2**20:.1f} MiB -> {out}")


def iter_texts(path: str):
    with open(path) as f:
        for line in f:
            yield json.loads(line)["text"]


def special_ids(tok) -> dict:
    """The ids of the SPEC §7 special tokens, read from the tokenizer."""
    names = {"bos": "<｜begin▁of▁sentence｜>", "eos": "<｜end▁of▁sentence｜>", "pad": "<｜▁pad▁｜>",
             "system": "<｜System｜>", "user": "<｜User｜>", "assistant": "<｜Assistant｜>", "think": "<think>",
             "end_think": "</think>", "dsml": "｜DSML｜", "image": "<｜deepseek_image｜>"}
    out = {}
    for k, v in names.items():
        i = tok.token_to_id(v)
        if i is None:
            raise ValueError(f"tokenizer lacks {v}")
        out[k] = i
    return out


def tokenize(out: str, batch: int = 256):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    sp = special_ids(tok)
    if tok.get_vocab_size() > 65535:
        raise ValueError("uint16 streams need a vocabulary below 65536")
    for split in ("train", "val"):
        ids, docs, buf = [], 0, []

        def flush():
            for enc in tok.encode_batch(buf, add_special_tokens=False):
                ids.append(np.array([sp["bos"]] + enc.ids + [sp["eos"]], dtype=np.uint16))
            buf.clear()

        for text in iter_texts(os.path.join(out, f"docs_{split}.jsonl")):
            buf.append(text)
            docs += 1
            if len(buf) == batch:
                flush()
        flush()
        arr = np.concatenate(ids) if ids else np.zeros(0, np.uint16)
        arr.tofile(os.path.join(out, f"{split}.bin"))
        print(f"{split}: {docs} docs, {arr.size} tokens -> {split}.bin")


class TokenStream:
    """Random windows of a uint16 token file, reproducible from (seed, step)."""

    def __init__(self, path: str):
        self.data = np.memmap(path, dtype=np.uint16, mode="r")

    def __len__(self):
        return self.data.size

    def batch(self, step: int, batch: int, seq: int, seed: int = 0):
        rng = np.random.default_rng([seed, step])
        hi = self.data.size - seq - 1
        starts = rng.integers(0, max(hi, 1), batch)
        return np.stack([np.asarray(self.data[s:s + seq + 1], dtype=np.int64) for s in starts])

    def sequential(self, batch: int, seq: int, max_batches: int):
        """Disjoint consecutive windows from the start (held-out evaluation)."""
        n = min(max_batches, (self.data.size - 1) // (batch * seq))
        for i in range(n):
            base = i * batch * seq
            yield np.stack([np.asarray(self.data[base + j * seq: base + j * seq + seq + 1], dtype=np.int64)
                            for j in range(batch)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["collect", "tokenize"])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--held-out", type=float, default=0.03)
    ap.add_argument("--max-file-bytes", type=int, default=256 * 1024)
    ap.add_argument("--debian-bytes", type=int, default=12 * 2**20, help="cap on Debian doc text")
    a = ap.parse_args()
    if a.command == "collect":
        collect(a.out, a.held_out, a.max_file_bytes, a.debian_bytes)
    else:
        tokenize(a.out)


if __name__ == "__main__":
    sys.exit(main())
