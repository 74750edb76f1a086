#!/usr/bin/env python3
"""Generate tokenizer test cases and the ids `tokenizers` produces for them.

Writes, under tests/data/tokenizers/:
  cases.bin                 the test strings (raw bytes; some are not valid UTF-8)
  <name>/expected.bin       for gpt2, llama3, dsv3 (trained by train_tokenizers.py)
  variants/<name>.json      small patches over one of those files exercising other options
  variants/<name>.bin       expected ids for the variant (on a subset of the cases)

Oracle: Tokenizer.encode(text, add_special_tokens=False). A Python str cannot hold invalid
UTF-8, so a case's bytes are decoded with bytes.decode("utf-8", "replace") (each maximal
ill-formed subpart -> U+FFFD, the same rule as Rust's from_utf8_lossy) and that text is
encoded; the C++ tokenizer applies the same repair to raw bytes. The ids without special
tokens come from encode_special_tokens = True.

Binary format (little endian; "varint" = unsigned LEB128):
  cases.bin:    b"DSV41TC1", u32 count, count x (varint len, bytes)
  expected.bin: b"DSV41TE1", u32 count,
                count x (varint n, n varint ids)                        allow_special = true
                count x (varint m; m = 0: same as above, else m-1 varint ids follow)
                u32 k, k x (varint n, n varint ids,                     decode checks
                            varint len, bytes of decode(ids, skip_special_tokens=False),
                            varint len, bytes of decode(ids, skip_special_tokens=True))
  variants/<name>.bin: the same as expected.bin, for the cases whose index % STRIDE == 0.
Variant patch (applied in this order, the C++ test does the same):
  {"base": "gpt2", "model_set": {...}, "vocab_add": {...}, "set": {top-level key: value}}

Usage: python3 tools/tokenizers/gen_cases.py [--dir tests/data/tokenizers]
"""
import argparse
import ctypes
import ctypes.util
import glob
import json
import os
import random
import struct
import sysconfig
import unicodedata

from tokenizers import Tokenizer

SEED = 41
N_CASES = 10500
STRIDE = 6           # variants use every STRIDE-th case
N_DECODE = 300       # random id sequences per tokenizer for decode checks
NAMES = ["gpt2", "llama3", "dsv3"]

SPECIAL_TEXT = [
    "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|eot_id|>", "<|reserved_special_token_2|>",
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>", "<｜System｜>", "<｜User｜>",
    "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁end｜>", "｜DSML｜",
    "<｜deepseek_image｜>", "<think>", "</think>", "<tool_result>", "</tool_result>",
    # near misses
    "<|endoftext", "<|eot_id>", "<｜User", "<think", "</ think>", "<｜place▁holder▁no▁2｜>",
    # variant tokens
    "<SPEC>", "<spec>", "Hello", "HELLO", "<L>", "<R>", "Word", "eot", "<|eot|>", "Café", "CAFÉ",
    "ZzQq", "zzqq", "Mixed", "▁mixed",
]

WORDS = ("the of and to in is it you that was for on are with as I his they be at one have this "
         "from or had by word but what some we can out other were all there when up use your how "
         "said an each she which do their time if will way about many then them write would like "
         "so these her long make thing see him two has look more day could go come did number "
         "sound no most people my over know water than call first who may down side been now find "
         "naïve café résumé façade Straße über coöperate").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL",
                "'Ll", "'D", "'ſ", "’s", "’ll", "''", "'", "'x", "'Re"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", "\u00a0", "\u3000", "\u2028", "\x0b", "\x0c",
          "\x85", "\u200b", "\u2009", " \n", "\t\t", "    ", " " * 9, "\n \n"]
EMOJI = ["👍", "👍🏽", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🇺🇸", "🇯🇵", "❤️", "#️⃣", "1️⃣", "😀", "🤖", "🧑‍🚀",
         "✈️", "☕", "🫠", "👁‍🗨", "🐈‍⬛", "©️", "™"]
CJK = ["你好世界", "中文文本测试", "我们在北京。", "深度求索", "日本語のテキスト", "ひらがな", "カタカナ",
       "漢字かな交じり文", "東京タワー", "한국어", "안녕하세요", "서울특별시", "「引用」", "（括弧）",
       "１２３", "ＡＢＣ", "、。！？", "龥龤", "〇一二三", "𠀀𠀁", "々ゝゞ", "ー"]
