#!/usr/bin/env python3
"""Writes the safetensors test corpus used by tests/unit/test_safetensors.cpp.

    python3 tools/gen_malformed_safetensors.py          # (re)write tests/data/safetensors/
    python3 tools/gen_malformed_safetensors.py --check  # also cross-check with the `safetensors`
                                                        # Python package (Rust reference), if installed

Plain struct/json only, so every byte is under control. Output (deterministic):
  tests/data/safetensors/valid/      files (and model directories) with known contents
  tests/data/safetensors/malformed/  one defect per file or directory, named for the defect
  tests/data/safetensors/README.md   the list, with the expected failure of each
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "safetensors")

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "I32": 4, "I64": 8, "F16": 2, "BF16": 2,
         "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E8M0": 1}


def frame(header, data=b"", pad=True):
    """u64 length + header (+ space padding to a multiple of 8) + data. header: bytes or str."""
    h = header.encode("utf-8") if isinstance(header, str) else header
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def hdr(obj):
    return json.dumps(obj, separators=(",", ":"))


def build(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)] laid out in order. Returns the file bytes."""
    h = {}
    if metadata is not None:
        h["__metadata__"] = metadata
    data = b""
    for name, dtype, shape, raw in tensors:
        assert len(raw) == math.prod(shape) * SIZES[dtype], name
        h[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return frame(hdr(h), data, pad)


def bf16(*xs):
    return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", x))[0] >> 16) for x in xs)


# Known contents of valid/all_dtypes.safetensors (test_safetensors.cpp checks these values).
# Widest first so every tensor is aligned.
ALL_DTYPES = [
    ("t.F64", "F64", [2], struct.pack("<2d", math.pi, -0.0)),
    ("t.I64", "I64", [2], struct.pack("<2q", -(2**63), 2**63 - 1)),
    ("t.F32", "F32", [2, 2], struct.pack("<4f", 0.5, -1.25, 3.0, 1024.0)),
    ("t.I32", "I32", [3], struct.pack("<3i", -(2**31), 0, 2**31 - 1)),
    ("t.F16", "F16", [3], struct.pack("<3e", 1.0, -2.0, 0.5)),    # 0x3C00 0xC000 0x3800
    ("t.BF16", "BF16", [3], bf16(1.0, -2.0, 0.5)),                 # 0x3F80 0xC000 0x3F00
    ("t.I16", "I16", [2], struct.pack("<2h", -32768, 32767)),
    ("t.BOOL", "BOOL", [3], bytes([1, 0, 1])),
    ("t.U8", "U8", [4], bytes([0, 1, 127, 255])),
    ("t.I8", "I8", [4], struct.pack("<4b", -128, -1, 0, 127)),
    ("t.F8_E4M3", "F8_E4M3", [2, 2], bytes([0x38, 0xB8, 0x7E, 0x00])),  # 1, -1, 448, 0
    ("t.F8_E8M0", "F8_E8M0", [3], bytes([127, 128, 0])),                # 2^0, 2^1, 2^-127
]
ALL_DTYPES_META = {"format": "pt", "source": "gen_malformed_safetensors.py"}

A = ("a", "F32", [2], struct.pack("<2f", 1.0, 2.0))
B = ("b", "I32", [1], struct.pack("<i", 3))
C = ("c", "BF16", [2], bf16(1.0, -2.0))
SHARD1, SHARD2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"


def index_json(weight_map, total=None):
    obj = {"metadata": {"total_size": total if total is not None else 0}, "weight_map": weight_map}
    return json.dumps(obj, indent=2) + "\n"


def valid_entries():
    """(relative path, bytes or {file: bytes} for a directory, description)."""
    unaligned = hdr({"f": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                     "u": {"dtype": "U8", "shape": [1], "data_offsets": [12, 13]}})
    if (8 + len(unaligned)) % 4 == 0:
        unaligned += " "
    return [
        ("all_dtypes.safetensors", build(ALL_DTYPES, ALL_DTYPES_META),
         "one tensor per DType with known values, metadata {format: pt, source: ...}"),
        ("empty_and_scalar.safetensors",
         frame(hdr({"scalar": {"dtype": "F64", "shape": [], "data_offsets": [0, 8]},
                    "empty": {"dtype": "F32", "shape": [0, 3], "data_offsets": [8, 8]},
                    "empty1d": {"dtype": "I8", "shape": [0], "data_offsets": [8, 8]},
                    "after": {"dtype": "I32", "shape": [2], "data_offsets": [8, 16]},
                    "empty_end": {"dtype": "U8", "shape": [5, 0], "data_offsets": [16, 16]}}),
               struct.pack("<d", 42.5) + struct.pack("<2i", 7, -7)),
         "0-d scalar F64 42.5, empty tensors [0,3] / [0] / [5,0], I32 [7,-7]"),
        ("no_tensors.safetensors", frame("{}"), "header {} and nothing else"),
        ("metadata_only.safetensors", frame(hdr({"__metadata__": {"k": "v"}})),
         "only __metadata__ {k: v}, no tensors"),
        ("unaligned.safetensors", frame(unaligned, struct.pack("<3f", 1.0, 2.0, 3.0) + b"\x09", pad=False),
         "header not padded: F32 f=[1,2,3] sits at an address not aligned to 4; U8 u=[9]"),
        ("unordered_offsets.safetensors",
         frame(hdr({"z_first": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]},
                    "a_second": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}),
               bytes([1, 2, 3, 4])),
         "header order differs from data order: a_second=[1,2], z_first=[3,4]"),
        ("trailing_spaces.safetensors",
         frame(hdr({"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}) + " " * 29, b"\x05"),
         "header followed by 29+ padding spaces (allowed by the spec); x=[5]"),
        ("sharded", {INDEX: index_json({"a": SHARD1, "b": SHARD1, "c": SHARD2}, 16).encode(),
                     SHARD1: build([A, B]), SHARD2: build([C])},
         "index + 2 shards: a F32 [1,2], b I32 [3] in shard 1; c BF16 [1,-2] in shard 2"),
        ("single_dir", {"model.safetensors": build([("x", "U8", [2], bytes([9, 8]))])},
         "directory with only model.safetensors: x U8 [9,8]"),
    ]


def t(name="w", dtype="F32", shape=(2,), offsets=(0, 8)):
    return {name: {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}


GOOD_HDR = hdr(t())
D8 = bytes(range(8))


def malformed_entries():
    """(name, bytes or {file: bytes}, expected failure)."""
    E = []

    def add(name, content, why):
        E.append((name, content, why))

    # --- framing ---
    add("empty_file.safetensors", b"", "shorter than the 8-byte header length prefix")
    add("short_length_prefix.safetensors", b"\x08\x00\x00\x00\x00", "shorter than the 8-byte prefix")
    add("header_length_over_limit.safetensors", struct.pack("<Q", 100_000_001) + b"{}      ",
        "header length exceeds the 100000000-byte limit")
    add("header_length_u64_max.safetensors", struct.pack("<Q", 2**64 - 1) + b"{}      ",
        "header length exceeds the limit (no overflow)")
    add("header_length_past_eof.safetensors", struct.pack("<Q", 64) + b"{}      ",
        "header length extends past the end of the file")
    add("header_length_zero.safetensors", struct.pack("<Q", 0) + D8, "header length is 0")
    # --- header text ---
    add("header_not_json.safetensors", frame("{not json}"), "not valid JSON")
    add("header_truncated_json.safetensors", frame('{"w":{"dtype":"F32"'), "not valid JSON")
    add("header_not_object.safetensors", frame("[1,2,3]"), "does not begin with '{'")
    add("header_leading_space.safetensors", frame(" " + GOOD_HDR, D8),
        "does not begin with '{' (the spec requires '{' first; safetensors 0.8 accepts it)")
    add("header_nul_padding.safetensors", frame(GOOD_HDR.encode() + b"\0" * 5, D8, pad=False),
        "not valid JSON: NUL byte (NUL padding is not whitespace)")
    add("header_nul_then_garbage.safetensors",
        frame(GOOD_HDR.encode() + b"\0" + b'"w":{"dtype":"U8"}', D8),
        "not valid JSON: NUL byte (nothing may hide behind a NUL)")
    add("header_invalid_utf8.safetensors",
        frame(b'{"w\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}', D8),
        "not valid JSON (ill-formed UTF-8 in a key)")
    add("header_trailing_garbage.safetensors", frame(GOOD_HDR + "}", D8), "not valid JSON")
    add("duplicate_tensor_key.safetensors",
        frame('{"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},'
              '"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}', D8),
        "duplicate key 'w' (the spec disallows duplicates; safetensors 0.8 silently keeps one)")
    add("duplicate_field_key.safetensors",
        frame('{"w":{"dtype":"F32","dtype":"I32","shape":[2],"data_offsets":[0,8]}}', D8),
        "duplicate key 'dtype' inside 'w'")
    add("duplicate_metadata_key.safetensors",
        frame('{"__metadata__":{"a":"1","a":"2"},' + GOOD_HDR[1:], D8),
        "duplicate key 'a' inside '__metadata__' (safetensors 0.8 silently keeps one)")
    # --- __metadata__ ---
    add("metadata_not_object.safetensors", frame(hdr({"__metadata__": "x", **t()}), D8),
        "__metadata__ must be an object")
    add("metadata_null.safetensors", frame(hdr({"__metadata__": None, **t()}), D8),
        "__metadata__ must be an object (safetensors 0.8 reads null as no metadata; stricter here)")
    add("metadata_value_not_string.safetensors", frame(hdr({"__metadata__": {"k": 1}, **t()}), D8),
        "__metadata__ value for key 'k' is not a string")
    # --- tensor entries ---
    add("entry_not_object.safetensors", frame(hdr({"w": [0, 8]}), D8), "entry is not an object")
    add("missing_dtype.safetensors", frame(hdr({"w": {"shape": [2], "data_offsets": [0, 8]}}), D8),
        "missing 'dtype'")
    add("missing_shape.safetensors", frame(hdr({"w": {"dtype": "F32", "data_offsets": [0, 8]}}), D8),
        "missing 'shape'")
    add("missing_data_offsets.safetensors", frame(hdr({"w": {"dtype": "F32", "shape": [2]}}), D8),
        "missing 'data_offsets'")
    add("extra_field.safetensors",
        frame(hdr({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "offsets": [0, 8]}}), D8),
        "unexpected field 'offsets' (safetensors 0.8 ignores unknown fields; stricter here)")
    add("dtype_unknown.safetensors", frame(hdr(t(dtype="F33")), D8), "unknown or unsupported dtype 'F33'")
    add("dtype_lowercase.safetensors", frame(hdr(t(dtype="f32")), D8), "unknown or unsupported dtype 'f32'")
    add("dtype_unsupported_u32.safetensors", frame(hdr(t(dtype="U32")), D8),
        "unknown or unsupported dtype 'U32' (valid in the spec, not supported here)")
    add("dtype_not_string.safetensors",
        frame(hdr({"w": {"dtype": 4, "shape": [2], "data_offsets": [0, 8]}}), D8),
        "'dtype' is not a string")
    add("shape_not_array.safetensors",
        frame(hdr({"w": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}}), D8),
        "'shape' must be an array")
    add("shape_negative.safetensors", frame(hdr(t(shape=(-2,))), D8),
        "'shape' entries must be non-negative integers")
    add("shape_float.safetensors", frame('{"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}}', D8),
        "'shape' entries must be non-negative integers")
    add("shape_string_dim.safetensors", frame(hdr(t(shape=("2",))), D8),
        "'shape' entries must be non-negative integers")
    add("shape_dim_over_int64.safetensors", frame(hdr(t(dtype="U8", shape=(2**63,))), D8),
        "shape dimension 9223372036854775808 overflows int64")
    add("shape_numel_overflow.safetensors", frame(hdr(t(dtype="U8", shape=(2**32, 2**32, 2))), D8),
        "overflows the element count or byte size")
    add("shape_bytes_overflow.safetensors", frame(hdr(t(dtype="F64", shape=(2**62,))), D8),
        "overflows the element count or byte size")
    add("offsets_not_pair.safetensors", frame(hdr(t(offsets=(0, 8, 16))), D8),
        "'data_offsets' must be an array [begin, end]")
    add("offsets_negative.safetensors", frame(hdr(t(offsets=(-8, 0))), D8),
        "'data_offsets' must be non-negative integers")
    add("offsets_float.safetensors", frame('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}}', D8),
        "'data_offsets' must be non-negative integers")
    add("offsets_begin_after_end.safetensors", frame(hdr(t(shape=(0,), offsets=(8, 0))), D8),
        "have begin > end")
    add("size_mismatch.safetensors", frame(hdr(t(shape=(2, 2), offsets=(0, 8))), D8),
        "is 16 bytes but data_offsets span 8 bytes")
    add("offsets_past_end.safetensors", frame(hdr(t(shape=(4,), offsets=(0, 16))), D8),
        "run past the end of the data section")
    add("offsets_huge.safetensors", frame(hdr(t(dtype="U8", shape=(8,), offsets=(2**64 - 8, 2**64 - 1))), D8),
        "data_offsets span 7 bytes (size mismatch, no wrap-around)")
    add("offsets_over_u64.safetensors", frame('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]}}', D8),
        "'data_offsets' must be non-negative integers (2^64 does not fit)")
    add("offsets_far_past_end.safetensors", frame(hdr(t(offsets=(2**63, 2**63 + 8))), D8),
        "run past the end of the data section")
    add("empty_tensor_past_end.safetensors",
        frame(hdr({**t(), "e": {"dtype": "F32", "shape": [0], "data_offsets": [100, 100]}}), D8),
        "tensor 'e': run past the end of the data section")
    # --- layout of the data section ---
    add("overlapping_tensors.safetensors",
        frame(hdr({**t("a", offsets=(0, 8)), **t("b", offsets=(4, 12))}), bytes(12)),
        "tensors 'a' and 'b' overlap")
    add("aliased_tensors.safetensors",
        frame(hdr({**t("a", offsets=(0, 8)), **t("b", offsets=(0, 8))}), D8),
        "tensors 'a' and 'b' overlap")
    add("hole_between_tensors.safetensors",
        frame(hdr({**t("a", offsets=(0, 8)), **t("b", offsets=(12, 20))}), bytes(20)),
        "hole in the data section: bytes [8,12)")
    add("hole_at_start.safetensors", frame(hdr(t(offsets=(4, 12))), bytes(12)),
        "hole in the data section: bytes [0,4)")
    add("trailing_bytes.safetensors", frame(GOOD_HDR, D8 + b"POLYGLOT"),
        "8 trailing bytes after byte 8 belong to no tensor")
    add("no_tensors_with_data.safetensors", frame("{}", D8),
        "8 trailing bytes after byte 0 belong to no tensor")
    add("truncated_data.safetensors", frame(hdr({**t("a"), **t("b", offsets=(8, 16))}), D8 + b"\0\0\0"),
        "tensor 'b': run past the end of the data section")

    # --- sharded directories (opened with Checkpoint::open) ---
    s1, s2 = build([A, B]), build([C])
    add("sharded_missing_shard", {INDEX: index_json({"a": SHARD1, "b": SHARD1, "c": SHARD2}).encode(),
                                  SHARD1: s1},
        f"io_error: shard '{SHARD2}': cannot open")
    add("sharded_bad_shard", {INDEX: index_json({"a": SHARD1, "b": SHARD1, "c": SHARD2}).encode(),
                              SHARD1: s1, SHARD2: s2[:-2]},
        f"shard '{SHARD2}': tensor 'c': run past the end of the data section")
    add("sharded_tensor_not_in_shard", {INDEX: index_json({"a": SHARD1, "b": SHARD1, "c": SHARD1}).encode(),
                                        SHARD1: s1},
        f"tensor 'c' is listed in {INDEX} for shard '{SHARD1}' but that shard does not contain it")
    add("sharded_duplicate_tensor", {INDEX: index_json({"a": SHARD1, "b": SHARD1, "c": SHARD2}).encode(),
                                     SHARD1: s1, SHARD2: build([A, C])},
        f"tensor 'a' appears in both shard '{SHARD1}' and shard '{SHARD2}'")
    add("sharded_unindexed_tensor", {INDEX: index_json({"a": SHARD1, "c": SHARD2}).encode(),
                                     SHARD1: s1, SHARD2: s2},
        f"tensor 'b' in shard '{SHARD1}' is not listed in {INDEX}")
    add("sharded_path_traversal", {INDEX: index_json({"a": "../" + SHARD1}).encode(), SHARD1: s1},
        "shard name '../model-00001-of-00002.safetensors' for tensor 'a' is not a plain file name")
    add("sharded_index_not_json", {INDEX: b'{"weight_map": {"a": }', SHARD1: s1},
        f"{INDEX}: not valid JSON")
    add("sharded_index_empty", {INDEX: b"", SHARD1: s1}, f"{INDEX}: not valid JSON: empty")
    add("sharded_index_not_object", {INDEX: b'["a"]', SHARD1: s1}, f"{INDEX} is not a JSON object")
    add("sharded_no_weight_map", {INDEX: b'{"metadata": {"total_size": 0}}', SHARD1: s1},
        f"{INDEX} has no 'weight_map' object")
    add("sharded_empty_weight_map", {INDEX: b'{"weight_map": {}}', SHARD1: s1}, "'weight_map' is empty")
    add("sharded_weight_map_not_string", {INDEX: b'{"weight_map": {"a": 1}}', SHARD1: s1},
        "weight_map entry for 'a' is not a string")
    add("sharded_index_duplicate_key",
        {INDEX: ('{"weight_map": {"a": "%s", "b": "%s", "a": "%s"}}' % (SHARD1, SHARD1, SHARD1)).encode(),
         SHARD1: s1},
        "duplicate key 'a' inside 'weight_map'")
    add("dir_without_model", {"config.json": b"{}\n"},
        "io_error: has neither model.safetensors.index.json nor model.safetensors")
    return E


def write_tree(base, entries):
    if os.path.isdir(base):
        shutil.rmtree(base)
    os.makedirs(base)
    for name, content, _ in entries:
        path = os.path.join(base, name)
        if isinstance(content, dict):
            os.makedirs(path)
            for fname, data in content.items():
                with open(os.path.join(path, fname), "wb") as f:
                    f.write(data)
        else:
            with open(path, "wb") as f:
                f.write(content)


def readme(valid, malformed):
    lines = [
        "# Safetensors test corpus",
        "",
        "Generated by `tools/gen_malformed_safetensors.py` (do not edit by hand; rerun the script).",
        "Read by `tests/unit/test_safetensors.cpp`: every malformed file or directory must be refused",
        "with a Status whose message names the file and contains the reason below; the valid ones",
        "must read back with exactly the listed contents. Directories are opened with",
        "`dsv41::st::Checkpoint::open`, files with `dsv41::st::File::open`. Failures are",
        "`format_error` unless marked `io_error`.",
        "",
        "## valid/",
        "",
        "| file | contents |",
        "|---|---|",
    ]
    lines += [f"| `{n}{'/' if isinstance(c, dict) else ''}` | {d} |" for n, c, d in valid]
    lines += ["", "## malformed/", "", "| file | expected failure |", "|---|---|"]
    lines += [f"| `{n}{'/' if isinstance(c, dict) else ''}` | {d} |" for n, c, d in malformed]
    return "\n".join(lines) + "\n"


def cross_check(valid, malformed):
    """Compares with the reference implementation (Python `safetensors`, Rust core)."""
    try:
        import safetensors
    except ImportError:
        print("safetensors not installed: skipping --check")
        return
    print(f"reference: safetensors {safetensors.__version__}")

    def ref_ok(data):
        try:
            safetensors.deserialize(data)
            return "accepts", ""
        except Exception as e:  # noqa: BLE001
            return "rejects", str(e).splitlines()[0][:70]

    for name, content, _ in valid + malformed:
        if isinstance(content, dict):
            continue
        verdict, why = ref_ok(content)
        tag = "valid" if (name, content, _) in valid else "malformed"
        print(f"  {tag:9s} {name:40s} reference {verdict} {why}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="cross-check with the safetensors package")
    ap.add_argument("--out", default=ROOT, help="output folder (default: tests/data/safetensors)")
    args = ap.parse_args()
    valid, malformed = valid_entries(), malformed_entries()
    write_tree(os.path.join(args.out, "valid"), valid)
    write_tree(os.path.join(args.out, "malformed"), malformed)
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme(valid, malformed))
    total = 0
    for d, _, files in os.walk(args.out):
        total += sum(os.path.getsize(os.path.join(d, f)) for f in files)
    n_dirs = sum(isinstance(c, dict) for _, c, _ in malformed)
    print(f"wrote {len(valid)} valid and {len(malformed) - n_dirs} malformed files + {n_dirs} malformed "
          f"directories, {total} bytes, under {os.path.relpath(args.out)}")
    if args.check:
        cross_check(valid, malformed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
