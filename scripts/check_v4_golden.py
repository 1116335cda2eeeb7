#!/usr/bin/env python3
"""scripts/check_v4_golden.py — an independent numpy re-implementation of DeepSeek-V4's forward
(tests/golden/README.md, "DeepSeek-V4"), checked against tests/golden/v4/.

No torch, no transformers: it reads DeepSeek's config.json spelling and tensor names with
check_golden.py's own safetensors parser (bf16 and I32 included), computes the YaRN frequencies
itself, and runs the whole forward in float64 without a cache (sliding window, CSA compressor
with its overlapping windows, lightning indexer and top-k, HCA compressor, attention sinks, the
inverse rotation of the output, the grouped output projection, mHC with Sinkhorn, hash and
routed sqrtsoftplus MoE with swiglu_limit, the hyper-head). It compares the prompt logits with
expected.safetensors and checks that the greedy tokens of expected.json are the argmax of its
own logits over prompt + continuation. So the README's description is complete enough to
reproduce the reference.

    python3 scripts/check_v4_golden.py [tests/golden/v4]     # needs only numpy
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_golden import load_safetensors  # noqa: E402

LOGIT_TOL = 1e-3


def rms(x, eps, w=None):
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if w is None else y * w


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def silu(x):
    return x * sigmoid(x)


def inv_freq_plain(theta, dim):
    return 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def inv_freq_yarn(theta, dim, rs):
    """YaRN frequencies (factor, original_max_position_embeddings, beta_fast, beta_slow)."""
    f, L0 = rs["factor"], rs["original_max_position_embeddings"]

    def corr(n):
        return dim * math.log(L0 / (n * 2 * math.pi)) / (2 * math.log(theta))

    lo = max(math.floor(corr(rs["beta_fast"])), 0)
    hi = min(math.ceil(corr(rs["beta_slow"])), dim - 1)
    if lo == hi:
        hi += 0.001
    pos = theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
    extrap = 1 - ramp  # 1: keep the original frequency (high frequencies)
    return (1.0 / (f * pos)) * (1 - extrap) + (1.0 / pos) * extrap


def rope(x, pos, inv, sign=1.0):
    """Rotate the last 2*len(inv) channels of x (..., T, ...) in adjacent pairs by pos*inv.
    x: (T, ..., D); pos: (T,). Angles in fp32 as the reference computes them."""
    rd = 2 * len(inv)
    ang = (pos.astype(np.float32)[:, None] * inv.astype(np.float32)[None, :]).astype(np.float64)
    c, s = np.cos(ang), sign * np.sin(ang)
    shape = (len(pos),) + (1,) * (x.ndim - 2) + (rd // 2,)
    c, s = c.reshape(shape), s.reshape(shape)
    y = x.copy()
    a, b = x[..., -rd::2], x[..., -rd + 1::2]
    y[..., -rd::2] = a * c - b * s
    y[..., -rd + 1::2] = b * c + a * s
    return y


class V4:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            self.c = json.load(f)
        self.W = load_safetensors(os.path.join(d, "model.safetensors"))
        self.dequantize()
        c = self.c
        self.eps = c["rms_norm_eps"]
        self.D = c["head_dim"]
        self.rd = c["qk_rope_head_dim"]
        self.inv_main = inv_freq_plain(c["rope_theta"], self.rd)
        rs = c.get("rope_scaling")
        if rs and rs.get("type", rs.get("rope_type")) == "yarn":
            self.inv_comp = inv_freq_yarn(c["compress_rope_theta"], self.rd, rs)
        else:
            self.inv_comp = inv_freq_plain(c["compress_rope_theta"], self.rd)
        n = c["num_hidden_layers"]
        self.ratio = c["compress_ratios"][:n]
        self.hash = [j < c["num_hash_layers"] for j in range(n)]

    def dequantize(self):
        """The published FP8 / FP4 form (tests/golden/README.md, docs/quantization.md): P.weight
        with P.scale (E8M0, already 2^(s - 127) here): F8_E4M3 codes x the scale of their
        128 x 128 block; I8 bytes of two e2m1 codes (element 2j in byte j's low nibble) x the
        scale of their 32."""
        e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
        for sname in [k for k in self.W if k.endswith(".scale")]:
            wname = sname[: -len(".scale")] + ".weight"
            q, s = self.W.pop(wname), self.W.pop(sname)
            if q.dtype == np.int8:
                u = q.view(np.uint8).astype(np.int64)
                v = np.stack([e2m1[u & 15], e2m1[u >> 4]], axis=-1).reshape(q.shape[0], -1)
                self.W[wname] = v * np.repeat(s, 32, axis=1)
            else:
                n, k = q.shape
                self.W[wname] = q * np.repeat(np.repeat(s, 128, axis=0)[:n], 128, axis=1)[:, :k]

    def w(self, name):
        return self.W[name]

    # --- compressors ------------------------------------------------------------------------
    def compress(self, p, h, rate, dim, overlap):
        """Compressed entries (n_windows, dim) of h (T, hidden), RoPE'd at w*rate."""
        T = h.shape[0]
        n = T // rate
        kv = h @ self.w(p + "wkv.weight").T
        g = h @ self.w(p + "wgate.weight").T
        ape = self.w(p + "ape")
        out = np.zeros((n, dim))
        for wi in range(n):
            sl = slice(wi * rate, (wi + 1) * rate)
            gw = g[sl] + ape
            if overlap:  # previous window's first half + this window's second half
                vals, gates = [kv[sl, dim:]], [gw[:, dim:]]
                if wi > 0:
                    ps = slice((wi - 1) * rate, wi * rate)
                    vals.insert(0, kv[ps, :dim])
                    gates.insert(0, (g[ps] + ape)[:, :dim])
                vals, gates = np.concatenate(vals), np.concatenate(gates)
            else:
                vals, gates = kv[sl], gw
            out[wi] = np.sum(softmax(gates, axis=0) * vals, axis=0)
        out = rms(out, self.eps, self.w(p + "norm.weight"))
        return rope(out, np.arange(n) * rate, self.inv_comp)

    # --- attention --------------------------------------------------------------------------
    def attention(self, j, h, toks):
        c, D, eps = self.c, self.D, self.eps
        p = "layers.%d.attn." % j
        T, H = h.shape[0], c["num_attention_heads"]
        pos = np.arange(T)
        inv = self.inv_main if self.ratio[j] == 0 else self.inv_comp
        qr = rms(h @ self.w(p + "wq_a.weight").T, eps, self.w(p + "q_norm.weight"))
        q = rms((qr @ self.w(p + "wq_b.weight").T).reshape(T, H, D), eps)
        q = rope(q, pos, inv)
        kv = rope(rms(h @ self.w(p + "wkv.weight").T, eps, self.w(p + "norm.weight")), pos, inv)
        rate = self.ratio[j]
        comp = None
        if rate:
            comp = self.compress(p + "compressor.", h, rate, D, rate == 4)
        if rate == 4:
            Di, Hi = c["index_head_dim"], c["index_n_heads"]
            kidx = self.compress(p + "indexer.compressor.", h, rate, Di, True)
            qi = rope((qr @ self.w(p + "indexer.wq_b.weight").T).reshape(T, Hi, Di), pos,
                      self.inv_comp)
            wts = (h @ self.w(p + "indexer.weights_proj.weight").T) * Hi ** -0.5
            isc = np.maximum(np.einsum("thd,wd->thw", qi, kidx), 0) * Di ** -0.5
            isc = np.einsum("th,thw->tw", wts, isc)
        sinks = self.w(p + "attn_sink")
        out = np.zeros((T, H, D))
        scale = D ** -0.5
        for t in range(T):
            keys = [kv[max(0, t - c["sliding_window"] + 1): t + 1]]
            if rate:
                vis = (t + 1) // rate
                if rate == 4 and vis > c["index_topk"]:
                    sel = np.argsort(-isc[t, :vis], kind="stable")[: c["index_topk"]]
                    keys.append(comp[np.sort(sel)])
                elif vis:
                    keys.append(comp[:vis])
            K = np.concatenate(keys)
            lg = q[t] @ K.T * scale  # (H, n)
            lg = np.concatenate([lg, sinks[:, None]], axis=1)
            pr = softmax(lg, axis=1)[:, :-1]
            out[t] = pr @ K
        out = rope(out, pos, inv, sign=-1.0)
        G, r = c["o_groups"], c["o_lora_rank"]
        wa = self.w(p + "wo_a.weight").reshape(G, r, -1)
        og = out.reshape(T, G, -1)
        y = np.einsum("tgi,gri->tgr", og, wa).reshape(T, G * r)
        return y @ self.w(p + "wo_b.weight").T

    # --- MoE --------------------------------------------------------------------------------
    def mlp(self, p, x, L):
        g = np.minimum(x @ self.w(p + "w1.weight").T, L)
        u = np.clip(x @ self.w(p + "w3.weight").T, -L, L)
        return (silu(g) * u) @ self.w(p + "w2.weight").T

    def moe(self, j, x, toks):
        c = self.c
        p = "layers.%d.ffn." % j
        L, K = c["swiglu_limit"], c["num_experts_per_tok"]
        s = np.sqrt(np.log1p(np.exp(x @ self.w(p + "gate.weight").T)))
        if self.hash[j]:
            idx = self.w(p + "gate.tid2eid")[np.asarray(toks)]
        else:
            idx = np.argsort(-(s + self.w(p + "gate.bias")), axis=1, kind="stable")[:, :K]
        y = self.mlp(p + "shared_experts.", x, L)
        for t in range(x.shape[0]):
            wt = s[t, idx[t]]
            wt = wt / (wt.sum() + 1e-20) * c["routed_scaling_factor"]
            for e, we in zip(idx[t], wt):
                y[t] += we * self.mlp(p + "experts.%d." % e, x[t:t + 1], L)[0]
        return y

    # --- mHC --------------------------------------------------------------------------------
    def hc(self, pre_name, X):
        c, n = self.c, self.c["hc_mult"]
        T = X.shape[0]
        fn, base, sc = (self.w(pre_name + s) for s in ("fn", "base", "scale"))
        mix = rms(X.reshape(T, -1), self.eps) @ fn.T
        pre = sigmoid(mix[:, :n] * sc[0] + base[:n]) + c["hc_eps"]
        post = 2 * sigmoid(mix[:, n:2 * n] * sc[1] + base[n:2 * n])
        comb = softmax(mix[:, 2 * n:].reshape(T, n, n) * sc[2] + base[2 * n:].reshape(n, n),
                       axis=-1) + c["hc_eps"]
        comb = comb / (comb.sum(axis=-2, keepdims=True) + c["hc_eps"])
        for _ in range(c["hc_sinkhorn_iters"] - 1):
            comb = comb / (comb.sum(axis=-1, keepdims=True) + c["hc_eps"])
            comb = comb / (comb.sum(axis=-2, keepdims=True) + c["hc_eps"])
        collapsed = np.einsum("tj,tjd->td", pre, X)
        return post, comb, collapsed

    def forward(self, toks):
        c = self.c
        x = self.w("embed.weight")[np.asarray(toks)]
        X = np.repeat(x[:, None, :], c["hc_mult"], axis=1)
        for j in range(c["num_hidden_layers"]):
            p = "layers.%d." % j
            post, comb, col = self.hc(p + "hc_attn_", X)
            a = self.attention(j, rms(col, self.eps, self.w(p + "attn_norm.weight")), toks)
            X = post[:, :, None] * a[:, None, :] + np.einsum("tjk,tjd->tkd", comb, X)
            post, comb, col = self.hc(p + "hc_ffn_", X)
            m = self.moe(j, rms(col, self.eps, self.w(p + "ffn_norm.weight")), toks)
            X = post[:, :, None] * m[:, None, :] + np.einsum("tjk,tjd->tkd", comb, X)
        T = X.shape[0]
        mix = rms(X.reshape(T, -1), self.eps) @ self.w("hc_head_fn").T
        pre = sigmoid(mix * self.w("hc_head_scale")[0] + self.w("hc_head_base")) + c["hc_eps"]
        y = rms(np.einsum("tj,tjd->td", pre, X), self.eps, self.w("norm.weight"))
        return y @ self.w("head.weight").T


def check_dir(d):
    m = V4(d)
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    ref = load_safetensors(os.path.join(d, "expected.safetensors"))
    ok = True
    for name, mine in (("rope_inv_freq", m.inv_main), ("compress_rope_inv_freq", m.inv_comp)):
        err = float(np.max(np.abs(np.asarray(exp[name]) - mine) / mine))
        if err > 1e-6:
            print("  %s: %s rel err %.3g" % (d, name, err))
            ok = False
    worst, ntok = 0.0, 0
    for i, p in enumerate(exp["prompts"]):
        toks, greedy = p["tokens"], p["greedy"]
        lg = m.forward(toks + greedy[:-1])
        n = len(toks)
        err = float(np.max(np.abs(lg[:n] - ref["prompt%d.logits" % i])))
        worst = max(worst, err)
        if err > LOGIT_TOL:
            print("  %s prompt %d: logits max err %.3g > %g" % (d, i, err, LOGIT_TOL))
            ok = False
        mine = [int(np.argmax(lg[n - 1 + k])) for k in range(len(greedy))]
        ntok += len(greedy)
        if mine != greedy:
            print("  %s prompt %d: greedy %s vs %s" % (d, i, mine, greedy))
            ok = False
    print("%s: logits max abs err %.3g (tol %g), %d greedy tokens %s" % (
        d, worst, LOGIT_TOL, ntok, "match" if ok else "DIFFER"))
    return ok


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden", "v4")
    ok = all([check_dir(os.path.join(root, s)) for s in ("model_fp32", "model_bf16", "model_fp8")])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
