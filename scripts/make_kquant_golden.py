#!/usr/bin/env python3
"""Write tests/golden/gguf_quant/kquant.gguf, the reference of numla's searched Q4_K / Q6_K
rounding (kernels/qblock_quant.h). Never needed by the build or the tests (the file is
committed):

    /opt/venv/bin/python scripts/make_kquant_golden.py            # writes tests/golden/
    /opt/venv/bin/python scripts/make_kquant_golden.py --out DIR  # elsewhere

Pinned: numpy 2.4.6, gguf 0.19.0.

The file holds F32 rows "kx" (rows 0-7 normal with several spreads, 8-15 Student-t with 3
degrees of freedom, 16-23 Laplace, 24-27 normal with 1 % outliers of 20x, 28-29 all-positive
(sub-blocks whose fitted minimum would be positive), 30 with zero and near-zero sub-blocks, 31 a
sparse row) and, written here in numpy from the description of llama.cpp's reference k-quant
rows (make_qkx2_quants for Q4_K, make_qx_quants with weights x^2 for Q6_K, no importance
matrix), their blocks "kx.q4_k" and "kx.q6_k" in GGUF's byte layout. The arithmetic is float32
with sums taken in element order (np.cumsum), as the C code sums, so the blocks are expected to
be the same bytes as numla's and as llama.cpp's quantize_row_q4_K_ref / quantize_row_q6_K_ref
(on these rows they are, every block, for a llama.cpp built with GGML_NATIVE; and on every Q4_K
and Q6_K tensor of the Q4_K_M file llama-quantize makes of models/kjv-v3 with numla's recipe,
docs/quantization.md). The test asserts the error and that nearly every block is the same
bytes.
"""

import argparse
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as QT

F = np.float32


def rint(v):
    return np.rint(v).astype(np.int32)


def seqsum(a):
    """sum over the last axis in element order, float32 (the C loops' order)"""
    return np.cumsum(a.astype(F), axis=-1, dtype=F)[..., -1]


def f16(v):
    return np.asarray(v, dtype=F).astype(np.float16)


def q4k_fit(x):
    """x: (S, 32) sub-blocks. Returns scale (S,), min (S,) >= 0, codes (S, 32) uint8."""
    S, n = x.shape
    nmax = 15
    rms = np.sqrt(seqsum(x * x) / F(32)).astype(F)
    w = (rms[:, None] + np.abs(x)).astype(F)
    lo = np.minimum(x.min(axis=1), F(0))
    hi = x.max(axis=1)
    sw = seqsum(w)
    swx = seqsum(w * x)
    flat = hi == lo
    rng = np.where(flat, F(1), hi - lo).astype(F)
    inv0 = (F(nmax) / rng).astype(F)
    q = np.clip(rint((x - lo[:, None]) * inv0[:, None]), 0, nmax)
    scale = (F(1) / inv0).astype(F)
    off = lo.copy()
    e = (scale[:, None] * q.astype(F) + lo[:, None] - x).astype(F)
    best = seqsum(w * e * e)
    for step in range(21):
        # each trial's grid starts at the best fit's offset so far
        live = ~flat & (hi - off > 0)
        span = np.where(live, hi - off, F(1)).astype(F)
        inv = ((F(-1) + F(0.1) * F(step) + F(nmax)) / span).astype(F)
        t = np.clip(rint((x - off[:, None]) * inv[:, None]), 0, nmax)
        tf = t.astype(F)
        sl = seqsum(w * tf)
        sll = seqsum(w * tf * tf)
        sxl = seqsum(w * tf * x)
        det = (sw * sll - sl * sl).astype(F)
        ok = det > 0
        dd = np.where(ok, det, F(1))
        s = ((sw * sxl - swx * sl) / dd).astype(F)
        b = ((sll * swx - sl * sxl) / dd).astype(F)
        pos = b > 0
        s = np.where(pos, sxl / np.where(sll > 0, sll, F(1)), s).astype(F)
        b = np.where(pos, F(0), b).astype(F)
        e = (s[:, None] * tf + b[:, None] - x).astype(F)
        err = seqsum(w * e * e)
        take = ok & (err < best) & live
        best = np.where(take, err, best)
        scale = np.where(take, s, scale)
        off = np.where(take, b, off)
        q = np.where(take[:, None], t, q)
    scale = np.where(flat, F(0), scale).astype(F)
    q = np.where(flat[:, None], 0, q)
    return scale, (-off).astype(F), q


def q4k_block(x):
    """one block of 256 -> 144 bytes"""
    xs = x.reshape(8, 32)
    scale, mins, q = q4k_fit(xs)
    smax = max(F(0), scale.max())
    mmax = max(F(0), mins.max())
    isc = F(63) / smax if smax > 0 else F(0)
    imn = F(63) / mmax if mmax > 0 else F(0)
    hd, hm = f16(smax / F(63)), f16(mmax / F(63))
    D, DM = F(hd), F(hm)
    sc = np.clip(rint(isc * scale), 0, 63)
    m = np.clip(rint(imn * mins), 0, 63)
    for j in range(8):
        step = F(D * F(sc[j]))
        if step == 0:
            continue
        q[j] = np.clip(rint((xs[j] + F(DM * F(m[j]))) / step), 0, 15)
    s = np.zeros(12, np.uint8)
    for j in range(4):
        s[j] = (sc[j] & 63) | (sc[j + 4] >> 4) << 6
        s[j + 4] = (m[j] & 63) | (m[j + 4] >> 4) << 6
        s[j + 8] = (sc[j + 4] & 15) | (m[j + 4] & 15) << 4
    qf = q.reshape(256)
    qs = np.zeros(128, np.uint8)
    for c in range(4):
        qs[32 * c:32 * c + 32] = qf[64 * c:64 * c + 32] | qf[64 * c + 32:64 * c + 64] << 4
    return np.concatenate([np.array([hd, hm]).view(np.uint8), s, qs])


