#!/usr/bin/env python3
"""scripts/check_golden.py — an independent numpy re-implementation of the model math written
down in tests/golden/README.md, checked against the golden data.

It uses neither torch nor transformers: it parses config.json (both styles) and the safetensors
files by hand (bf16 included), runs the forward in float64 and compares logits, greedy tokens,
debug intermediates and router choices with what make_golden.py stored. If it passes, the
README's description (scale, YaRN, RoPE pairing, MLA, V2/V3 routing) is complete enough to
reproduce the reference, which is what numla's C engine has to do.

    python3 scripts/check_golden.py [tests/golden]     # needs only numpy
    python3 scripts/check_golden.py --bf16-act         # calibration only: emulate an engine
                                                       # with bf16 matmul inputs + bf16 cache
"""

import json
import math
import os
import struct
import sys

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = data[base + b:base + e]
        dt = info["dtype"]
        if dt == "F32":
            a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif dt == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            a = a.astype(np.float64)
        elif dt == "I32":
            a = np.frombuffer(raw, dtype="<i4").copy()
        elif dt == "I64":
            a = np.frombuffer(raw, dtype="<i8").copy()
        elif dt == "I8":
            a = np.frombuffer(raw, dtype="i1").copy()
        elif dt == "F8_E4M3":  # e4m3fn: bias 7, no infinities, 0x7F / 0xFF NaN
            b = np.frombuffer(raw, dtype="u1").astype(np.int64)
            e, m = (b >> 3) & 15, (b & 7).astype(np.float64)
            mag = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
            mag = np.where((b & 0x7F) == 0x7F, np.nan, mag)
            a = np.where(b >> 7, -mag, mag)
        elif dt == "F8_E8M0":  # an exponent byte: 2^(b - 127), 0xFF NaN
            b = np.frombuffer(raw, dtype="u1").astype(np.float64)
            a = np.where(b == 255, np.nan, 2.0 ** (b - 127))
        else:
            raise ValueError("%s: %s has unsupported dtype %s" % (path, name, dt))
        out[name] = a.reshape(info["shape"])
    return out


def read_config(path):
    with open(path) as f:
        c = json.load(f)
    if "rope_parameters" in c:
        rp = dict(c["rope_parameters"])
        theta = rp["rope_theta"]
        rtype = rp["rope_type"]
    else:
        rp = dict(c["rope_scaling"])
        theta = c["rope_theta"]
        rtype = rp.get("type", rp.get("rope_type"))
    assert rtype == "yarn", path
    c["_rope"] = rp
    c["_theta"] = theta
    return c


def mscale(f, s):
    return 1.0 if f <= 1 else 0.1 * s * math.log(f) + 1.0


