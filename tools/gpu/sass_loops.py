#!/usr/bin/env python3
"""Static instruction counts of a kernel's loops from its SASS (no GPU needed).

The decode GEMMs are instruction-bound (notes/gpu.md session 17: ncu, 182 warp instructions per K block), so the
instructions a K loop issues per K block are a figure that can be read off the compiled code on any machine.
This tool compiles a translation unit for sm_90a (or takes a cubin or a .sass listing), disassembles it with
cuobjdump, finds each kernel's loops (backward branches) and prints, per loop, the instructions by opcode and by
issue class, optionally one iteration's path as decode runs it (one_path: in the skinny kernels one 8-row tile,
a full group of K blocks, aligned scale words), and its basic blocks.

  python3 tools/gpu/sass_loops.py --cu tools/gpu/sass/hot_kernels.cu --tiles 1 --kblocks 4

Static counts, not timings: what an instruction costs depends on its pipe and on what it waits for. cuobjdump and
nvdisasm are the CUDA toolkit's; where the toolkit has neither (a minimal install), `bash tools/gpu/sass_tools.sh`
unpacks NVIDIA's own wheels of the two under .sass-tools/.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Coarse issue classes (Hopper). IMAD and the FP32/FP16 arithmetic share the FMA pipes; integer logic, shifts,
# byte permutes, compares and selects the ALU pipe; F2FP/F2F conversions are listed apart.
CLASSES = [
    ("tensor", {"HMMA", "HGMMA", "IMMA", "QGMMA", "WARPGROUP"}),
    ("fma", {"FFMA", "FMUL", "FADD", "IMAD", "HFMA2", "HMUL2", "HADD2", "FFMA2", "FMUL2", "FADD2"}),
    ("alu", {"LOP3", "SHF", "IADD3", "PRMT", "SEL", "ISETP", "FSETP", "FMNMX", "IMNMX", "LEA", "MOV", "FSEL",
             "PLOP3", "VIMNMX", "VIADD", "VIADDMNMX", "IABS", "P2R", "R2P", "SGXT", "BMSK", "FLO", "POPC"}),
    ("uniform", {"UMOV", "ULOP3", "UIADD3", "UISETP", "UIMAD", "ULEA", "USHF", "USEL", "UPRMT", "ULDC", "S2UR"}),
    ("convert", {"F2FP", "F2F", "I2F", "F2I", "I2FP", "F2IP"}),
    ("mem", {"LDS", "LDG", "STS", "STG", "LDGSTS", "LDSM", "LDC", "ATOM", "ATOMS", "RED", "LD", "ST",
             "LDGDEPBAR", "UBLKCP", "UTMALDG", "SYNCS"}),
    ("control", {"BRA", "BAR", "WARPSYNC", "DEPBAR", "NOP", "EXIT", "BSSY", "BSYNC", "CALL", "RET", "YIELD",
                 "MEMBAR", "FENCE", "S2R", "CS2R"}),
]
INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)([^;]*);")


def klass(op):
    for name, ops in CLASSES:
        if op in ops:
            return name
    return "other"


def tool(name):
    env = os.environ.get(name.upper())
    if env:
        return env
    local = os.path.join(ROOT, ".sass-tools", "nvidia", "cu13", "bin", name)
    if os.path.exists(local):
        return local
    found = shutil.which(name) or (os.path.exists(f"/usr/local/cuda/bin/{name}") and f"/usr/local/cuda/bin/{name}")
    if not found:
        sys.exit(f"sass_loops: no {name} (run `bash tools/gpu/sass_tools.sh`, or set {name.upper()})")
    return found


def sass_of(args):
    if args.sass:
        return open(args.sass).read()
    cubin = args.cubin
    if args.cu:
        tmp = tempfile.mkdtemp(prefix="sass_loops")
        cubin = os.path.join(tmp, "k.cubin")
        cmd = [tool("nvcc"), "-std=c++20", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
               "-O3", "-cubin", "-I", args.include] + [f"-D{d}" for d in args.define] + \
              ["-o", cubin, args.cu]
        subprocess.run(cmd, check=True)
    env = dict(os.environ)
    nvdisasm = tool("nvdisasm")
    env["PATH"] = os.path.dirname(nvdisasm) + os.pathsep + env.get("PATH", "")
    return subprocess.run([tool("cuobjdump"), "-sass", cubin], check=True, capture_output=True, text=True,
                          env=env).stdout


def parse(text):
    """{mangled kernel name: [(addr, predicate, opcode, modifiers, operands)]}"""
    out = {}
    for part in re.split(r"\n\s*Function : ", text)[1:]:
        name = part.split("\n", 1)[0].strip()
        out[name] = [(int(m.group(1), 16), (m.group(2) or "").strip(), m.group(3), m.group(4), m.group(5))
                     for m in INS.finditer(part)]
    return out


def demangle(names):
    cxx = shutil.which("c++filt")
    if not cxx:
        return {n: n for n in names}
    res = subprocess.run([cxx], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    return dict(zip(names, res))


def target(ins):
    m = re.search(r"0x([0-9a-f]+)", ins[4])
    return int(m.group(1), 16) if m else None


def loops(code):
    """Each backward branch's [target, branch] range; innermost (no other loop inside) marked."""
    found = []
    for i in code:
        if i[2] == "BRA":
            t = target(i)
            if t is not None and t < i[0]:
                found.append((t, i[0]))
    inner = [not any((a, b) != (c, d) and a <= c and d <= b for c, d in found) for a, b in found]
    return list(zip(found, inner))