def q6k_fit(x):
    """x: (G, 16) groups -> signed scale (G,), codes + 32 (G, 16) (0 for a zero group)"""
    nmax = 32
    idx = np.argmax(np.abs(x), axis=1)  # the first of largest |x|
    m = x[np.arange(len(x)), idx]
    zero = np.abs(m) < F(1e-15)
    mm = np.where(zero, F(1), m).astype(F)
    w = (x * x).astype(F)
    scale = np.zeros(len(x), F)
    best = np.zeros(len(x), F)
    q = np.zeros(x.shape, np.int32)
    for t, k in enumerate([0] + list(range(-9, 0)) + list(range(1, 10))):
        inv = (-(F(nmax) + F(0.1) * F(k)) / mm).astype(F)
        l = np.clip(rint(inv[:, None] * x), -nmax, nmax - 1)
        lf = l.astype(F)
        sxl = seqsum(w * x * lf)
        sll = seqsum(w * lf * lf)
        ok = sll > 0
        take = ok & ((t == 0) | (sxl * sxl > best * sll))
        s = (sxl / np.where(ok, sll, F(1))).astype(F)
        scale = np.where(take, s, scale)
        best = np.where(take, (s * sxl).astype(F), best)
        q = np.where(take[:, None], l + nmax, q)
    q = np.where(zero[:, None], 0, q)
    return np.where(zero, F(0), scale).astype(F), q


def q6k_block(x):
    """one block of 256 -> 210 bytes"""
    xs = x.reshape(16, 16)
    gs, q = q6k_fit(xs)
    smax = gs[np.argmax(np.abs(gs))]
    if abs(smax) < F(1e-15):
        return np.zeros(210, np.uint8)  # d = 0 and every byte 0
    scb = np.zeros(16, np.int8)
    isc = F(-128) / smax
    hd = f16(F(1) / isc)
    D = F(hd)
    for g in range(16):
        sc = int(np.clip(rint(isc * gs[g]), -128, 127))
        scb[g] = sc
        step = F(D * F(sc))
        if step == 0:
            continue  # a zero scale keeps the fitted codes
        q[g] = np.clip(rint(xs[g] / step), -32, 31) + 32
    qf = q.reshape(256)
    ql = np.zeros(128, np.uint8)
    qh = np.zeros(64, np.uint8)
    for h in range(2):
        e = 128 * h + np.arange(32)
        ql[64 * h:64 * h + 32] = (qf[e] & 15) | (qf[e + 64] & 15) << 4
        ql[64 * h + 32:64 * h + 64] = (qf[e + 32] & 15) | (qf[e + 96] & 15) << 4
        qh[32 * h:32 * h + 32] = ((qf[e] >> 4) | (qf[e + 32] >> 4) << 2 | (qf[e + 64] >> 4) << 4
                                  | (qf[e + 96] >> 4) << 6)
    return np.concatenate([ql, qh, scb.view(np.uint8), np.array([hd]).view(np.uint8)])


def rows():
    rng = np.random.default_rng(4242)
    k = 512
    x = np.zeros((32, k), np.float64)
    for r in range(8):
        x[r] = rng.standard_normal(k) * [1, 0.02, 0.3, 5, 1e-3, 1, 0.05, 2][r]
    for r in range(8, 16):
        x[r] = rng.standard_t(3, k) * 0.05
    for r in range(16, 24):
        x[r] = rng.laplace(0, 0.03, k)
    for r in range(24, 28):
        x[r] = rng.standard_normal(k) * 0.04
        hit = rng.random(k) < 0.01
        x[r, hit] *= 20
    for r in range(28, 30):
        x[r] = np.abs(rng.standard_normal(k)) * 0.1 + 0.05 * (r - 27)
    x[30] = rng.standard_normal(k) * 0.1
    x[30, :32] = 0
    x[30, 64:80] = 1e-20
    x[31] = rng.standard_normal(k) * (rng.random(k) < 0.1)
    return x.astype(F)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden")
    a = ap.parse_args()
    x = rows()
    q4 = np.stack([np.concatenate([q4k_block(r[i:i + 256]) for i in range(0, r.size, 256)])
                   for r in x])
    q6 = np.stack([np.concatenate([q6k_block(r[i:i + 256]) for i in range(0, r.size, 256)])
                   for r in x])
    d = os.path.join(a.out, "gguf_quant")
    os.makedirs(d, exist_ok=True)
    w = gguf.GGUFWriter(os.path.join(d, "kquant.gguf"), "numla-test")
    w.add_tensor("kx", x)
    w.add_tensor("kx.q4_k", q4, raw_dtype=QT.Q4_K)
    w.add_tensor("kx.q6_k", q6, raw_dtype=QT.Q6_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    # the reference's own error against the plain min/max rounding, for the record
    for name, qt, blocks in (("Q4_K", QT.Q4_K, q4), ("Q6_K", QT.Q6_K, q6)):
        back = gguf.quants.dequantize(blocks, qt)
        print("%s: rms error %.6g of rms %.6g" % (name, np.sqrt(np.mean((back - x) ** 2)),
                                                  np.sqrt(np.mean(x.astype(np.float64) ** 2))))


if __name__ == "__main__":
    main()