SCRIPTS = ["مرحبا بالعالم", "العربية ١٢٣٤", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Привет мир",
           "Ελληνικά κείμενο", "Ὀδυσσεύς", "ქართული", "Հայերեն", "ᚠᚢᚦᚨᚱᚲ", "ꦗꦮ", "ትግርኛ", "ܐܪܡܝܐ",
           "ⅫⅣ", "²³¹", "½¾", "①②③", "٣٤٥", "০১২", "𝟘𝟙𝟚", "𝐀𝐁𝐂", "ﬁﬂ", "Ⓐⓑ"]
COMBINING = ["e\u0301", "a\u0300\u0316", "n\u0303", "\u0301x", "Z\u0351\u0352\u0353\u0354a\u0355\u0356",
             "o\u0308\u0304", "\u0915\u094d\u0937", "\u05e9\u05c1\u05b8", "\u0627\u064e", "g\u0327"]
PUNCT = [".", ",", "!", "?", "...", "—", "–", "-", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\",
         "|", "#", "@", "$", "%", "^", "&", "*", "=", "+", "~", "`", "\"", ";", ":", "«", "»", "“", "”",
         "„", "‘", "’", "¿", "¡", "§", "¶", "•", "→", "≠", "∑", "€", "£", "¥", "°", "±", "×", "÷"]
INVALID = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80",
           b"\xed\xbf\xbf", b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xf5\x80", b"\xf8\x88\x80\x80\x80",
           b"\xe2\x82", b"\xf0\x9f\x98", b"\xf0\x9f", b"\xc3", b"\xe4\xb8", b"\xc3\x28", b"\xe2\x28\xa1",
           b"\x80\x80\x80", b"\xf0\x9f\x98\xff"]


def utf8proc_category_fn():
    name = ctypes.util.find_library("utf8proc") or "libutf8proc.so.2"
    lib = ctypes.CDLL(name)
    lib.utf8proc_category.restype = ctypes.c_int
    lib.utf8proc_category.argtypes = [ctypes.c_int32]
    names = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
             "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]
    return lambda cp: names[lib.utf8proc_category(cp)]


def stable_codepoints():
    """Assigned code points whose general category Python and utf8proc agree on."""
    cat = utf8proc_category_fn()
    blocks = [(0x20, 0x2FF), (0x300, 0x36F), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0x97F),
              (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1E00, 0x1FFF), (0x2000, 0x206F), (0x20A0, 0x22FF),
              (0x2460, 0x27BF), (0x2E80, 0x2FDF), (0x3000, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7A3), (0xE000, 0xE0FF), (0xF900, 0xFAFF), (0xFB00, 0xFFEF),
              (0x10000, 0x1007F), (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF)]
    out = []
    for lo, hi in blocks:
        for cp in range(lo, hi + 1):
            c = chr(cp)
            py = unicodedata.category(c)
            if py == "Cn" or py == "Cs" or cat(cp) != py:
                continue
            out.append(c)
    return out


def load_sources(rng):
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(p for p in glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)
                   if "site-packages" not in p)
    rng.shuffle(files)
    code = []
    for p in files[:400]:
        try:
            with open(p, encoding="utf-8") as f:
                code.append(f.read())
        except (OSError, UnicodeDecodeError):
            pass
    prose = []
    docs = sorted(p for p in glob.glob("/usr/share/doc/**/*", recursive=True)
                  if os.path.isfile(p) and (p.endswith((".txt", ".md")) or p.endswith("copyright")))
    rng.shuffle(docs)
    for p in docs[:300]:
        try:
            with open(p, encoding="utf-8") as f:
                prose.append(f.read(20000))
        except (OSError, UnicodeDecodeError):
            pass
    return [c for c in code if c], [p for p in prose if p]


def snippet(rng, texts, max_lines):
    t = rng.choice(texts)
    lines = t.splitlines(keepends=True)
    if not lines:
        return t[:200]
    i = rng.randrange(len(lines))
    return "".join(lines[i:i + rng.randint(1, max_lines)])


