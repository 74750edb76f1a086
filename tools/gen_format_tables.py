#!/usr/bin/env python3
"""Writes the number-format test tables for tests/unit/test_formats.cpp, with ml_dtypes as the oracle.

All files are little-endian; every "f32" is the IEEE-754 float32 bit pattern as a u32.

tests/data/formats/bf16_decode.bin     65536 x f32: code i (0..65535) decoded.
tests/data/formats/e4m3_decode.bin       256 x f32: float8_e4m3fn code i decoded.
tests/data/formats/ue8m0_decode.bin      256 x f32: float8_e8m0fnu code i decoded.
tests/data/formats/e2m1_decode.bin        16 x f32: float4_e2m1fn code i decoded.
tests/data/formats/small_encode.bin    u32 N, then N x f32 inputs, then N x u8 E4M3 codes,
                                       N x u8 UE8M0 codes, N x u8 E2M1 codes (one nibble per byte).
tests/data/formats/bf16_encode.bin     u32 N, then N x f32 inputs, then N x u16 bf16 codes.

Expected codes are ml_dtypes' casts, except where the library deliberately differs:
- E4M3: the input is first clamped to [-448, 448] (NaN stays NaN), i.e. finite overflow and +-inf
  saturate to +-448 as CUDA's satfinite conversion does; plain ml_dtypes gives NaN there.
- E2M1: NaN gives zero with the input's sign (ml_dtypes gives zero with the opposite sign).
UE8M0 and bf16 codes are ml_dtypes' casts unchanged (NaN included).

Small-format inputs: every bf16 value (65536); for each of E4M3, E2M1 and UE8M0 every code value,
every midpoint between adjacent codes (1.5 * 2^e for UE8M0, its rounding tie) and the float32
neighbours of both; overflow, float32 subnormals, +-0, +-inf, NaNs; 20000 seeded random floats.
bf16 inputs: for every upper half the exact tie (low half 0x8000), near ties (0x7FFF, 0x8001) for
every fourth upper half, 32768 seeded random bit patterns.

Usage (from the repository root): python3 tools/gen_format_tables.py
"""

import pathlib
import warnings

import ml_dtypes as md
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "formats"
SEED = 20250414


def f32(bits):
    return np.asarray(bits, dtype=np.uint32).view(np.float32)


def bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def neighbours(x):
    """x and its float32 neighbours on both sides (finite inputs)."""
    x = np.atleast_1d(np.asarray(x, dtype=np.float32))
    return np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])


def decode(dtype, n):
    return np.arange(n, dtype=np.uint8 if n <= 256 else np.uint16).view(dtype).astype(np.float32)


def signed(mags):
    m = np.asarray(mags, dtype=np.float32)
    return np.concatenate([m, -m])


def small_inputs():
    parts = [f32(np.arange(65536, dtype=np.uint32) << 16)]  # every bf16 value
    for dtype, n in ((md.float8_e4m3fn, 128), (md.float4_e2m1fn, 8)):
        vals = decode(dtype, n)
        vals = vals[np.isfinite(vals)]
        mids = (vals[:-1].astype(np.float64) + vals[1:]) / 2  # exact in float32
        parts += [neighbours(signed(vals)), neighbours(signed(mids))]
    pow2 = np.ldexp(np.float64(1), np.arange(-127, 128))
    parts += [neighbours(pow2), neighbours(1.5 * pow2)]  # 1.5 * 2^127: overflow tie
    specials = [448, 464, 480, 500, 6, 6.5, 7, 1e30, 3.4028235e38, 2.0**-9, 2.0**-10, 3 * 2.0**-11, 2.0**-126]
    parts += [neighbours(signed(specials))]
    sub = np.array([1, 2, 3, 0x1FFFFF, 0x3FFFFF, 0x400000, 0x400001, 0x5FFFFF, 0x600000, 0x7FFFFF], np.uint32)
    parts += [f32(sub), f32(sub | 0x80000000)]
    parts += [f32([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFBFFFFF, 0x7FFFFFFF])]
    r = np.random.default_rng(SEED)
    parts += [f32(r.integers(0, 2**32, 8000, dtype=np.uint64).astype(np.uint32))]
    mag = np.exp2(r.uniform(-14, 10, 12000)).astype(np.float32)
    parts += [np.where(r.integers(0, 2, 12000) == 1, -mag, mag).astype(np.float32)]
    x = np.concatenate([p.astype(np.float32) for p in parts])
    # Deduplicate by bit pattern, keeping first occurrence order.
    _, idx = np.unique(bits(x), return_index=True)
    return x[np.sort(idx)]


def bf16_inputs():
    hi = np.arange(65536, dtype=np.uint32) << 16
    r = np.random.default_rng(SEED + 1)
    parts = [hi | 0x8000, hi[::4] | 0x7FFF, hi[1::4] | 0x8001]
    parts += [r.integers(0, 2**32, 32768, dtype=np.uint64).astype(np.uint32)]
    return np.concatenate(parts).astype(np.uint32)


def expect_e4m3(x):
    return np.clip(x, -448, 448).astype(md.float8_e4m3fn).view(np.uint8)


def expect_e2m1(x):
    code = x.astype(md.float4_e2m1fn).view(np.uint8) & 0xF
    nan = np.isnan(x)
    code[nan] = np.where(np.signbit(x[nan]), 0x8, 0x0)
    return code.astype(np.uint8)


def expect_ue8m0(x):
    return x.astype(md.float8_e8m0fnu).view(np.uint8)


def main():
    warnings.simplefilter("ignore", RuntimeWarning)  # NaN/overflow casts are intended
    OUT.mkdir(parents=True, exist_ok=True)
    le32 = np.dtype("<u4")
    decodes = {
        "bf16_decode.bin": (md.bfloat16, 65536),
        "e4m3_decode.bin": (md.float8_e4m3fn, 256),
        "ue8m0_decode.bin": (md.float8_e8m0fnu, 256),
        "e2m1_decode.bin": (md.float4_e2m1fn, 16),
    }
    for name, (dtype, n) in decodes.items():
        (OUT / name).write_bytes(bits(decode(dtype, n)).astype(le32).tobytes())

    x = small_inputs()
    enc = [expect_e4m3(x), expect_ue8m0(x), expect_e2m1(x)]
    blob = np.array([x.size], le32).tobytes() + bits(x).astype(le32).tobytes()
    (OUT / "small_encode.bin").write_bytes(blob + b"".join(e.tobytes() for e in enc))

    b = bf16_inputs()
    h = f32(b).astype(md.bfloat16).view(np.uint16).astype(np.dtype("<u2"))
    (OUT / "bf16_encode.bin").write_bytes(np.array([b.size], le32).tobytes() + b.astype(le32).tobytes() + h.tobytes())

    total = sum(p.stat().st_size for p in OUT.glob("*.bin"))
    print(f"small_encode: {x.size} inputs, bf16_encode: {b.size} inputs, {total} bytes in {OUT}")


if __name__ == "__main__":
    main()
