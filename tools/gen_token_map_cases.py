#!/usr/bin/env python3
"""Expected Engram token maps (SPEC §4.8) for tests/unit/test_token_map.cpp, computed with the
`tokenizers` package the way the reference inference code builds its map.

The reference, for token id i in range(len(tokenizer)) (= get_vocab_size(with_added_tokens=True)):
text = decode([i], skip_special_tokens=False); key = id_to_token(i) when text holds U+FFFD, else
the text through the normalizer Sequence below (or the text itself when that is empty); compressed
ids in first-seen order of the keys.

Writes, under tests/data/engram/token_maps/:
  synthetic_*.json   small generated tokenizers whose tokens exercise the normalization paths
  <case>.bin         b"DSV41TM1", u32 rows, u32 compressed size, rows x varint v
                     (v = 0: the next new compressed id; else compressed id v - 1)
  cases.txt          "<case> <root> <tokenizer path under root> <rows> <compressed size>",
                     root = data (tests/data) or models (models/)
  normalize.bin      b"DSV41NK1", u32 block, u32 n, n x u64: FNV-1a 64 of the normalized text of
                     every code point of a block (surrogates skipped; each text followed by 0xFF);
                     u32 k, k x (varint len, input bytes, varint len, normalized bytes)
("varint" = unsigned LEB128, little endian throughout.)

--print-tables prints the code point tables of include/dsv41/engram/token_map.hpp: where the
Unicode data of `tokenizers` (its normalization tables are older, its lowercase newer) differs
from libutf8proc's, found by running both over every code point, then checks the C++ recipe
(emulated here through ctypes) against the normalizer on every code point.

Usage: python3 tools/gen_token_map_cases.py [--print-tables]
"""
import argparse
import ctypes
import json
import os
import random
import struct
import sys

from tokenizers import Regex, Tokenizer, normalizers

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DATA = os.path.join(ROOT, "tests", "data")
OUT = os.path.join(DATA, "engram", "token_maps")
SENTINEL = "\ue000"

CASES = [  # (case, root, tokenizer.json under root)
    ("gpt2", "data", "tokenizers/gpt2/tokenizer.json"),
    ("llama3", "data", "tokenizers/llama3/tokenizer.json"),
    ("dsv3", "data", "tokenizers/dsv3/tokenizer.json"),
    ("tiny_text", "data", "tiny-text/tokenizer.json"),
    ("dsv41_tiny_py", "models", "dsv41-tiny-py/tokenizer.json"),
    ("synthetic_bytelevel", "data", "engram/token_maps/synthetic_bytelevel.json"),
    ("synthetic_holes", "data", "engram/token_maps/synthetic_holes.json"),
    ("synthetic_plain", "data", "engram/token_maps/synthetic_plain.json"),
]


def key_normalizer():
    return normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), SENTINEL),  # keeps a lone space through Strip
        normalizers.Strip(),
        normalizers.Replace(SENTINEL, " "),
    ])