def number(rng):
    k = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 20, 33, 64])
    digits = "".join(rng.choice("0123456789") for _ in range(k))
    form = rng.randrange(8)
    if form == 0:
        return "-" + digits
    if form == 1:
        return digits + "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 6)))
    if form == 2:
        return f"{int(digits):,}"
    if form == 3:
        return "0x" + "".join(rng.choice("0123456789abcdef") for _ in range(k))
    if form == 4:
        return digits + rng.choice(["e10", "E-5", "%", "px", "th", "k"])
    if form == 5:
        return "".join(rng.choice("٠١٢٣٤٥٦٧٨٩０１２３") for _ in range(k))
    return digits


def word(rng):
    w = rng.choice(WORDS)
    r = rng.random()
    if r < 0.15:
        return w.upper()
    if r < 0.3:
        return w.capitalize()
    return w


def mixed(rng, stable):
    parts = []
    for _ in range(rng.randint(1, 12)):
        k = rng.randrange(12)
        if k == 0:
            parts.append(word(rng) + rng.choice(CONTRACTIONS))
        elif k == 1:
            parts.append(rng.choice(SPACES))
        elif k == 2:
            parts.append(rng.choice(EMOJI))
        elif k == 3:
            parts.append(rng.choice(CJK))
        elif k == 4:
            parts.append(rng.choice(SCRIPTS))
        elif k == 5:
            parts.append(rng.choice(COMBINING))
        elif k == 6:
            parts.append(number(rng))
        elif k == 7:
            parts.append("".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4))))
        elif k == 8:
            parts.append(rng.choice(SPECIAL_TEXT))
        elif k == 9:
            parts.append("".join(rng.choice(stable) for _ in range(rng.randint(1, 6))))
        else:
            parts.append(word(rng))
        if rng.random() < 0.5:
            parts.append(" ")
    return "".join(parts)


def make_cases():
    rng = random.Random(SEED)
    code, prose = load_sources(rng)
    stable = stable_codepoints()
    cases = [b"", b" ", b"  ", b"\n", b"\r\n", b"\t", b"a", b"'s", b"<|endoftext|>", b"<think>",
             b"\xff", b"\x00", b"\x00\x01\x1f\x7f", ("\u00a0" * 3).encode(), b" " * 513,
             b"a" * 700, b"1" * 101, ("😀" * 50).encode(), b"\r\n" * 40, b"\t \t \n" * 30,
             "x'ſ x'S x'K x'Ll x'ſt".encode()]
    kinds = ["code", "prose", "mixed", "space", "num", "contr", "emoji", "cjk", "script",
             "comb", "special", "invalid", "random", "long"]
    while len(cases) < N_CASES:
        k = kinds[len(cases) % len(kinds)]
        if k == "code":
            s = snippet(rng, code, 5)
        elif k == "prose":
            s = snippet(rng, prose, 4)
        elif k == "mixed":
            s = mixed(rng, stable)
        elif k == "space":
            s = "".join(rng.choice(SPACES) + (word(rng) if rng.random() < 0.6 else "")
                        for _ in range(rng.randint(1, 8)))
        elif k == "num":
            s = " ".join(number(rng) for _ in range(rng.randint(1, 5)))
            if rng.random() < 0.5:
                s = word(rng) + s + rng.choice(PUNCT)
        elif k == "contr":
            s = " ".join(word(rng) + rng.choice(CONTRACTIONS) + rng.choice(["", " ", "s", "x"])
                         for _ in range(rng.randint(1, 6)))
        elif k == "emoji":
            s = "".join(rng.choice(EMOJI) + rng.choice(["", " ", "x", "\n", "‍"])
                        for _ in range(rng.randint(1, 6)))
        elif k == "cjk":
            s = "".join(rng.choice(CJK) + rng.choice(["", " ", word(rng), number(rng), "。", "，"])
                        for _ in range(rng.randint(1, 5)))
        elif k == "script":
            s = " ".join(rng.choice(SCRIPTS) for _ in range(rng.randint(1, 4)))
        elif k == "comb":
            s = "".join(rng.choice(COMBINING) + rng.choice(["", " ", word(rng)])
                        for _ in range(rng.randint(1, 5)))
        elif k == "special":
            s = "".join(rng.choice([rng.choice(SPECIAL_TEXT), rng.choice(SPECIAL_TEXT), word(rng),
                                    rng.choice(SPACES), rng.choice(PUNCT), "Word", " Word ", "xWord"])
                        for _ in range(rng.randint(1, 8)))
        elif k == "random":
            s = "".join(rng.choice(stable) for _ in range(rng.randint(1, 20)))
        elif k == "long":
            s = snippet(rng, code, 24) if rng.random() < 0.7 else mixed(rng, stable) * rng.randint(2, 4)
        else:  # invalid
            base = mixed(rng, stable).encode("utf-8")
            for _ in range(rng.randint(1, 3)):
                i = rng.randint(0, len(base))
                base = base[:i] + rng.choice(INVALID) + base[i:]
            if rng.random() < 0.3 and len(base) > 2:  # cut a multi-byte character
                base = base[:rng.randint(1, len(base) - 1)]
            cases.append(base)
            continue
        cases.append(s.encode("utf-8"))
    return cases


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ids_blob(ids):
    return varint(len(ids)) + b"".join(varint(i) for i in ids)


