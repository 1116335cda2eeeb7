#!/usr/bin/env python3
"""scripts/make_v4_gguf_golden.py — the GGUF `deepseek4` goldens of tests/golden/v4 (README
"DeepSeek-V4 as GGUF"), made with llama.cpp's own converter from tests/golden/v4/model_fp8:

  model_fp8.gguf       scripts/make_v4_gguf.py --fp8-as-bf16: the same values as model_fp8
                       (BF16 projections, MXFP4 experts), so model_fp8's expectations hold;
  model_fp8_q8.gguf    the converter's default form of an FP8 checkpoint (Q8_0 projections);
  model_fp8_q4km.gguf  model_fp8.gguf through llama.cpp's llama-quantize Q4_K_M (build/bin of
                       --llama-cpp; --allow-requantize: the experts too);
  mtp_fp8_mtp.gguf, mtp_fp8_mtp_q8.gguf   the MTP layer of mtp_fp8 (whose main model is
                       model_fp8's) as the file of its own the converter's --mtp writes
                       (make_v4_gguf.py --mtp --fp8-as-bf16): nextn.eh_proj kept bf16
                       (--eh-proj-as-source: the checkpoint's values), and in the converter's
                       Q8_0;
  NAME.expected.safetensors (NAME model_fp8_q8, model_fp8_q4km)   prompt{i}.logits of the four
                       golden prompts and prompt{i}.greedy (16 greedy tokens fed back, I32) on
                       NAME.gguf's values, from check_v4_golden.py's float64 numpy forward over
                       the tensors that llama.cpp's gguf package reads and dequantizes from it.

Both files are read back with the gguf package and mapped to DeepSeek's names by this script's
own table (the converter's, inverted); the numpy forward on model_fp8.gguf must give model_fp8's
expected logits (within check_v4_golden's 1e-3) and greedy tokens, which checks that table.
Data kept only where every greedy margin exceeds 4e-3 (twice the C golden's LOGIT_TOL). Also writes
tests/fuzz/corpus/gguf/deepseek4-tiny.gguf (write_fuzz_seed; --fuzz-seed-only: that alone).

    /opt/venv/bin/python scripts/make_v4_gguf_golden.py [--llama-cpp /opt/peers/llama.cpp]
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
V4 = os.path.join(HERE, "..", "tests", "golden", "v4")
sys.path.insert(0, HERE)

ROOT = {"token_embd.weight": "embed.weight", "output.weight": "head.weight",
        "output_norm.weight": "norm.weight", "output_hc_fn.weight": "hc_head_fn",
        "output_hc_base.weight": "hc_head_base", "output_hc_scale.weight": "hc_head_scale"}
LAYER = {"attn_norm.weight": "attn_norm.weight", "ffn_norm.weight": "ffn_norm.weight",
         "hc_attn_fn.weight": "hc_attn_fn", "hc_attn_base.weight": "hc_attn_base",
         "hc_attn_scale.weight": "hc_attn_scale", "hc_ffn_fn.weight": "hc_ffn_fn",
         "hc_ffn_base.weight": "hc_ffn_base", "hc_ffn_scale.weight": "hc_ffn_scale",
         "attn_q_a.weight": "attn.wq_a.weight", "attn_q_a_norm.weight": "attn.q_norm.weight",
         "attn_q_b.weight": "attn.wq_b.weight", "attn_kv.weight": "attn.wkv.weight",
         "attn_kv_a_norm.weight": "attn.norm.weight", "attn_sinks.weight": "attn.attn_sink",
         "attn_output_a.weight": "attn.wo_a.weight", "attn_output_b.weight": "attn.wo_b.weight",
         "attn_compressor_kv.weight": "attn.compressor.wkv.weight",
         "attn_compressor_gate.weight": "attn.compressor.wgate.weight",
         "attn_compressor_ape.weight": "attn.compressor.ape",
         "attn_compressor_norm.weight": "attn.compressor.norm.weight",
         "indexer_compressor_kv.weight": "attn.indexer.compressor.wkv.weight",
         "indexer_compressor_gate.weight": "attn.indexer.compressor.wgate.weight",
         "indexer_compressor_ape.weight": "attn.indexer.compressor.ape",
         "indexer_compressor_norm.weight": "attn.indexer.compressor.norm.weight",
         "indexer.attn_q_b.weight": "attn.indexer.wq_b.weight",
         "indexer.proj.weight": "attn.indexer.weights_proj.weight",
         "ffn_gate_inp.weight": "ffn.gate.weight", "exp_probs_b.bias": "ffn.gate.bias",
         "ffn_gate_tid2eid.weight": "ffn.gate.tid2eid",
         "ffn_gate_shexp.weight": "ffn.shared_experts.w1.weight",
         "ffn_down_shexp.weight": "ffn.shared_experts.w2.weight",
         "ffn_up_shexp.weight": "ffn.shared_experts.w3.weight"}
EXPERTS = {"ffn_gate_exps.weight": "w1", "ffn_down_exps.weight": "w2", "ffn_up_exps.weight": "w3"}


def read_gguf(path):
    """DeepSeek-named float64 (or int64) arrays of the file, dequantized by the gguf package."""
    import gguf
    from gguf.quants import dequantize

    W = {}
    for t in gguf.GGUFReader(path).tensors:
        if t.tensor_type == gguf.GGMLQuantizationType.I32:
            a = np.asarray(t.data, dtype=np.int64)
        else:
            a = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64)
        shape = [int(x) for x in reversed(t.shape)]
        a = a.reshape(shape)
        if t.name in ROOT:
            W[ROOT[t.name]] = a
            continue
        m = re.fullmatch(r"blk\.(\d+)\.(.+)", t.name)
        if not m:
            raise SystemExit("unknown tensor " + t.name)
        p = "layers.%s." % m.group(1)
        if m.group(2) in EXPERTS:
            for e in range(a.shape[0]):
                W[p + "ffn.experts.%d.%s.weight" % (e, EXPERTS[m.group(2)])] = a[e]
        else:
            W[p + LAYER[m.group(2)]] = a
    return W


def model_of(path):
    from check_v4_golden import V4 as Ref
    from check_v4_golden import inv_freq_plain, inv_freq_yarn

    m = Ref.__new__(Ref)
    with open(os.path.join(V4, "model_fp8", "config.json")) as f:
        m.c = json.load(f)
    m.W = read_gguf(path)
    c = m.c
    m.eps, m.D, m.rd = c["rms_norm_eps"], c["head_dim"], c["qk_rope_head_dim"]
    m.inv_main = inv_freq_plain(c["rope_theta"], m.rd)
    m.inv_comp = inv_freq_yarn(c["compress_rope_theta"], m.rd, c["rope_scaling"])
    n = c["num_hidden_layers"]
    m.ratio = c["compress_ratios"][:n]
    m.hash = [j < c["num_hash_layers"] for j in range(n)]
    return m


def write_fuzz_seed(path, mtp=False):
    """A small deepseek4 file with the converter's keys and tensor names, every tensor kind it
    writes (F32 vectors, F16/BF16 matrices, Q8_0, stacked MXFP4 experts, I32 hash table) at
    tiny sizes: 3 layers (sliding, CSA, HCA at rate 8), hidden 32: the seed of the gguf fuzz
    target's deepseek4 path (tests/fuzz/corpus/gguf). mtp: the same model's MTP layer as the
    file of its own the converter's --mtp writes (block_count 4, nextn_predict_layers 1, blk.3
    a sliding layer with its nextn.* tensors, the root tensors)."""
    import gguf
    from gguf.quants import quantize

    rng = np.random.default_rng(4)
    V, D, L, H, Dh, Rq, G, Ro, Hi, Di, E, K, I, n = 8, 32, 3, 2, 32, 32, 2, 32, 2, 32, 2, 1, 32, 2
    ratios = [0, 4, 8] + ([0] if mtp else [])
    NL = len(ratios)
    w = gguf.GGUFWriter(path, "deepseek4")
    a = "deepseek4."
    if mtp:
        w.add_uint32(a + "nextn_predict_layers", 1)
    for k, v in (("block_count", NL), ("context_length", 64), ("embedding_length", D),
                 ("attention.head_count", H), ("attention.head_count_kv", 1),
                 ("expert_count", E), ("expert_used_count", K), ("expert_gating_func", 4),
                 ("attention.key_length", Dh), ("attention.value_length", Dh),
                 ("rope.dimension_count", 8), ("attention.q_lora_rank", Rq),
                 ("attention.sliding_window", 4), ("expert_feed_forward_length", I),
                 ("expert_shared_count", 1), ("attention.indexer.head_count", Hi),
                 ("attention.indexer.key_length", Di), ("attention.indexer.top_k", 2),
                 ("attention.output_group_count", G), ("attention.output_lora_rank", Ro),
                 ("hyper_connection.count", n), ("hyper_connection.sinkhorn_iterations", 3),
                 ("hash_layer_count", 1), ("embedding_length_out", n * D),
                 ("rope.scaling.original_context_length", 16)):
        w.add_uint32(a + k, v)
    for k, v in (("rope.freq_base", 10000.0), ("attention.layer_norm_rms_epsilon", 1e-6),
                 ("expert_weights_scale", 1.5), ("attention.compress_rope_freq_base", 160000.0),
                 ("hyper_connection.epsilon", 1e-6), ("rope.scaling.factor", 4.0),
                 ("rope.scaling.yarn_beta_fast", 32.0), ("rope.scaling.yarn_beta_slow", 1.0)):
        w.add_float32(a + k, v)
    w.add_string(a + "rope.scaling.type", "yarn")
    w.add_bool(a + "expert_weights_norm", True)
    w.add_array(a + "swiglu_clamp_exp", [3.0] * NL)
    w.add_array(a + "swiglu_clamp_shexp", [3.0] * NL)
    w.add_array(a + "attention.compress_ratios", ratios)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-v3")
    w.add_token_list(["!", "\"", "#", "$", "%", "&", "'", "!!"])
    w.add_token_types([1] * V)
    w.add_token_merges(["! !"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    def f(name, *shape, dt=np.float16):
        w.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(dt))

    def q8(name, *shape):
        x = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        w.add_tensor(name, quantize(x, gguf.GGMLQuantizationType.Q8_0),
                     raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def mx(name, e, rows, cols):
        b = rng.integers(0, 256, size=(e, rows, cols // 32, 17), dtype=np.uint8)
        b[..., 0] = 124
        w.add_tensor(name, b.reshape(e, rows, cols // 32 * 17),
                     raw_dtype=gguf.GGMLQuantizationType.MXFP4)

    f("token_embd.weight", V, D)
    f("output.weight", V, D)
    f("output_norm.weight", D, dt=np.float32)
    f("output_hc_fn.weight", n, n * D, dt=np.float32)
    f("output_hc_base.weight", n, dt=np.float32)
    f("output_hc_scale.weight", 1, dt=np.float32)
    for l in range(L if mtp else 0, NL):
        b, r = "blk.%d." % l, ratios[l]
        if l >= L:
            q8(b + "nextn.eh_proj.weight", D, 2 * D)
            for nm in ("enorm", "hnorm", "shared_head_norm"):
                f(b + "nextn.%s.weight" % nm, D, dt=np.float32)
        for h in ("attn", "ffn"):
            f(b + "hc_%s_fn.weight" % h, (2 + n) * n, n * D, dt=np.float32)
            f(b + "hc_%s_base.weight" % h, (2 + n) * n, dt=np.float32)
            f(b + "hc_%s_scale.weight" % h, 3, dt=np.float32)
        f(b + "attn_norm.weight", D, dt=np.float32)
        f(b + "ffn_norm.weight", D, dt=np.float32)
        f(b + "attn_q_a.weight", Rq, D)
        f(b + "attn_q_a_norm.weight", Rq, dt=np.float32)
        q8(b + "attn_q_b.weight", H * Dh, Rq)
        f(b + "attn_kv.weight", Dh, D)
        f(b + "attn_kv_a_norm.weight", Dh, dt=np.float32)
        f(b + "attn_sinks.weight", H, dt=np.float32)
        f(b + "attn_output_a.weight", G * Ro, H * Dh // G)
        q8(b + "attn_output_b.weight", D, G * Ro)
        if r:
            c = 2 if r == 4 else 1
            f(b + "attn_compressor_kv.weight", c * Dh, D)
            f(b + "attn_compressor_gate.weight", c * Dh, D)
            f(b + "attn_compressor_ape.weight", r, c * Dh, dt=np.float32)
            f(b + "attn_compressor_norm.weight", Dh, dt=np.float32)
        if r == 4:
            f(b + "indexer_compressor_kv.weight", 2 * Di, D)
            f(b + "indexer_compressor_gate.weight", 2 * Di, D)
            f(b + "indexer_compressor_ape.weight", r, 2 * Di, dt=np.float32)
            f(b + "indexer_compressor_norm.weight", Di, dt=np.float32)
            f(b + "indexer.attn_q_b.weight", Hi * Di, Rq)
            f(b + "indexer.proj.weight", Hi, D)
        f(b + "ffn_gate_inp.weight", E, D)
        if l < 1:
            w.add_tensor(b + "ffn_gate_tid2eid.weight", rng.integers(0, E, size=(V, K), dtype=np.int32))
        else:
            f(b + "exp_probs_b.bias", E, dt=np.float32)
        mx(b + "ffn_gate_exps.weight", E, I, D)
        mx(b + "ffn_up_exps.weight", E, I, D)
        mx(b + "ffn_down_exps.weight", E, D, I)
        f(b + "ffn_gate_shexp.weight", I, D)
        f(b + "ffn_up_shexp.weight", I, D)
        f(b + "ffn_down_shexp.weight", D, I)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", default="/opt/peers/llama.cpp")
    ap.add_argument("--fuzz-seed-only", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.llama_cpp, "gguf-py"))
    write_fuzz_seed(os.path.join(HERE, "..", "tests", "fuzz", "corpus", "gguf", "deepseek4-tiny.gguf"))
    write_fuzz_seed(os.path.join(HERE, "..", "tests", "fuzz", "corpus", "gguf", "deepseek4-mtp.gguf"),
                    mtp=True)
    if a.fuzz_seed_only:
        return
    src = os.path.join(V4, "model_fp8")
    conv = [sys.executable, os.path.join(HERE, "make_v4_gguf.py"), src]
    subprocess.run(conv + [os.path.join(V4, "model_fp8.gguf"), "--fp8-as-bf16",
                           "--llama-cpp", a.llama_cpp], check=True)
    subprocess.run(conv + [os.path.join(V4, "model_fp8_q8.gguf"), "--llama-cpp", a.llama_cpp],
                   check=True)
    # the MTP layer of v4/mtp_fp8 (whose main model is model_fp8's), the file of its own that the
    # converter's --mtp writes: eh_proj kept bf16 (the checkpoint's values), and the converter's
    # default Q8_0 eh_proj
    msrc = [sys.executable, os.path.join(HERE, "make_v4_gguf.py"), os.path.join(V4, "mtp_fp8")]
    subprocess.run(msrc + [os.path.join(V4, "mtp_fp8_mtp.gguf"), "--fp8-as-bf16", "--mtp",
                           "--eh-proj-as-source", "--llama-cpp", a.llama_cpp], check=True)
    subprocess.run(msrc + [os.path.join(V4, "mtp_fp8_mtp_q8.gguf"), "--fp8-as-bf16", "--mtp",
                           "--llama-cpp", a.llama_cpp], check=True)
    with open(os.path.join(src, "expected.json")) as f:
        prompts = json.load(f)["prompts"]
    from check_golden import load_safetensors
    ref = load_safetensors(os.path.join(src, "expected.safetensors"))

    exact = model_of(os.path.join(V4, "model_fp8.gguf"))
    for i, p in enumerate(prompts):
        toks, greedy = p["tokens"], p["greedy"]
        lg = exact.forward(toks + greedy[:-1])
        n = len(toks)
        err = float(np.max(np.abs(lg[:n] - ref["prompt%d.logits" % i])))
        mine = [int(np.argmax(lg[n - 1 + k])) for k in range(len(greedy))]
        print("model_fp8.gguf prompt %d: logits max err %.3g vs model_fp8, greedy %s" % (
            i, err, "match" if mine == greedy else "DIFFER"))
        if err > 1e-3 or mine != greedy:
            raise SystemExit("model_fp8.gguf does not hold model_fp8's values")

    # llama.cpp's llama-quantize of model_fp8.gguf to Q4_K_M (its MXFP4 experts requantized;
    # mHC's fn, the compressors' ape and the embedding in blocks too)
    subprocess.run([os.path.join(a.llama_cpp, "build", "bin", "llama-quantize"),
                    "--allow-requantize", os.path.join(V4, "model_fp8.gguf"),
                    os.path.join(V4, "model_fp8_q4km.gguf"), "Q4_K_M"], check=True,
                   stdout=subprocess.DEVNULL)
    for name in ("model_fp8_q8", "model_fp8_q4km"):
        expect(name, prompts)


def expect(name, prompts):
    """name.expected.safetensors: the numpy forward's logits and greedy tokens on name.gguf."""
    q8 = model_of(os.path.join(V4, name + ".gguf"))
    out = {}
    for i, p in enumerate(prompts):
        toks = list(p["tokens"])
        n = len(toks)
        greedy, margins = [], []
        for k in range(16):  # its own greedy tokens, fed back
            lg = q8.forward(toks + greedy)
            row = np.sort(lg[-1])
            margins.append(float(row[-1] - row[-2]))
            greedy.append(int(np.argmax(lg[-1])))
        lg = q8.forward(toks + greedy[:-1])
        out["prompt%d.logits" % i] = lg[:n].astype(np.float32)
        out["prompt%d.greedy" % i] = np.asarray(greedy, dtype=np.int32)
        print("%s.gguf prompt %d: %d tokens, min greedy margin %.3g" % (name, i, n, min(margins)))
        if min(margins) < 4e-3:  # twice the C golden's LOGIT_TOL, its own greedy rule
            raise SystemExit("a greedy margin under 4e-3: not decisive")
    from safetensors.numpy import save_file
    save_file(out, os.path.join(V4, name + ".expected.safetensors"))


if __name__ == "__main__":
    main()
