#!/usr/bin/env python3
"""Write the GGUF model goldens: tests/golden/<model>/gguf_<variant>/{model.gguf, expected.json,
expected.safetensors}. Never needed by the build or the tests (the files are committed):

    /opt/pyref/bin/python3 scripts/make_gguf_model_golden.py            # writes tests/golden/
    /opt/pyref/bin/python3 scripts/make_gguf_model_golden.py --out DIR  # elsewhere

Pinned: torch 2.15.0, transformers 5.25.0, gguf 0.19.0, numpy 2.4.6, safetensors 0.8.0.

Each variant is a GGUF file as llama.cpp's converter lays a deepseek2 model out (the keys of
engine/formats/gguf_deepseek2.h, HF tensors under their GGUF names, routed experts stacked),
with its linear weights in ggml block encodings. The file is the truth: the reference is
transformers (DeepseekV2ForCausalLM, fp32, eager) run on the weights the gguf package's numpy
dequantization (gguf.quants.dequantize) gives back from the file, so neither side uses numla's
code. Where the gguf package can quantize a type (Q8_0, Q4_0) the tensor is the quantized HF
weight; for the others (the K-quants, IQ4_XS) valid random blocks are written: random bytes with
the block's fp16 scales (and mins) set so that the weights have the model's unit-gain spread and
mean ~0.

Variants:
  v2lite/gguf_q8_0   tests/golden/v2lite's weights, every linear whose K is a multiple of 32 in
                     Q8_0 (the routed experts' down_proj, K = 16, stays F32 as llama.cpp would
                     keep it), the split MLA layout (attn_k_b + attn_v_b), embedding Q8_0
  v2lite/gguf_q4_0   the same in Q4_0, with the older attn_kv_b layout
  v2lite/gguf_q4_0_split  that file split by the gguf writer into model-0000N-of-0000M.gguf
  v2/gguf_q8_0       tests/golden/v2's weights (q_lora_rank, expert groups, YaRN) in Q8_0 where
                     K % 32 == 0, split layout: the shape llama.cpp loads too (it takes a
                     deepseek2 file without q_lora_rank only with V2-Lite's 27 layers), for
                     scripts/make_gguf_llamacpp_check.py (--v2-only writes just this one)
  tokenizer/bpe8k_gguf/tokenizer.gguf   tests/golden/tokenizer/bpe8k as tokenizer.ggml.* keys
  kq/gguf_mixed      a model of width 256 (K-quants need K % 256 == 0): the linears cycle
                     through Q4_K, Q5_K, Q6_K, IQ4_XS, Q2_K, Q3_K (K % 256 == 0) and Q8_0, Q4_0
                     (the rest), embedding Q6_K, lm_head Q4_K; split layout
Prompts: the first random set (seeded) whose router choices and greedy margins are decisive on
the dequantized model (make_golden.py's thresholds).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402  (config, reference runner, expected-file writer)

import gguf  # noqa: E402
import gguf.quants  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.numpy import save_file as np_save  # noqa: E402

PINNED = {"torch": "2.15.0", "transformers": "5.25.0", "gguf": "0.19.0", "numpy": "2.4.6",
          "safetensors": "0.8.0"}

# byte offsets of the fp16 scale (d) and min (dmin) in each block (kernels/qblock.h)
SCALE_AT = {QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208, None), QT.IQ4_XS: (0, None),
            QT.Q2_K: (80, 82), QT.Q3_K: (108, None), QT.Q8_0: (0, None), QT.Q4_0: (0, None)}
KQUANTS = [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_XS, QT.Q2_K, QT.Q3_K]


def check_versions():
    from importlib.metadata import version
    for pkg, want in PINNED.items():
        if version(pkg) != want:
            sys.exit(f"make_gguf_model_golden: {pkg} {version(pkg)} installed, pinned {want}")


def random_blocks(rows, k, qt, std, rng):
    """Valid random blocks of type qt for a (rows, k) weight of about this std and mean 0."""
    blk, nb = gguf.GGML_QUANT_SIZES[qt]
    raw = rng.integers(0, 256, size=(rows, k // blk, nb), dtype=np.uint8)
    d_at, m_at = SCALE_AT[qt]

    def with_scales(d, m):
        r = raw.copy()
        r[:, :, d_at:d_at + 2] = np.frombuffer(np.float16(d).tobytes(), np.uint8)
        if m_at is not None:
            r[:, :, m_at:m_at + 2] = np.frombuffer(np.float16(m).tobytes(), np.uint8)
        return r

    a = gguf.quants.dequantize(with_scales(1.0, 0.0).reshape(rows, -1), qt)
    b = gguf.quants.dequantize(with_scales(0.0, 1.0).reshape(rows, -1), qt) if m_at else 0 * a
    ratio = -a.mean() / b.mean() if m_at else 0.0
    s = std / float((a + ratio * b).std())
    return with_scales(s, s * ratio).reshape(rows, -1)


def encode(w, qt, rng):
    """(blocks as the file stores them, the gguf package's dequantization of them)."""
    if qt == QT.F32:
        return w.astype(np.float32), w.astype(np.float32)
    if qt in (QT.Q8_0, QT.Q4_0):
        q = gguf.quants.quantize(w.astype(np.float32), qt)
    else:
        q = random_blocks(w.shape[0], w.shape[1], qt, float(w.std()), rng)
    return q, gguf.quants.dequantize(q, qt).astype(np.float32)


# tokenizer.ggml.merges of the model files: none (the goldens feed token ids); llama.cpp
# refuses a gpt2 vocabulary without merges, so the file it checks gets one (unused) pair
MERGES = []


def add_keys(w, c, split, vocab):
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(1 if split else c["num_attention_heads"])
    # transformers 5 writes rope_parameters (rope_type, rope_theta inside); older configs
    # rope_scaling (type) next to rope_theta
    rp = c.get("rope_scaling") or c.get("rope_parameters") or {}
    w.add_rope_freq_base(c.get("rope_theta", rp.get("rope_theta", 10000.0)))
    if rp.get("type", rp.get("rope_type")) != "yarn":
        rp = {}
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_count(c["n_routed_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_group_count(c.get("n_group") or 1)
    w.add_expert_group_used_count(c.get("topk_group") or 1)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_expert_weights_norm(bool(c["norm_topk_prob"]))
    w.add_leading_dense_block_count(c["first_k_dense_replace"])
    w.add_vocab_size(vocab)
    nope, rope, v, kv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    if c.get("q_lora_rank"):
        w.add_q_lora_rank(c["q_lora_rank"])
    w.add_kv_lora_rank(kv)
    if split:
        w.add_key_length(kv + rope)
        w.add_value_length(kv)
        w.add_key_length_mla(nope + rope)
        w.add_value_length_mla(v)
    else:
        w.add_key_length(nope + rope)
        w.add_value_length(v)
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_shared_count(c["n_shared_experts"])
    w.add_expert_weights_scale(c["routed_scaling_factor"])
    w.add_rope_dimension_count(rope)
    if rp:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rp["factor"])
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        w.add_rope_scaling_yarn_beta_fast(rp["beta_fast"])
        w.add_rope_scaling_yarn_beta_slow(rp["beta_slow"])
        w.add_rope_scaling_yarn_log_mul(0.1 * rp["mscale_all_dim"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-llm")
    w.add_token_list(["<t%d>" % i for i in range(vocab)])
    w.add_token_types([1] * vocab)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(c["bos_token_id"])
    w.add_eos_token_id(c["eos_token_id"])


def gguf_name(hf):
    """HF name -> (GGUF name, expert index or None); None for names handled elsewhere."""
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf], None
    p = hf.split(".")
    L, rest = p[2], ".".join(p[3:])
    m = {"input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
         "self_attn.q_proj.weight": "attn_q", "self_attn.q_a_proj.weight": "attn_q_a",
         "self_attn.q_a_layernorm.weight": "attn_q_a_norm", "self_attn.q_b_proj.weight": "attn_q_b",
         "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa",
         "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm", "self_attn.kv_b_proj.weight": "attn_kv_b",
         "self_attn.o_proj.weight": "attn_output", "mlp.gate_proj.weight": "ffn_gate",
         "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down",
         "mlp.gate.weight": "ffn_gate_inp", "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp",
         "mlp.shared_experts.up_proj.weight": "ffn_up_shexp",
         "mlp.shared_experts.down_proj.weight": "ffn_down_shexp"}
    if rest in m:
        return "blk.%s.%s.weight" % (L, m[rest]), None
    if rest.startswith("mlp.experts."):
        e, proj = p[5], p[6]
        return "blk.%s.ffn_%s_exps.weight" % (L, proj.split("_")[0]), int(e)
    raise RuntimeError("no GGUF name for " + hf)


def write_gguf(path, cfg, sd, pick, split, rng, max_tensors=0):
    """Write sd (HF name -> fp32 numpy) as a deepseek2 GGUF; pick(name, K) -> type. Returns the
    HF state dict of the dequantized weights."""
    w = gguf.GGUFWriter(path, "deepseek2", split_max_tensors=max_tensors)
    w.add_name("numla-golden")
    add_keys(w, cfg, split, sd["model.embed_tokens.weight"].shape[0])
    out, stacks, types = {}, {}, {}
    H, nope, v = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    dc = cfg["kv_lora_rank"]
    for hf in sorted(sd):
        x = sd[hf]
        gn, e = gguf_name(hf)
        if x.ndim == 1 or gn.endswith("ffn_gate_inp.weight"):
            w.add_tensor(gn, x.astype(np.float32))
            out[hf] = x.astype(np.float32)
            continue
        if gn.endswith("attn_kv_b.weight") and split:
            kvb = x.reshape(H, nope + v, dc)
            kb = np.ascontiguousarray(kvb[:, :nope, :].transpose(0, 2, 1)).reshape(H * dc, nope)
            vb = np.ascontiguousarray(kvb[:, nope:, :]).reshape(H * v, dc)
            qk, dk = encode(kb, pick(gn.replace("kv_b", "k_b"), nope), rng)
            qv, dv = encode(vb, pick(gn.replace("kv_b", "v_b"), dc), rng)
            L = gn.split(".")[1]
            w.add_tensor("blk.%s.attn_k_b.weight" % L, qk.reshape(H, dc, -1),
                         raw_dtype=types_of(qk, pick(gn.replace("kv_b", "k_b"), nope)))
            w.add_tensor("blk.%s.attn_v_b.weight" % L, qv.reshape(H, v, -1),
                         raw_dtype=types_of(qv, pick(gn.replace("kv_b", "v_b"), dc)))
            dk = dk.reshape(H, dc, nope).transpose(0, 2, 1)
            out[hf] = np.concatenate([dk, dv.reshape(H, v, dc)], axis=1).reshape(H * (nope + v), dc)
            continue
        qt = pick(gn, x.shape[1])
        q, dq = encode(x, qt, rng)
        out[hf] = dq
        if e is not None:
            stacks.setdefault(gn, {})[e] = q
            types[gn] = qt
        else:
            w.add_tensor(gn, q, raw_dtype=types_of(q, qt))
    for gn in sorted(stacks):
        st = np.stack([stacks[gn][i] for i in range(len(stacks[gn]))])
        w.add_tensor(gn, st, raw_dtype=types_of(st, types[gn]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def types_of(q, qt):
    return None if qt == QT.F32 else qt


def reference(cls, spec, cfg_dir, sd, seed):
    """transformers on the dequantized weights: a temp HF dir, loaded back as make_golden does."""
    tmp = tempfile.mkdtemp(prefix="numla_gguf_golden_")
    try:
        shutil.copy(os.path.join(cfg_dir, "config.json"), tmp)
        np_save({k: np.ascontiguousarray(sd[k]) for k in sorted(sd)},
                os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        ref = mg.load_fp32(cls, tmp)
        thr = mg.ROUTER_GAP[spec["cls"]]
        for attempt in range(500):
            pg = torch.Generator().manual_seed(seed * 1000 + attempt)
            prompts = [torch.randint(2, ref.config.vocab_size, (n,), generator=pg).tolist()
                       for n in mg.PROMPT_LENS]
            tensors, _, meta, rgap = mg.run_reference(ref, ref.config, spec, prompts, False)
            if rgap >= thr and mg.min_margin(meta) >= mg.GREEDY_MARGIN:
                break
        else:
            sys.exit("make_gguf_model_golden: no decisive prompt set")
        return ref, tensors, meta, rgap, attempt
    finally:
        shutil.rmtree(tmp)


def build(out_root, model, variant, spec, cfg_dir, sd, pick, split, seed, max_tensors=0):
    d = os.path.join(out_root, model, "gguf_" + variant)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(cfg_dir, "config.json")) as f:
        cfg = json.load(f)
    rng = np.random.default_rng(seed)
    deq = write_gguf(os.path.join(d, "model.gguf"), cfg, sd, pick, split, rng, max_tensors)
    cls = mg.model_class(spec)
    ref, tensors, meta, rgap, attempt = reference(cls, spec, cfg_dir, deq, seed)
    parts = sorted(f for f in os.listdir(d) if f.endswith(".gguf"))
    kinds = sorted({t.tensor_type.name for f in parts
                    for t in gguf.GGUFReader(os.path.join(d, f)).tensors})
    extra = {"model": "%s/gguf_%s" % (model, variant),
             "weights": "model.gguf; expected outputs from transformers on the gguf package's "
                        "dequantization of its tensors",
             "tensor_types": kinds, "attn_layout": "attn_k_b + attn_v_b" if split else "attn_kv_b",
             "prompt_seed_attempt": attempt, "min_router_selection_gap": rgap,
             "min_greedy_margin": mg.min_margin(meta),
             "min_prompt_margin": min(p["min_prompt_margin"] for p in meta)}
    mg.write_expected(d, tensors, meta, mg.expected_scale(ref.config), mg.rope_info(ref), extra)
    print("%s/gguf_%s: %d bytes in %d part(s), types %s, attempt %d, router gap %.3g, "
          "min margin %.3g"
          % (model, variant, sum(os.path.getsize(os.path.join(d, f)) for f in parts), len(parts),
             kinds, attempt,
             rgap, mg.min_margin(meta)))


def load_sd(d):
    with safe_open(os.path.join(d, "model.safetensors"), "np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


KQ = dict(mg.MODELS["v2lite"], seed=2401, hidden_size=256, intermediate_size=256,
          moe_intermediate_size=32, num_attention_heads=8, num_key_value_heads=8,
          n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3)


def make_kq(out_root):
    """The width-256 model: made like make_golden.py's (unit-gain init), saved as an HF dir."""
    d = os.path.join(out_root, "kq")
    os.makedirs(d, exist_ok=True)
    cfg = mg.make_config(KQ)
    cfg.num_hidden_layers = 3
    cfg.first_k_dense_replace = 1
    cfg.vocab_size = 256
    torch.manual_seed(KQ["seed"])
    model = mg.model_class(KQ)(cfg)
    mg.init_weights(model, KQ, torch.Generator().manual_seed(KQ["seed"]))
    tmp = tempfile.mkdtemp(prefix="numla_kq_")
    model.save_pretrained(tmp)
    mg.restyle_config(os.path.join(tmp, "config.json"), KQ)
    shutil.copy(os.path.join(tmp, "config.json"), os.path.join(d, "config.json"))
    return tmp


def write_tokenizer_gguf(out_root, src_root):
    """tests/golden/tokenizer/bpe8k's tokenizer as a GGUF file's tokenizer.* keys, the way
    llama.cpp's converter writes a gpt2 vocabulary: tokens by id, special added tokens as type 3
    (control), merges as "a b", pre deepseek-v3 (its pre-tokenizer), bos/eos ids."""
    d = os.path.join(out_root, "tokenizer", "bpe8k_gguf")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(src_root, "tokenizer", "bpe8k", "tokenizer.json")) as f:
        tj = json.load(f)
    with open(os.path.join(src_root, "tokenizer", "bpe8k", "tokenizer_config.json")) as f:
        tc = json.load(f)
    vocab = dict(tj["model"]["vocab"])
    types = {}
    for a in tj["added_tokens"]:
        vocab[a["content"]] = a["id"]
        types[a["id"]] = 3 if a["special"] else 4
    n = max(vocab.values()) + 1
    toks = [""] * n
    for t, i in vocab.items():
        toks[i] = t
    assert all(toks), "ids with no token"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    bos = tc["bos_token"]["content"] if isinstance(tc["bos_token"], dict) else tc["bos_token"]
    w = gguf.GGUFWriter(os.path.join(d, "tokenizer.gguf"), "deepseek2")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-v3")
    w.add_token_list(toks)
    w.add_token_types([types.get(i, 1) for i in range(n)])
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab[bos])
    w.add_eos_token_id(vocab[tc["eos_token"]])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("tokenizer/bpe8k_gguf/tokenizer.gguf: %d tokens, %d merges" % (n, len(merges)))


def write_quant_ref(out_root):
    """gguf_quant/quant.gguf: F32 rows "x" (normal, tiny, large, a zero block, a negative
    extreme, exact halves) and the gguf package's Q8_0 / Q4_0 quantization of them ("x.q8_0",
    "x.q4_0"): the oracle of kernels/qblock_quant.h."""
    d = os.path.join(out_root, "gguf_quant")
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(77)
    x = (rng.standard_normal((6, 256)) * np.array([1, 1e-3, 30, 1, 1, 1])[:, None]).astype(np.float32)
    x[3, :32] = 0
    x[4, 5] = -9.0
    x[5, ::7] = 0.5
    w = gguf.GGUFWriter(os.path.join(d, "quant.gguf"), "numla-test")
    w.add_tensor("x", x)
    w.add_tensor("x.q8_0", gguf.quants.quantize(x, QT.Q8_0), raw_dtype=QT.Q8_0)
    w.add_tensor("x.q4_0", gguf.quants.quantize(x, QT.Q4_0), raw_dtype=QT.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/golden")
    ap.add_argument("--src", default="tests/golden", help="where v2lite/ (fp32) is read from")
    ap.add_argument("--tokenizer-only", action="store_true")
    ap.add_argument("--split-only", action="store_true",
                    help="v2lite q8_0 / q4_0 and the split set only (no kq)")
    ap.add_argument("--v2-only", action="store_true",
                    help="v2/gguf_q8_0 only (the V2 shape with q_lora_rank, which llama.cpp "
                         "also loads: scripts/make_gguf_llamacpp_check.py)")
    a = ap.parse_args()
    check_versions()
    if a.v2_only:
        global MERGES
        MERGES = ["<t2> <t3>"]
        # GGUF's deepseek2 keys carry one YaRN mscale (yarn_log_multiplier = 0.1 ·
        # mscale_all_dim) and readers take mscale = mscale_all_dim, as DeepSeek's own configs
        # have it; tests/golden/v2 has them apart (1.0 / 0.5), so its GGUF variant's reference
        # runs with mscale = mscale_all_dim
        v2 = os.path.join(a.src, "v2")
        tmp = tempfile.mkdtemp(prefix="numla_v2gguf_")
        try:
            with open(os.path.join(v2, "config.json")) as f:
                c = json.load(f)
            rp = c.get("rope_parameters") or c.get("rope_scaling")
            rp["mscale"] = rp["mscale_all_dim"]
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump(c, f, indent=2)
            build(a.out, "v2", "q8_0", mg.MODELS["v2"], tmp, load_sd(v2),
                  lambda name, k: QT.Q8_0 if k % 32 == 0 else QT.F32, True, 2412)
        finally:
            shutil.rmtree(tmp)
        return
    write_tokenizer_gguf(a.out, a.src)
    write_quant_ref(a.out)
    if a.tokenizer_only:
        return
    src = os.path.join(a.src, "v2lite")
    sd = load_sd(src)
    spec = mg.MODELS["v2lite"]

    def only(qt):
        return lambda name, k: qt if k % 32 == 0 else QT.F32

    build(a.out, "v2lite", "q8_0", spec, src, sd, only(QT.Q8_0), True, 2408)
    build(a.out, "v2lite", "q4_0", spec, src, sd, only(QT.Q4_0), False, 2404)
    if True:
        # the same file as gguf_q4_0, split by gguf's writer (split.* keys, 3 parts)
        build(a.out, "v2lite", "q4_0_split", spec, src, sd, only(QT.Q4_0), False, 2404, 40)
    if a.split_only:
        return

    tmp = make_kq(a.out)
    try:
        ksd = load_sd(tmp)
        n = {"k": 0, "s": 0}
        seen = {}

        def mixed(name, k):  # one type per GGUF tensor (the experts of a stack share it)
            if name not in seen:
                seen[name] = mixed_new(name, k)
            return seen[name]

        def mixed_new(name, k):
            if name == "token_embd.weight":
                return QT.Q6_K
            if name == "output.weight":
                return QT.Q4_K
            if k % 256 == 0:
                n["k"] += 1
                return KQUANTS[(n["k"] - 1) % len(KQUANTS)]
            if k % 32 == 0:
                n["s"] += 1
                return (QT.Q8_0, QT.Q4_0)[(n["s"] - 1) % 2]
            return QT.F32

        build(a.out, "kq", "mixed", KQ, tmp, ksd, mixed, True, 2499)
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
