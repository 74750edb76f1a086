#!/usr/bin/env python3
"""Writes the PNG test corpus of tests/unit/test_image_decode.cpp (and seeds of tests/fuzz/fuzz_image.cpp).

    python3 tools/gen_test_images.py   # (re)write tests/data/images/

Standard library only (zlib, struct), so every byte is under control. Deterministic output.
Pixel pattern of the valid files (W x H, x < W, y < H, channel c):
    v8(x, y, c)  = (x * 37 + y * 91 + c * 53 + 11) & 255
    v16(x, y, c) = v8 << 8 | ((x * 13 + y * 7 + c) & 255)  (16-bit files; "small" ones use v8 itself)
The test recomputes these formulas and checks the decoded RGB against what PIL's convert("RGB") makes.
"""
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "images")
SIG = b"\x89PNG\r\n\x1a\n"


def v8(x, y, c):
    return (x * 37 + y * 91 + c * 53 + 11) & 255


def v16(x, y, c):
    return v8(x, y, c) << 8 | ((x * 13 + y * 7 + c) & 255)


def chunk(kind, data, crc=None):
    if crc is None:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def ihdr(w, h, depth, color, interlace=0):
    return chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace))


def pack_row(samples, depth):
    """samples: list of ints of one scanline; returns its bytes (big-endian / MSB-first packing)."""
    if depth == 16:
        return b"".join(struct.pack(">H", s) for s in samples)
    if depth == 8:
        return bytes(samples)
    out, acc, n = bytearray(), 0, 0
    for s in samples:
        acc = (acc << depth) | s
        n += depth
        if n == 8:
            out.append(acc)
            acc, n = 0, 0
    if n:
        out.append(acc << (8 - n))
    return bytes(out)


def raw_scanlines(rows, depth):
    """Filter type 0 (None) for every row."""
    return b"".join(b"\x00" + pack_row(r, depth) for r in rows)


def rows_of(w, h, f):
    return [[s for x in range(w) for s in f(x, y)] for y in range(h)]


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def interlaced_scanlines(w, h, f, depth):
    out = b""
    for x0, y0, dx, dy in ADAM7:
        xs = list(range(x0, w, dx))
        ys = list(range(y0, h, dy))
        if not xs or not ys:
            continue
        out += raw_scanlines([[s for x in xs for s in f(x, y)] for y in ys], depth)
    return out