def blocks(body):
    """Basic blocks of a loop body: split at branch targets and after branches."""
    starts = {body[0][0]}
    for k, i in enumerate(body):
        if i[2] in ("BRA", "EXIT", "BSYNC"):
            t = target(i)
            if t is not None:
                starts.add(t)
            if k + 1 < len(body):
                starts.add(body[k + 1][0])
    out, cur = [], []
    for i in body:
        if i[0] in starts and cur:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def one_path(bl, tiles):
    """The blocks of one iteration of a loop body as the decode path runs it: of each if/else (a predicated forward
    branch over blocks that end in a forward branch past the else arm), the shorter arm; of each run of blocks that
    issue mma (the row tiles, apart from the short blocks holding their guards), the first `tiles`; all else.
    In the skinny kernels that is one 8-row tile, a full group of K blocks and aligned scale words."""
    start = {b[0][0]: k for k, b in enumerate(bl)}
    drop = set()
    for k, b in enumerate(bl):
        last = b[-1]
        if last[2] != "BRA" or not last[1]:
            continue
        t = start.get(target(last))
        if t is None or t <= k + 1:
            continue
        then_end = bl[t - 1][-1]  # the then arm's last branch: unconditional, past the else arm
        if then_end[2] != "BRA" or then_end[1]:
            continue
        j = start.get(target(then_end))
        if j is None or j <= t:
            continue
        then_arm, else_arm = range(k + 1, t), range(t, j)
        n_then = sum(len(bl[i]) for i in then_arm)
        n_else = sum(len(bl[i]) for i in else_arm)
        drop.update(else_arm if n_else > n_then else then_arm)
    has_mma = lambda b: any(i[2] in ("HMMA", "HGMMA") for i in b)
    kept, run = [], 0
    for k, b in enumerate(bl):
        if k in drop:
            continue
        if has_mma(b):
            run += 1
            if run > tiles:
                continue
        elif len(b) > 4:  # a tile's guard: its branch, sometimes with a few hoisted instructions
            run = 0
        kept.extend(b)
    return kept


def summary(body):
    ops = collections.Counter(i[2] for i in body)
    cls = collections.Counter()
    for op, n in ops.items():
        cls[klass(op)] += n
    return ops, cls


def fmt_counts(c, top=None):
    return ", ".join(f"{k} {v}" for k, v in c.most_common(top))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--cu", help="a .cu translation unit to compile for sm_90a (-O3, -Iinclude)")
    src.add_argument("--cubin")
    src.add_argument("--sass", help="a cuobjdump -sass listing")
    ap.add_argument("-D", "--define", action="append", default=[], help="a macro for --cu (NAME or NAME=VALUE)")
    ap.add_argument("--include", default=os.path.join(ROOT, "include"), help="the include folder for --cu")
    ap.add_argument("--kernel", default="", help="regex on the demangled kernel name")
    ap.add_argument("--blocks", action="store_true",
                    help="also each innermost loop's basic blocks (* where on the --tiles path)")
    ap.add_argument("--all-loops", action="store_true", help="outer loops too")
    ap.add_argument("--tiles", type=int, default=0,
                    help="also count each innermost loop's decode path with this many row tiles (see one_path)")
    ap.add_argument("--kblocks", type=int, default=0,
                    help="K blocks per innermost-loop iteration: also print the counts per K block")
    args = ap.parse_args()
    code = parse(sass_of(args))
    names = demangle(list(code))
    for mangled, ins in code.items():
        name = names[mangled]
        if args.kernel and not re.search(args.kernel, name):
            continue
        print(f"## {name}\n   {len(ins)} instructions in all")
        for (a, b), inner in loops(ins):
            if not inner and not args.all_loops:
                continue
            body = [i for i in ins if a <= i[0] <= b]
            ops, cls = summary(body)
            line = f"   loop {a:#06x}..{b:#06x}{' (innermost)' if inner else ''}: {len(body)} instructions"
            print(line)
            print(f"     by class: {fmt_counts(cls)}")
            print(f"     by opcode: {fmt_counts(ops)}")
            if args.kblocks:
                print(f"     per K block: {len(body) / args.kblocks:.1f} (--kblocks {args.kblocks})")
            if inner and args.tiles:
                kept = one_path(blocks(body), args.tiles)
                _, kc = summary(kept)
                per = f", {len(kept) / args.kblocks:.1f} per K block" if args.kblocks else ""
                print(f"     decode path with {args.tiles} row tile(s): {len(kept)} instructions{per} [{fmt_counts(kc)}]")
            if args.blocks and inner:
                on_path = {i[0] for i in one_path(blocks(body), args.tiles)} if args.tiles else set()
                for blk in blocks(body):
                    bo, bc = summary(blk)
                    guard = blk[-1][1] + " " + blk[-1][2] if blk[-1][2] == "BRA" else ""
                    mark = "*" if blk[0][0] in on_path else " "
                    print(f"      {mark}block {blk[0][0]:#06x}: {len(blk):4d}  [{fmt_counts(bc)}]"
                          f"{'  ends ' + guard.strip() if guard else ''}")


if __name__ == "__main__":
    main()