def yarn(c):
    rp, theta, d = c["_rope"], c["_theta"], c["qk_rope_head_dim"]
    factor, L0 = rp["factor"], rp["original_max_position_embeddings"]

    def corr(n):
        return d * math.log(L0 / (2 * math.pi * n)) / (2 * math.log(theta))

    low = max(math.floor(corr(rp["beta_fast"])), 0)
    high = min(math.ceil(corr(rp["beta_slow"])), d - 1)
    if low == high:
        high += 0.001
    i = np.arange(d // 2, dtype=np.float64)
    ramp = np.clip((i - low) / (high - low), 0, 1)
    # HF evaluates these in fp32; mirror that so angles agree to the last bit that matters
    pos_freq = np.float32(theta) ** (np.arange(0, d, 2, dtype=np.float32) / np.float32(d))
    inv = (ramp / (factor * pos_freq.astype(np.float64)) + (1 - ramp) / pos_freq.astype(np.float64))
    inv = inv.astype(np.float32)
    att = mscale(factor, rp.get("mscale", 1.0)) / mscale(factor, rp.get("mscale_all_dim", 0.0)) \
        if rp.get("mscale") and rp.get("mscale_all_dim") else mscale(factor, 1.0)
    scale = (c["qk_nope_head_dim"] + c["qk_rope_head_dim"]) ** -0.5 * \
        mscale(factor, rp.get("mscale_all_dim", 0.0)) ** 2
    return inv, att, scale


BF16_ACT = False  # --bf16-act: emulate bf16 matmul inputs and a bf16 MLA cache (calibration)


def bf16(x):
    """Round to the nearest bf16 (ties to even), returned as float64."""
    if not BF16_ACT:
        return x
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return u.view(np.float32).astype(np.float64)


def mm(x, w):
    return bf16(x) @ w.T


def rmsnorm(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def silu(x):
    return x / (1 + np.exp(-x))


def rope_pairs(x, pos, inv, att):
    """Rotate adjacent pairs (x_2i, x_2i+1) by pos*inv_i; output in adjacent-pair order."""
    ang = (pos[:, None].astype(np.float32) * inv[None, :]).astype(np.float64)  # fp32 angles
    cos, sin = np.cos(ang) * att, np.sin(ang) * att
    if x.ndim == 3:  # (T, H, d)
        cos, sin = cos[:, None, :], sin[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = x0 * cos - x1 * sin
    y[..., 1::2] = x1 * cos + x0 * sin
    return y


def route(c, W, bias, x):
    """Returns (ids sorted ascending, weights) per token."""
    E, K = c["n_routed_experts"], c["num_experts_per_tok"]
    G, TG = c.get("n_group") or 1, c.get("topk_group") or 1
    logits = x @ W.T
    v3 = c["model_type"] == "deepseek_v3"
    if v3:
        s = 1 / (1 + np.exp(-logits))
        choice = s + bias
        gscore = np.sort(choice.reshape(-1, G, E // G), -1)[..., -2:].sum(-1)
    else:
        z = np.exp(logits - logits.max(-1, keepdims=True))
        s = z / z.sum(-1, keepdims=True)
        choice = s.copy()
        gscore = choice.reshape(-1, G, E // G).max(-1)
    method = c.get("topk_method", "noaux_tc" if v3 else "greedy")
    if method in ("group_limited_greedy", "noaux_tc") and G > 1:
        keep = np.argsort(-gscore, -1, kind="stable")[:, :TG]
        mask = np.zeros_like(gscore, dtype=bool)
        np.put_along_axis(mask, keep, True, -1)
        mask = np.repeat(mask, E // G, -1)
        choice = np.where(mask, choice, -np.inf)
    ids = np.sort(np.argsort(-choice, -1, kind="stable")[:, :K], -1)
    w = np.take_along_axis(s, ids, -1)
    if v3:
        if c.get("norm_topk_prob"):
            w = w / (w.sum(-1, keepdims=True) + 1e-20)
        w = w * c["routed_scaling_factor"]
    else:
        # HF 5.23 DeepseekV2: norm_topk_prob ignored, scaling always (golden V2 has it false)
        assert not c.get("norm_topk_prob")
        w = w * c["routed_scaling_factor"]
    return logits, ids, w


def forward(c, W, toks, trace=None):
    T = len(toks)
    H, dn, dr, dv, R = (c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"],
                        c["v_head_dim"], c["kv_lora_rank"])
    eps = c["rms_norm_eps"]
    inv, att, scale = yarn(c)
    pos = np.arange(T)
    h = W["model.embed_tokens.weight"][toks]
    if trace is not None:
        trace["embed"] = h.copy()
    for j in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % j
        x = rmsnorm(h, W[p + "input_layernorm.weight"], eps)
        if c.get("q_lora_rank"):
            q = rmsnorm(mm(x, W[p + "self_attn.q_a_proj.weight"]),
                        W[p + "self_attn.q_a_layernorm.weight"], 1e-6)
            q = mm(q, W[p + "self_attn.q_b_proj.weight"])
        else:
            q = mm(x, W[p + "self_attn.q_proj.weight"])
        q = q.reshape(T, H, dn + dr)
        q_nope, q_pe = q[..., :dn], rope_pairs(q[..., dn:], pos, inv, att)
        ckv = mm(x, W[p + "self_attn.kv_a_proj_with_mqa.weight"])
        cl = rmsnorm(ckv[:, :R], W[p + "self_attn.kv_a_layernorm.weight"], 1e-6)
        k_pe = rope_pairs(ckv[:, R:], pos, inv, att)
        cl, k_pe = bf16(cl), bf16(k_pe)  # the MLA cache
        q_nope, q_pe = bf16(q_nope), bf16(q_pe)
        kv = mm(cl, W[p + "self_attn.kv_b_proj.weight"]).reshape(T, H, dn + dv)
        k_nope, v = kv[..., :dn], kv[..., dn:]
        s = (np.einsum("thd,shd->hts", q_nope, k_nope) + np.einsum("thd,sd->hts", q_pe, k_pe)) * scale
        s = s + np.triu(np.full((T, T), -np.inf), 1)[None]
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, H * dv)
        a = mm(o, W[p + "self_attn.o_proj.weight"])
        h = h + a
        x = rmsnorm(h, W[p + "post_attention_layernorm.weight"], eps)

        def mlp(pre, xx):
            g = mm(xx, W[pre + "gate_proj.weight"])
            u = mm(xx, W[pre + "up_proj.weight"])
            return mm(silu(g) * u, W[pre + "down_proj.weight"])

        if j >= c["first_k_dense_replace"]:
            rl, ids, w = route(c, W[p + "mlp.gate.weight"], W.get(p + "mlp.gate.e_score_correction_bias"), x)
            m = mlp(p + "mlp.shared_experts.", x)
            for t in range(T):
                for e, we in zip(ids[t], w[t]):
                    m[t] += we * mlp(p + "mlp.experts.%d." % e, x[t:t + 1])[0]
            if trace is not None and j == c["first_k_dense_replace"]:
                trace["router"] = (rl, ids, w)
        else:
            m = mlp(p + "mlp.", x)
        h = h + m
        if trace is not None:
            trace["layer%d" % j] = dict(attn_out=a, mlp_out=m, out=h.copy(), kv_c=cl, k_pe=k_pe)
    h = rmsnorm(h, W["model.norm.weight"], eps)
    return mm(h, W["lm_head.weight"]), scale, inv, att


def close(name, got, ref, tol):
    d = float(np.abs(got - ref).max())
    ok = d <= tol
    if not ok:
        print("  MISMATCH %s: max |diff| %.3g > %.3g" % (name, d, tol))
    return ok, d


def check_dir(d, with_debug):
    c = read_config(os.path.join(d, "config.json"))
    W = load_safetensors(os.path.join(d, "model.safetensors"))
    exp = load_safetensors(os.path.join(d, "expected.safetensors"))
    with open(os.path.join(d, "expected.json")) as f:
        ej = json.load(f)
    ok, worst = True, 0.0
    for i, pr in enumerate(ej["prompts"]):
        toks = pr["tokens"]
        trace = {} if (with_debug and i == 0) else None
        logits, scale, inv, att = forward(c, W, toks, trace)
        if i == 0:
            # (printed individually only through the overall verdict)
            ok &= abs(scale - ej["softmax_scale"]) <= 1e-12 * scale
            ok &= abs(att - ej["rope_attention_scaling"]) <= 1e-12
            ref_inv = np.array(ej["rope_inv_freq"], dtype=np.float64)
            ok &= bool(np.all(np.abs(inv - ref_inv) <= 4e-7 * ref_inv))  # fp32 ulp level
        o, dd = close("prompt%d.logits" % i, logits, exp["prompt%d.logits" % i], 2e-3)
        ok &= o
        worst = max(worst, dd)
        seq = list(toks)
        for n in range(len(pr["greedy"])):  # greedy by full recompute (no cache)
            lg = logits if n == 0 else forward(c, W, seq)[0]
            t = int(np.argmax(lg[-1]))
            if t != pr["greedy"][n]:
                print("  MISMATCH greedy prompt%d step %d: %d vs %d" % (i, n, t, pr["greedy"][n]))
                ok = False
                break
            seq.append(t)
        if trace is not None:
            D = load_safetensors(os.path.join(d, "debug.safetensors"))
            ok &= close("embed", trace["embed"], D["prompt0.embed"], 1e-6)[0]
            for j in range(c["num_hidden_layers"]):
                for k, v in trace["layer%d" % j].items():
                    ref = D["prompt0.layer%d.%s" % (j, k)]
                    ok &= close("layer%d.%s" % (j, k), v, ref, 1e-4 * max(1.0, float(np.abs(ref).max())))[0]
            k0 = c["first_k_dense_replace"]
            rl, ids, w = trace["router"]
            ok &= close("router_logits", rl, D["prompt0.layer%d.router_logits" % k0], 1e-4)[0]
            ok &= bool(np.array_equal(ids, D["prompt0.layer%d.topk_ids" % k0]))
            ok &= close("topk_weights", w, D["prompt0.layer%d.topk_weights" % k0], 1e-5)[0]
    print("%-22s %s  max |logit diff| vs reference %.3g" % (os.path.relpath(d), "ok" if ok else "FAIL", worst))
    return ok


def calibrate_bf16(root):
    """Not a check: how far a bf16-activation engine lands from the bf16 expectations."""
    global BF16_ACT
    BF16_ACT = True
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name, "model_bf16")
        if not os.path.isfile(os.path.join(d, "config.json")):
            continue
        c = read_config(os.path.join(d, "config.json"))
        W = load_safetensors(os.path.join(d, "model.safetensors"))
        exp = load_safetensors(os.path.join(d, "expected.safetensors"))
        with open(os.path.join(d, "expected.json")) as f:
            ej = json.load(f)
        worst, flips, agree = 0.0, 0, 0
        for i, pr in enumerate(ej["prompts"]):
            lg = forward(c, W, pr["tokens"])[0]
            ref = exp["prompt%d.logits" % i]
            worst = max(worst, float(np.abs(lg - ref).max()))
            flips += int((lg.argmax(-1) != ref.argmax(-1)).sum())
            seq = list(pr["tokens"])
            for n, t_ref in enumerate(pr["greedy"]):
                t = int(np.argmax(forward(c, W, seq)[0][-1]))
                if t != t_ref:
                    break
                agree += 1
                seq.append(t)
        print("%-22s bf16 activations: max |logit diff| %.3g, prompt argmax flips %d, "
              "greedy tokens matching before first divergence %d/%d"
              % (os.path.relpath(d), worst, flips, agree, 16 * len(ej["prompts"])))


def main():
    if "--bf16-act" in sys.argv:
        sys.argv.remove("--bf16-act")
        root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "golden")
        calibrate_bf16(root)
        return
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "golden")
    ok = True
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isfile(os.path.join(d, "config.json")):
            continue
        ok &= check_dir(d, True)
        ok &= check_dir(os.path.join(d, "model_bf16"), False)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