def reference_map(tok: Tokenizer):
    norm = key_normalizer()
    ids_of_key, table = {}, []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([i], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(i)
        else:
            key = norm.normalize_str(text) or text
        table.append(ids_of_key.setdefault(key, len(ids_of_key)))
    return table, len(ids_of_key)


# ---- synthetic tokenizers ----

def byte_chars():
    """GPT-2 byte-level alphabet: byte -> the character standing for it in vocab strings."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


B2C = byte_chars()


def bl(data) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return "".join(B2C[b] for b in data)


TRICKY = [
    "İ", "i̇", "i", "I", "ı", "ß", "ẞ", "ss", "SS", "ǅ", "ǄA", "ǆ", "dž", "ǈ", "ŉ",
    "Σ", "ΣΑΣ", "σας", "ς", "σ", " ΟΔΟΣ", "οδος", "ᾳ", "ΐ", "\u0345",
    "ﬁ", "ﬁx", "FI", "ﬀ", "Ａ", "ａｂｃ", "ABC", "ＡＢＣ", "①", "Ⅻ", "㎏", "Ⓐ", "ﷺ", "Å", "K", "Ω", "µ", "½",
    "\u0301", "\u0301\u0301", "e\u0301", "é", "E\u0301", " \u0301", "\u0308\u0301", "a\u0334\u0301", "a\u0301\u0334",
    "a\u05b0\u0591", "\u0f73", "\u0344", "\u0903", "\u20dd", "a\u0488",
    " ", "  ", "\t", "\n", "\r\n", "\t\n", " \n ", "  x ", " x", "x ", "x  y", "x\t\ty", "\x0b", "\x0c", "\x1c",
    "\u00a0", "\u00a0x", "x\u00a0\u00a0y", "\u2028", "x\u2028", "\u2029", "\u3000", "\u3000x\u3000", "\u0085",
    "\u1680", "\u2007", "\u202f", "\u200b", "\u200bx", "\ufeff", "\u180e", "\u00ad",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467", "\u200d", "\U0001F44D\U0001F3FD", "\u2764\ufe0f",
    "\ue000", " \ue000 ", "x\ue000", "\ue000\ue000",
    "The", " the", "THE", "the ", "\tthe\n", "Thé", "ｔｈｅ", "THÉ",
    "\u1cf2", "\u1cf3", "\ua7cb", "\U00010d50", "\U00010d70", "\u32ff", "\U0001e030", "\U0001F16C",
    "\u0898", "a\u0898", "A\u0898\u0301", "a\u0301\u0898", "\u07fd", "\U00011938", "\ua7f2",
    "한", "\u1100\u1161\u11a8", "\u1100\u1161", "각", "\u3131", "ﾡ",
    "<｜begin▁of▁sentence｜>", "▁x", "\x00", "\x7f",
]
FRAGMENTS = [
    b"\xe2\x80", b"\xe2\x82", b"\xe2\x83", b"\xf0\x9f\x98", b"\x80", b"\xc3", b"a\xe2", b"\xef\xbf\xbd",
    b"x\xef\xbf\xbd", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x80\xa8", b"\xcc\x81\xe2",
]


def tokenizer_json(vocab: dict, added: list, byte_level: bool, normalizer=None) -> dict:
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [
            {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": n, "special": s} for i, c, s, n in added],
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        if byte_level else None,
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
        if byte_level else None,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }


def add_unique(vocab: dict, tok: str):
    if tok not in vocab:
        vocab[tok] = len(vocab)


def synthetic_bytelevel():
    vocab = {}
    for b in range(256):
        add_unique(vocab, B2C[b])
    for t in TRICKY:
        add_unique(vocab, bl(t))
    for f in FRAGMENTS:
        add_unique(vocab, bl(f))
    for raw in ["İ", "ﬁ", "é", "\u0301", "Ｔｈｅ"]:  # not byte-level text: the decoder keeps or remaps it
        add_unique(vocab, raw)
    n = len(vocab)
    added = [
        (n, "<|bos|>", True, False),
        (n + 1, "<|eos|>", True, False),
        (n + 2, "  x ", False, False),
        (vocab[bl("ǅ")], bl("ǅ"), True, False),  # content already in the vocab: keeps its id
        (n + 3, "Ａ\u00a0ß", False, False),       # not byte-level text: decoded as it is
        (n + 4, "\u0301", False, True),
        (n + 5, " ", True, False),
    ]
    return tokenizer_json(vocab, added, True)


def synthetic_holes():
    # ids 5..7 unused: len(tokenizer) counts tokens, so the last ids fall outside the reference map
    toks = [bl(t) for t in ["a", "A", " a", "b", "\xe2"]] + [bl(b"\xe2")]
    vocab = {t: i for i, t in enumerate(toks[:5])}
    vocab[bl(b"\xe2")] = 8
    for i, t in enumerate(["B", "  b", "ｂ", "c\u0301"]):
        vocab[bl(t)] = 9 + i
    return tokenizer_json(vocab, [], True)


def synthetic_plain():
    # no decoder: decode([i]) is the token string itself, U+FFFD included
    vocab = {}
    for t in TRICKY + ["\ufffd", "a\ufffd", "\ufffd\ufffd", "x"]:
        add_unique(vocab, t)
    n = len(vocab)
    added = [(n, "<s>", True, False), (n + 1, "ÀB", False, True), (n + 2, "àb", False, False)]
    return tokenizer_json(vocab, added, False, normalizer={"type": "Lowercase"})


SYNTHETIC = {"synthetic_bytelevel": synthetic_bytelevel, "synthetic_holes": synthetic_holes,
             "synthetic_plain": synthetic_plain}


# ---- writers ----

def varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def encode_map(table, n_compressed) -> bytes:
    out = bytearray(b"DSV41TM1" + struct.pack("<II", len(table), n_compressed))
    seen = 0
    for c in table:
        if c == seen:
            out += varint(0)
            seen += 1
        else:
            assert c < seen
            out += varint(c + 1)
    return bytes(out)


def fnv1a(h: int, data: bytes) -> int:
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


BLOCK = 4096


def normalize_cases() -> bytes:
    norm = key_normalizer()
    hashes = []
    for start in range(0, 0x110000, BLOCK):
        h = 0xCBF29CE484222325
        for c in range(start, start + BLOCK):
            if 0xD800 <= c <= 0xDFFF:
                continue
            h = fnv1a(h, norm.normalize_str(chr(c)).encode("utf-8") + b"\xff")
        hashes.append(h)
    # short strings of marks, jamo, spaces and case pairs: ordering, composition, runs, ends
    pool = [c for t in TRICKY for c in t] + list("aAeE  \t\n\r") + [
        "\u0300", "\u0316", "\u0334", "\u0345", "\u05b0", "\u0591", "\u0f71", "\u0f72", "\u302a", "\u1100",
        "\u1161", "\u11a8", "\uac00", "\u0130", "\u03a3", "\ufb01", "\u2126", "\u1e9e", "\u0898", "\u1ac1"]
    rng = random.Random(41)
    strings = [t for t in TRICKY] + ["".join(rng.choice(pool) for _ in range(rng.randint(1, 7))) for _ in range(700)]
    out = bytearray(b"DSV41NK1" + struct.pack("<II", BLOCK, len(hashes)))
    for h in hashes:
        out += struct.pack("<Q", h)
    out += struct.pack("<I", len(strings))
    for s in strings:
        a, b = s.encode("utf-8"), norm.normalize_str(s).encode("utf-8")
        out += varint(len(a)) + a + varint(len(b)) + b
    return bytes(out)


def write_cases():
    os.makedirs(OUT, exist_ok=True)
    for name, make in SYNTHETIC.items():
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(make(), f, ensure_ascii=False, indent=1)
            f.write("\n")
    lines = ["# generated by tools/gen_token_map_cases.py: case root tokenizer rows compressed"]
    for name, root, rel in CASES:
        base = DATA if root == "data" else os.path.join(ROOT, "models")
        tok = Tokenizer.from_file(os.path.join(base, rel))
        table, n = reference_map(tok)
        if name == "dsv41_tiny_py":  # the shipped map was built the same way
            from safetensors.numpy import load_file
            shipped = load_file(os.path.join(base, "dsv41-tiny-py", "engram_token_map.safetensors"))["token_map"]
            assert list(shipped) == table, "shipped engram_token_map.safetensors differs from the reference build"
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(encode_map(table, n))
        lines.append(f"{name} {root} {rel} {len(table)} {n}")
        print(f"{name}: {len(table)} rows, {n} compressed ids")
    with open(os.path.join(OUT, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(OUT, "normalize.bin"), "wb") as f:
        f.write(normalize_cases())


# ---- --print-tables: tokenizers' Unicode data against libutf8proc's ----

class Utf8proc:
    MARKS = (6, 7, 8)  # UTF8PROC_CATEGORY_MN, MC, ME

    def __init__(self):
        self.lib = ctypes.CDLL("libutf8proc.so.2")
        self.lib.utf8proc_category.restype = ctypes.c_int
        self.lib.utf8proc_tolower.restype = ctypes.c_int32
        self.lib.utf8proc_get_property.restype = ctypes.POINTER(ctypes.c_int16)  # [1]: combining class
        self.lib.utf8proc_decompose_char.restype = ctypes.c_ssize_t
        self.lib.utf8proc_unicode_version.restype = ctypes.c_char_p
        self.buf = (ctypes.c_int32 * 32)()

    def nfkd_char(self, c):
        boundclass = ctypes.c_int(0)
        n = self.lib.utf8proc_decompose_char(c, self.buf, 32, (1 << 4) | (1 << 2), ctypes.byref(boundclass))
        return [self.buf[i] for i in range(n)]

    def ccc(self, c):
        return self.lib.utf8proc_get_property(c)[1]

    def is_mark(self, c):
        return self.lib.utf8proc_category(c) in self.MARKS

    def lower(self, c):
        return self.lib.utf8proc_tolower(c)


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def emulate(u, unknown, strip_extra, lower, s):
    """The C++ recipe: NFKD by utf8proc minus `unknown`, canonical order, strip marks, lowercase, ..."""
    cps = []
    for ch in s:
        cps += [ord(ch)] if ord(ch) in unknown else u.nfkd_char(ord(ch))
    ccc = [0 if c in unknown else u.ccc(c) for c in cps]
    i = 0
    while i < len(cps):
        if ccc[i] == 0:
            i += 1
            continue
        j = i
        while j < len(cps) and ccc[j]:
            j += 1
        run = sorted(zip(ccc[i:j], range(j - i), cps[i:j]))
        cps[i:j] = [c for _, _, c in run]
        i = j
    cps = [c for c in cps if not (c in strip_extra or (u.is_mark(c) and c not in unknown))]
    t = "".join(lower.get(c, chr(u.lower(c))) for c in cps)
    r, prev = [], False
    for ch in t:
        if ch in " \t\r\n":
            if not prev:
                r.append(" ")
            prev = True
        else:
            r.append(ch)
            prev = False
    t = "".join(r)
    if t == " ":
        t = SENTINEL
    return t.strip(WHITE_SPACE).replace(SENTINEL, " ")


WHITE_SPACE = "".join(map(chr, [*range(0x9, 0xE), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028,
                                0x2029, 0x202F, 0x205F, 0x3000]))


def print_tables():
    u = Utf8proc()
    nfkc, nfd, strip, low = normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    unknown, strip_extra, lower = set(), set(), {}
    for c in cps:
        ch = chr(c)
        ref = [ord(x) for x in nfd.normalize_str(nfkc.normalize_str(ch))]
        mine = u.nfkd_char(c)
        if ref != mine:
            assert ref == [c], ("decomposition differs", hex(c))
            unknown.add(c)
        stripped = strip.normalize_str(ch) == ""
        if stripped != u.is_mark(c):
            if stripped:
                strip_extra.add(c)
            else:
                unknown.add(c)
        lw = low.normalize_str(ch)
        if lw != chr(u.lower(c)):
            lower[c] = lw
    # a mark whose combining class tokenizers does not know is one it does not strip either
    for c in cps:
        k = u.ccc(c)
        if not k or c in unknown:
            continue
        for p in ("\u0334", "\u0301", "\u0345", "\u05b0"):
            s = "a" + chr(c) + p if k > 1 else "a" + p + chr(c)
            if [ord(x) for x in nfd.normalize_str(nfkc.normalize_str(s))] != [0x61] + sorted_marks(u, s[1:]):
                raise SystemExit(f"combining class of U+{c:04X} differs and it is not in the unknown set")
    print(f"// utf8proc {u.lib.utf8proc_unicode_version().decode()}")
    print("unknown:", ", ".join(f"{{0x{a:04X}, 0x{b:04X}}}" for a, b in ranges(unknown)))
    print("strip_extra:", ", ".join(f"0x{c:04X}" for c in sorted(strip_extra)))
    multi = {c: s for c, s in lower.items() if len(s) != 1}
    assert multi == {0x130: "i\u0307"}, multi
    single = sorted((c, ord(s)) for c, s in lower.items() if len(s) == 1)
    runs = []
    for c, t in single:
        if runs and runs[-1][1] == c - 1 and runs[-1][2] == t - c:
            runs[-1][1] = c
        else:
            runs.append([c, c, t - c])
    print("lower:", ", ".join(f"{{0x{a:04X}, 0x{b:04X}, {d}}}" for a, b, d in runs))
    # the recipe against the whole normalizer, on every code point
    lower_map = {c: s for c, s in lower.items()}
    norm = key_normalizer()
    bad = [hex(c) for c in cps if emulate(u, unknown, strip_extra, lower_map, chr(c)) != norm.normalize_str(chr(c))]
    print("recipe mismatches:", len(bad), bad[:20])


def sorted_marks(u, s):
    cps = [x for ch in s for x in u.nfkd_char(ord(ch))]
    return [c for _, _, c in sorted((u.ccc(c), i, c) for i, c in enumerate(cps))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--print-tables", action="store_true")
    a = ap.parse_args()
    if a.print_tables:
        print_tables()
    else:
        write_cases()


if __name__ == "__main__":
    sys.exit(main())
