#!/usr/bin/env python3
"""Prints the Pillow reference values that tests/unit/test_image_processor.cpp checks the fitted images against.

    python3 tools/gen_pillow_fit_refs.py   # needs Pillow (not a project dependency; run by hand)

For each case: a synthetic RGB image (bytes from the LCG below), the size the reference's plan_image_grid
gives it (the formulas of SPEC 4.10, re-derived here), and what the reference then does with PIL:
ImageOps.pad(color 127) or, past max_wh_ratio, Image.resize. Printed: FNV-1a 64 of the fitted RGB bytes
and three sampled pixels, as C++ initializers.
"""
import math

from PIL import Image, ImageOps


def resize_hv(im, size):
    """Image.resize(size, BICUBIC) as every Pillow before 13 computes it: the horizontal pass first.
    Pillow 13 (PR 9549) does the vertical pass first when the height shrinks much more than the width,
    which changes some downscales by one level; two single-axis resizes pin the classic order."""
    if im.size == size:
        return im.copy()
    if im.width != size[0]:
        im = im.resize((size[0], im.height), Image.Resampling.BICUBIC)
    if im.height != size[1]:
        im = im.resize(size, Image.Resampling.BICUBIC)
    return im


def pad(im, size, color):
    """ImageOps.pad (contain + centred paste) with resize_hv."""
    w, h = size
    cw, ch = w, h
    im_ratio, dest_ratio = im.width / im.height, w / h
    if im_ratio != dest_ratio:
        if im_ratio > dest_ratio:
            ch = round(im.height / im.width * w)
        else:
            cw = round(im.width / im.height * h)
    resized = resize_hv(im, (cw, ch))
    if resized.size == size:
        return resized
    out = Image.new(im.mode, size, color)
    if resized.width != w:
        out.paste(resized, (round((w - resized.width) * 0.5), 0))
    else:
        out.paste(resized, (0, round((h - resized.height) * 0.5)))
    return out


def lcg_bytes(n, seed):
    x, out = seed & 0xFFFFFFFF, bytearray()
    for _ in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(x >> 24)
    return bytes(out)


def fnv1a64(b):
    h = 0xCBF29CE484222325
    for c in b:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def plan(width, height, p=14, r=3, m=64, minp=10584, wh=None):
    if wh is not None and width > height * wh:
        width = height * wh
    if 0 < width * height < minp:
        ratio = (minp / (width * height)) ** 0.5
        width, height = int(width * ratio), int(height * ratio)
    bw, bh = math.ceil(width / p) * p, math.ceil(height / p) * p

    def grid(bh, bw):
        return math.ceil((bh // p) / r), math.ceil((bw // p) / r)

    nh, nw = grid(bh, bw)
    if nh * (nw + 1) + 2 > m:
        rr = height / width
        mw = math.sqrt((m - 2) / rr + 0.25) - 0.5
        mh = mw * rr
        cell = p * r
        if mw < 1.0:
            bh, bw = (m - 2) // 2 * cell, cell
        elif mh < 1.0:
            bh, bw = cell, (m - 3) * cell
        else:
            beta = min(math.floor(mw) * cell / width, math.floor(mh) * cell / height)
            bh, bw = math.floor(height * beta / p) * p, math.floor(width * beta / p) * p
    return bw, bh


CASES = [(97, 13, None), (50, 37, None), (37, 50, None), (400, 300, None), (100, 2000, None),
         (300, 100, 2), (5000, 10, None), (120, 80, None)]

for w, h, wh in CASES:
    seed = w * 1000 + h
    im = Image.frombytes("RGB", (w, h), lcg_bytes(w * h * 3, seed))
    bw, bh = plan(w, h, wh=wh)
    if wh is not None and im.width >= wh * im.height:
        out = resize_hv(im, (bw, bh))
    else:
        out = pad(im, (bw, bh), (127, 127, 127))
        if out.tobytes() != ImageOps.pad(im, (bw, bh), color=(127, 127, 127)).tobytes():
            print(f"    // note: this Pillow's own ImageOps.pad differs for {w}x{h} (vertical pass first)")
    px = out.load()
    s = [(0, 0), (bw // 2, bh // 2), (bw - 1, bh - 1)]
    samples = ", ".join("{%d, %d, %d, %d, %d}" % (x, y, *px[x, y]) for x, y in s)
    print("    {%d, %d, %s, %d, %d, 0x%016xull, {%s}}," % (
        w, h, "0.0" if wh is None else repr(float(wh)), bw, bh, fnv1a64(out.tobytes()), samples))
