"""Splits a model directory's model.safetensors into shards of at most --max-bytes each, in the
released layout (model-0000k-of-0000N.safetensors + model.safetensors.index.json), and copies the
other files. Tensor bytes are copied unchanged."""
import argparse
import json
import os
import shutil
import struct


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return header, 8 + n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--max-bytes", type=int, default=15_000_000)
    a = ap.parse_args()
    os.makedirs(a.dst, exist_ok=True)
    path = os.path.join(a.src, "model.safetensors")
    header, base = read_header(path)
    meta = header.pop("__metadata__", {})
    names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    shards, cur, size = [], [], 0
    for k in names:
        b, e = header[k]["data_offsets"]
        if cur and size + (e - b) > a.max_bytes:
            shards.append(cur)
            cur, size = [], 0
        cur.append(k)
        size += e - b
    if cur:
        shards.append(cur)
    n = len(shards)
    weight_map = {}
    with open(path, "rb") as src:
        for i, group in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            hdr, off, blobs = {"__metadata__": meta} if meta else {}, 0, []
            for k in group:
                b, e = header[k]["data_offsets"]
                src.seek(base + b)
                blobs.append(src.read(e - b))
                hdr[k] = {"dtype": header[k]["dtype"], "shape": header[k]["shape"], "data_offsets": [off, off + e - b]}
                off += e - b
                weight_map[k] = fname
            raw = json.dumps(hdr, separators=(",", ":")).encode()
            raw += b" " * (-len(raw) % 8)
            with open(os.path.join(a.dst, fname), "wb") as f:
                f.write(struct.pack("<Q", len(raw)))
                f.write(raw)
                for blob in blobs:
                    f.write(blob)
    total = sum(header[k]["data_offsets"][1] - header[k]["data_offsets"][0] for k in names)
    with open(os.path.join(a.dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1, sort_keys=True)
    for other in os.listdir(a.src):
        if other != "model.safetensors" and os.path.isfile(os.path.join(a.src, other)):
            shutil.copy(os.path.join(a.src, other), os.path.join(a.dst, other))
    print(f"{len(names)} tensors in {n} shards -> {a.dst}")


if __name__ == "__main__":
    main()