def png(w, h, depth, color, f, extra=b"", interlace=0, idat=None):
    if idat is None:
        data = interlaced_scanlines(w, h, f, depth) if interlace else raw_scanlines(rows_of(w, h, f), depth)
        idat = zlib.compress(data, 9)
    return SIG + ihdr(w, h, depth, color, interlace) + extra + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def main():
    os.makedirs(ROOT, exist_ok=True)
    files = {}
    W, H = 7, 5  # odd sizes: partial Adam7 passes, sub-byte row padding
    files["rgb8.png"] = png(W, H, 8, 2, lambda x, y: [v8(x, y, c) for c in range(3)])
    files["rgba8.png"] = png(W, H, 8, 6, lambda x, y: [v8(x, y, c) for c in range(4)])
    files["grey8.png"] = png(W, H, 8, 0, lambda x, y: [v8(x, y, 0)])
    files["grey_alpha8.png"] = png(W, H, 8, 4, lambda x, y: [v8(x, y, 0), v8(x, y, 1)])
    files["rgb16.png"] = png(W, H, 16, 2, lambda x, y: [v16(x, y, c) for c in range(3)])
    files["rgba16.png"] = png(W, H, 16, 6, lambda x, y: [v16(x, y, c) for c in range(4)])
    files["grey_alpha16.png"] = png(W, H, 16, 4, lambda x, y: [v16(x, y, 0), v16(x, y, 1)])
    # 16-bit grey: PIL opens it as I;16 and convert("RGB") clips at 255: rows 0-1 hold values < 256.
    files["grey16.png"] = png(W, H, 16, 0, lambda x, y: [v8(x, y, 0) if y < 2 else v16(x, y, 0)])
    for depth in (1, 2, 4):
        files[f"grey{depth}.png"] = png(W, H, depth, 0, lambda x, y, d=depth: [v8(x, y, 0) % (1 << d)])
    # Palette: entry i = (i*3, 255 - i, i*7 & 255); 16 entries; pixel index v8 % 16.
    n_pal = 16
    plte = chunk(b"PLTE", bytes(b for i in range(n_pal) for b in (i * 3, 255 - i, (i * 7) & 255)))
    trns = chunk(b"tRNS", bytes((i * 16) & 255 for i in range(n_pal)))
    files["palette8.png"] = png(W, H, 8, 3, lambda x, y: [v8(x, y, 0) % n_pal], extra=plte)
    files["palette4.png"] = png(W, H, 4, 3, lambda x, y: [v8(x, y, 0) % n_pal], extra=plte)
    files["palette_trns.png"] = png(W, H, 8, 3, lambda x, y: [v8(x, y, 0) % n_pal], extra=plte + trns)
    files["rgb_trns.png"] = png(W, H, 8, 2, lambda x, y: [v8(x, y, c) for c in range(3)],
                                extra=chunk(b"tRNS", struct.pack(">HHH", 11, 64, 117)))
    files["interlaced_rgb8.png"] = png(W, H, 8, 2, lambda x, y: [v8(x, y, c) for c in range(3)], interlace=1)
    files["interlaced_grey2.png"] = png(W, H, 2, 0, lambda x, y: [v8(x, y, 0) % 4], interlace=1)
    files["interlaced_rgba16.png"] = png(W, H, 16, 6, lambda x, y: [v16(x, y, c) for c in range(4)], interlace=1)

    # ---- malformed ----
    good = files["rgb8.png"]
    files["bad_truncated.png"] = good[: len(good) - 20]          # cut inside IDAT
    files["bad_truncated_header.png"] = good[:20]                # cut inside IHDR
    files["bad_signature.png"] = b"\x89PNX" + good[4:]
    ih = ihdr(W, H, 8, 2)
    bad_ihdr_crc = chunk(b"IHDR", ih[8:-4], crc=0x12345678)
    files["bad_crc_ihdr.png"] = SIG + bad_ihdr_crc + good[len(SIG) + len(ih):]
    idat_data = zlib.compress(raw_scanlines(rows_of(W, H, lambda x, y: [v8(x, y, c) for c in range(3)]), 8), 9)
    files["bad_crc_idat.png"] = SIG + ih + chunk(b"IDAT", idat_data, crc=0xDEADBEEF) + chunk(b"IEND", b"")
    files["bad_zero_width.png"] = SIG + ihdr(0, H, 8, 2) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    files["bad_huge_ihdr.png"] = (SIG + ihdr(100000, 100000, 8, 2) + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
                                  + chunk(b"IEND", b""))
    files["bad_bit_depth.png"] = SIG + ihdr(W, H, 3, 2) + chunk(b"IDAT", idat_data) + chunk(b"IEND", b"")
    files["bad_no_idat.png"] = SIG + ih + chunk(b"IEND", b"")
    files["bad_short_idat.png"] = SIG + ih + chunk(b"IDAT", zlib.compress(b"\x00" * 10)) + chunk(b"IEND", b"")
    files["bad_zlib.png"] = SIG + ih + chunk(b"IDAT", b"\x78\x9c\xff\xff\xff\xff") + chunk(b"IEND", b"")
    files["bad_palette_missing.png"] = png(W, H, 8, 3, lambda x, y: [0])
    # Bombs: 8x8 RGB whose IDAT inflates to 64 MiB of zeros (~64 KiB file); a zTXt whose text inflates to
    # 64 MiB; a chunk that declares 2 GiB of data.
    zeros = zlib.compress(b"\x00" * (64 << 20), 9)
    files["bomb_idat.png"] = SIG + ihdr(8, 8, 8, 2) + chunk(b"IDAT", zeros) + chunk(b"IEND", b"")
    files["bomb_ztxt.png"] = png(W, H, 8, 2, lambda x, y: [v8(x, y, c) for c in range(3)],
                                 extra=chunk(b"zTXt", b"Comment\x00\x00" + zeros))
    files["bomb_chunk_length.png"] = SIG + ih + struct.pack(">I", 0x7FFFFFFF) + b"tEXt" + b"x" * 64
    files["not_an_image.bin"] = b"just some bytes that are not an image at all\n" * 4

    for name, data in sorted(files.items()):
        with open(os.path.join(ROOT, name), "wb") as fh:
            fh.write(data)
    print(f"wrote {len(files)} files to {os.path.normpath(ROOT)}")


if __name__ == "__main__":
    main()