def expected_blob(tok, cases, rng):
    out = bytearray(b"DSV41TE1")
    out += struct.pack("<I", len(cases))
    texts = [c.decode("utf-8", "replace") for c in cases]
    tok.encode_special_tokens = False
    with_special = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    tok.encode_special_tokens = True
    without = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    tok.encode_special_tokens = False
    for ids in with_special:
        out += ids_blob(ids)
    for a, b in zip(with_special, without):
        out += b"\x00" if a == b else varint(len(b) + 1) + b"".join(varint(i) for i in b)
    # Decode checks: random ids (any token, including special and added ones).
    n_ids = tok.get_vocab_size(with_added_tokens=True)
    out += struct.pack("<I", N_DECODE)
    for _ in range(N_DECODE):
        if rng.random() < 0.5:
            ids = [rng.randrange(n_ids) for _ in range(rng.randint(0, 30))]
        else:  # pieces of real encodings, cut anywhere (partial UTF-8 sequences)
            src = rng.choice(with_special)
            a = rng.randint(0, len(src))
            ids = src[a:a + rng.randint(0, 25)]
        out += ids_blob(ids)
        for skip in (False, True):
            b = tok.decode(ids, skip_special_tokens=skip).encode("utf-8")
            out += varint(len(b)) + b
    return bytes(out)


