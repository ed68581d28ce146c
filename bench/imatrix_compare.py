#!/usr/bin/env python3
"""Compares two importance-matrix files in llama.cpp's GGUF form (e.g. kvasir imatrix's and
llama-imatrix's for the same model, text and chunking): per tensor, the token counts and the
relative difference of each column's mean squared activation; prints the median and the worst
tensors.
    bench/imatrix_compare.py A.gguf B.gguf"""
import statistics
import struct
import sys


def read_gguf_f32(path):
    """{tensor name: list of floats} for the F32 tensors of a GGUF file (v3)."""
    b = open(path, "rb").read()
    at = 0

    def take(fmt):
        nonlocal at
        v = struct.unpack_from("<" + fmt, b, at)
        at += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal at
        n = take("Q")
        s = b[at:at + n].decode()
        at += n
        return s

    sizes = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(sizes[t])

    assert b[:4] == b"GGUF", path
    at = 4
    _, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        typ, off = take("I"), take("Q")
        infos.append((name, ne, typ, off))
    align = kv.get("general.alignment", 32)
    data = (at + align - 1) // align * align
    out = {}
    for name, ne, typ, off in infos:
        if typ != 0:
            continue
        n = 1
        for x in ne:
            n *= x
        out[name] = struct.unpack_from(f"<{n}f", b, data + off)
    return out


def entries(path):
    t = read_gguf_f32(path)
    res = {}
    for name, v in t.items():
        if name.endswith(".in_sum2"):
            base = name[:-8]
            counts = t[base + ".counts"]
            n_in = len(v) // len(counts)
            res[base] = (counts, [v[i] / counts[i // n_in] if counts[i // n_in] else 0.0 for i in range(len(v))])
    return res


a, b = entries(sys.argv[1]), entries(sys.argv[2])
only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
print(f"{len(a)} and {len(b)} tensors; only in the first: {only_a[:5]}; only in the second: {only_b[:5]}")
rows = []
for name in sorted(set(a) & set(b)):
    (ca, ma), (cb, mb) = a[name], b[name]
    same_counts = list(ca) == list(cb)
    rel = [abs(x - y) / max(abs(y), 1e-12) for x, y in zip(ma, mb)]
    rows.append((statistics.median(rel), max(rel), name, same_counts))
print(f"counts equal in {sum(r[3] for r in rows)}/{len(rows)} tensors")
print(f"median over tensors of the per-column median relative difference: {statistics.median(r[0] for r in rows):.2e}")
print(f"largest per-tensor median: {max(r[0] for r in rows):.2e}")
for r in sorted(rows, reverse=True)[:5]:
    print(f"  {r[2]}: median {r[0]:.2e}, max {r[1]:.2e}, counts {'equal' if r[3] else 'DIFFER'}")