def added(content, special, normalized, single_word=False, lstrip=False, rstrip=False):
    return {"id": 0, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def variants(base):
    llama3 = json.loads(base["llama3"])
    v = {}
    v["gpt2_prefix_nfkc"] = {
        "base": "gpt2",
        "set": {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFKC"},
                {"type": "Replace", "pattern": {"String": "\t"}, "content": "    "},
                {"type": "Replace", "pattern": {"Regex": "\\s*\\r\\n"}, "content": "\n"}]},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                              "use_regex": True},
            "added_tokens": json.loads(base["gpt2"])["added_tokens"] + [
                added("<SPEC>", True, True), added("Hello", False, True), added("eot", False, False),
                added("<|eot|>", True, False), added("Café", False, False),
                added("Word", False, False, single_word=True), added("<L>", True, False, lstrip=True),
                added("<R>", True, False, rstrip=True)],
        },
    }
    v["llama3_splits"] = {
        "base": "llama3",
        "set": {
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "NFD"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": True,
                                                         "strip_right": True},
                {"type": "Prepend", "prepend": "▁"}]},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                 "invert": False},
                {"type": "Digits", "individual_digits": True},
                {"type": "Split", "pattern": {"Regex": "[.,;:]+"}, "behavior": "Removed",
                 "invert": False},
                {"type": "Split", "pattern": {"Regex": "\\p{L}+"}, "behavior": "Contiguous",
                 "invert": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": True}]},
            "added_tokens": llama3["added_tokens"] + [
                added("hello", False, True, lstrip=True, rstrip=True),
                added("the", False, True, single_word=True), added("ZzQq", False, True),
                added("Mixed", True, True)],
        },
    }
    v["dsv3_merged_next"] = {
        "base": "dsv3",
        "model_set": {"ignore_merges": True},
        "set": {
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "MergedWithNext",
                 "invert": False},
                {"type": "Split", "pattern": {"Regex": "(?i:the|and)"}, "behavior": "Contiguous",
                 "invert": False},
                {"type": "Split", "pattern": {"Regex": "[^\\p{L}\\p{N}\\s]"}, "behavior": "Removed",
                 "invert": True},
                {"type": "Digits", "individual_digits": False},
                {"type": "Split", "pattern": {"Regex": "(?i)[a-c]++|x*?y|(?=q)qu|(?>ab|a)c|z{2,}|\\d{2,3}?"},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False}]},
        },
    }
    v["dsv3_o200k"] = {
        "base": "dsv3",
        "set": {
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex":
                    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
                    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
                    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
                    "[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
                 "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": "[\\w&&[^\\d_]]{4,}+|\\s+$|^\\S|\\b\\B|\\bq\\b|[\\x{4E00}-\\x{9FFF}\\u3040-\\u30ff]{2}"},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False}]},
        },
    }
    v["gpt2_patterns"] = {
        "base": "gpt2",
        "set": {
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "\\s+$|^\\s+|\\b\\w+\\b"},
                 "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": "(?i:[^a-z\\s\\d]+)|\\d{2,3}?"},
                 "behavior": "Isolated", "invert": False},
                {"type": "Split", "pattern": {"Regex": "(?m:.{1,6}?)(?=[.!?])|[\\x{1F300}-\\x{1FAFF}]+"},
                 "behavior": "MergedWithPrevious", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False}]},
        },
    }
    gv = json.loads(base["gpt2"])["model"]["vocab"]
    n = max(gv.values()) + 1
    fallback = {"<unk>": n}
    for b in range(256):
        fallback[f"<0x{b:02X}>"] = n + 1 + b
    v["gpt2_byte_fallback"] = {
        "base": "gpt2",
        "model_set": {"byte_fallback": True, "unk_token": "<unk>"},
        "vocab_add": fallback,
        "set": {"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+|\\p{P}"},
                                  "behavior": "Isolated", "invert": False},
                "decoder": None},
    }
    v["gpt2_unk"] = {
        "base": "gpt2",
        "model_set": {"unk_token": "<unk>", "fuse_unk": True},
        "vocab_add": {"<unk>": n},
        "set": {"pre_tokenizer": None, "decoder": None, "normalizer": {"type": "NFKD"}},
    }
    return v


def apply_patch(base_json, patch):
    d = json.loads(base_json)
    for k, val in patch.get("model_set", {}).items():
        d["model"][k] = val
    for k, val in patch.get("vocab_add", {}).items():
        d["model"]["vocab"][k] = val
    for k, val in patch.get("set", {}).items():
        d[k] = val
    return json.dumps(d, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests",
                                                  "data", "tokenizers"))
    args = ap.parse_args()
    root = os.path.normpath(args.dir)
    cases = make_cases()
    blob = bytearray(b"DSV41TC1") + struct.pack("<I", len(cases))
    for c in cases:
        blob += varint(len(c)) + c
    with open(os.path.join(root, "cases.bin"), "wb") as f:
        f.write(blob)
    total = len(blob)
    base = {}
    for name in NAMES:
        with open(os.path.join(root, name, "tokenizer.json"), encoding="utf-8") as f:
            base[name] = f.read()
        tok = Tokenizer.from_str(base[name])
        data = expected_blob(tok, cases, random.Random(SEED + len(name)))
        with open(os.path.join(root, name, "expected.bin"), "wb") as f:
            f.write(data)
        total += len(data)
        print(f"{name}: {len(data)} bytes")
    os.makedirs(os.path.join(root, "variants"), exist_ok=True)
    subset = cases[::STRIDE]
    for vname, patch in variants(base).items():
        tok = Tokenizer.from_str(apply_patch(base[patch["base"]], patch))
        with open(os.path.join(root, "variants", vname + ".json"), "w", encoding="utf-8") as f:
            json.dump(patch, f, ensure_ascii=False, indent=1)
        data = expected_blob(tok, subset, random.Random(SEED + len(vname)))
        with open(os.path.join(root, "variants", vname + ".bin"), "wb") as f:
            f.write(data)
        total += len(data)
        print(f"variant {vname}: {len(data)} bytes")
    print(f"{len(cases)} cases, {total} bytes in all")


if __name__ == "__main__":
    main()
