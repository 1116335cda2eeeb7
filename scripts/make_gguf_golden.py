#!/usr/bin/env python3
"""Write the GGUF reference files of tests/golden/gguf/ with the `gguf` PyPI package.

Never needed by the build or the tests (the files are committed); rerun after changing this
script:  /opt/pyref/bin/python3 scripts/make_gguf_golden.py tests/golden/gguf

Pinned: gguf 0.19.0, numpy 2.4.6 (the files depend on their writer and on numpy's generator).

  meta.gguf              every metadata value type (scalars, arrays of each, arrays of strings,
                         nested arrays), general.alignment = 64, tensors of several types and ranks
  blocks.gguf            for each block encoding T: "T.q" (3 rows of 512 random blocks' worth of
                         elements, scales set to finite fp16 values, MXFP4's E8M0 to 2^-7..2^-4) and "T.ref", the gguf
                         package's numpy dequantization of it in F32: the oracle of kernels/qblock
  split-0000N-of-00003.gguf   one tensor set written by the package's splitter (2 tensors a part)
  tiny-deepseek2.gguf    the deepseek2 keys llama.cpp's converter writes (DeepseekV2Model), with
                         small widths, and the attn_k_b/attn_v_b layout
  tiny-deepseek2-kvb.gguf  the same model with the older attn_kv_b layout and q_lora (q_a/q_b)
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

PINNED = {"gguf": "0.19.0", "numpy": "2.4.6"}


def check_versions():
    from importlib.metadata import version
    for pkg, want in PINNED.items():
        have = version(pkg)
        if have != want:
            sys.exit(f"make_gguf_golden: {pkg} {have} installed, the files are pinned to {want}")


def write_meta(out):
    w = gguf.GGUFWriter(os.path.join(out, "meta.gguf"), "numla-test")
    w.data_alignment = 64
    w.add_uint32("general.alignment", 64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo wörld")
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000000)
    w.add_float64("t.f64", -2.25)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_key_value("t.arr_u8", [1, 2, 255], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT8)
    w.add_key_value("t.arr_f32", [0.5, -1.0], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32)
    w.add_key_value("t.arr_bool", [True, False, True], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.BOOL)
    w.add_array("t.arr_str", ["a", "", "ccc"])
    w.add_array("t.arr_nested", [[1, 2], [3]])
    w.add_array("t.arr_nested_str", [["x", "yy"], ["zzz"]])
    # tensors: ggml ne is the reverse of the numpy shape
    w.add_tensor("f32.2d", np.arange(15, dtype=np.float32).reshape(3, 5))
    w.add_tensor("f16.1d", np.array([1.0, -2.0, 0.5], dtype=np.float16))
    w.add_tensor("f32.3d", np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    w.add_tensor("q8_0.2d", gguf.quants.quantize(x, QT.Q8_0), raw_dtype=QT.Q8_0)
    w.add_tensor("i32.1d", np.array([7, -8], dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Byte offsets of the fp16 scale fields in each block (set to finite values: random bytes
# would hold NaN and inf).
HALVES = {
    QT.Q8_0: [0], QT.Q4_0: [0], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
    QT.IQ4_XS: [0], QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q5_0: [0], QT.IQ4_NL: [0],
    QT.Q5_1: [0, 2],  # last ones: the generator's draws for the types above stay as they were
    QT.Q4_1: [0, 2],
    QT.MXFP4: [],  # its scale is the E8M0 byte 0, set below (E8M0)
}
# Byte offsets of E8M0 scale bytes, set to exponents 121..124 (d = 2^(e - 128) in [2^-7, 2^-4]):
# random bytes would overflow the products.
E8M0 = {QT.MXFP4: [0]}


def write_blocks(out):
    w = gguf.GGUFWriter(os.path.join(out, "blocks.gguf"), "numla-test")
    rng = np.random.default_rng(20261204)
    rows, cols = 3, 512
    for qt, offs in HALVES.items():
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        nblk = rows * cols // bs
        raw = rng.integers(0, 256, size=(nblk, ts), dtype=np.uint8)
        for o in offs:
            h = (rng.uniform(0.25, 2.0, size=nblk) * np.where(rng.random(nblk) < 0.5, -1, 1) * 2.0 ** -6).astype(np.float16)
            raw[:, o:o + 2] = h.view(np.uint8).reshape(nblk, 2)
        for o in E8M0.get(qt, []):
            raw[:, o] = rng.integers(121, 125, size=nblk, dtype=np.uint8)
        raw = raw.reshape(rows, cols // bs * ts)
        ref = gguf.quants.dequantize(raw, qt).astype(np.float32)
        assert ref.shape == (rows, cols) and np.isfinite(ref).all()
        name = qt.name.lower()
        w.add_tensor(name + ".q", raw, raw_dtype=qt)
        w.add_tensor(name + ".ref", ref)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_split(out):
    w = gguf.GGUFWriter(os.path.join(out, "split.gguf"), "numla-test", split_max_tensors=2)
    w.add_string("t.where", "first part")
    for i in range(5):
        w.add_tensor(f"t{i}", np.full((2, 3), i, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# A small deepseek2 model: widths chosen so every value is distinct.
DS = dict(n_layer=3, n_embd=32, n_ff=48, n_head=5, kv_lora=16, q_lora=24, qk_nope=8, qk_rope=4,
          v_head=6, n_vocab=40, n_exp=6, n_used=3, n_shared=1, ff_exp=10, lead_dense=1,
          n_group=2, topk_group=1)


def write_deepseek2(out, name, kvb):
    d = DS
    w = gguf.GGUFWriter(os.path.join(out, name), "deepseek2")
    w.add_name("tiny-deepseek2")
    w.add_block_count(d["n_layer"])
    w.add_context_length(4096)
    w.add_embedding_length(d["n_embd"])
    w.add_feed_forward_length(d["n_ff"])
    w.add_head_count(d["n_head"])
    w.add_head_count_kv(1 if not kvb else d["n_head"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(d["n_exp"])
    w.add_expert_used_count(d["n_used"])
    w.add_expert_group_count(d["n_group"])
    w.add_expert_group_used_count(d["topk_group"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if kvb else gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_expert_weights_norm(bool(kvb))
    w.add_leading_dense_block_count(d["lead_dense"])
    w.add_vocab_size(d["n_vocab"])
    if kvb:
        w.add_q_lora_rank(d["q_lora"])
    w.add_kv_lora_rank(d["kv_lora"])
    if kvb:
        w.add_key_length(d["qk_nope"] + d["qk_rope"])
        w.add_value_length(d["v_head"])
    else:
        w.add_key_length(d["kv_lora"] + d["qk_rope"])
        w.add_value_length(d["kv_lora"])
        w.add_key_length_mla(d["qk_nope"] + d["qk_rope"])
        w.add_value_length_mla(d["v_head"])
    w.add_expert_feed_forward_length(d["ff_exp"])
    w.add_expert_shared_count(d["n_shared"])
    w.add_expert_weights_scale(2.5)
    w.add_rope_dimension_count(d["qk_rope"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(40.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_rope_scaling_yarn_beta_fast(32.0)
    w.add_rope_scaling_yarn_beta_slow(1.0)
    w.add_rope_scaling_yarn_log_mul(0.0707)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-v3" if kvb else "deepseek-llm")
    tokens = [chr(ord("a") + i % 26) * (1 + i // 26) for i in range(d["n_vocab"])]
    w.add_token_list(tokens)
    w.add_token_types([1] * d["n_vocab"])
    w.add_token_merges(["a a", "b b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")

    E, F = d["n_embd"], d["n_ff"]
    H, KV, R, NP, V = d["n_head"], d["kv_lora"], d["qk_rope"], d["qk_nope"], d["v_head"]
    X, FE, S = d["n_exp"], d["ff_exp"], d["n_shared"]

    def t(name, shape):  # numpy shape, reverse of ggml ne; small F32 so the file stays tiny
        w.add_tensor(name, np.zeros(shape, dtype=np.float32))

    t("token_embd.weight", (d["n_vocab"], E))
    for i in range(d["n_layer"]):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", (E,))
        if kvb:
            t(p + "attn_q_a.weight", (d["q_lora"], E))
            t(p + "attn_q_a_norm.weight", (d["q_lora"],))
            t(p + "attn_q_b.weight", (H * (NP + R), d["q_lora"]))
        else:
            t(p + "attn_q.weight", (H * (NP + R), E))
        t(p + "attn_kv_a_mqa.weight", (KV + R, E))
        t(p + "attn_kv_a_norm.weight", (KV,))
        if kvb:
            t(p + "attn_kv_b.weight", (H * (NP + V), KV))
        else:
            t(p + "attn_k_b.weight", (H, KV, NP))
            t(p + "attn_v_b.weight", (H, V, KV))
        t(p + "attn_output.weight", (E, H * V))
        t(p + "ffn_norm.weight", (E,))
        if i < d["lead_dense"]:
            t(p + "ffn_gate.weight", (F, E))
            t(p + "ffn_up.weight", (F, E))
            t(p + "ffn_down.weight", (E, F))
        else:
            t(p + "ffn_gate_inp.weight", (X, E))
            if kvb:
                t(p + "exp_probs_b.bias", (X,))
            t(p + "ffn_gate_exps.weight", (X, FE, E))
            t(p + "ffn_up_exps.weight", (X, FE, E))
            t(p + "ffn_down_exps.weight", (X, E, FE))
            t(p + "ffn_gate_shexp.weight", (S * FE, E))
            t(p + "ffn_up_shexp.weight", (S * FE, E))
            t(p + "ffn_down_shexp.weight", (E, S * FE))
    t("output_norm.weight", (E,))
    t("output.weight", (d["n_vocab"], E))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    check_versions()
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/golden/gguf"
    os.makedirs(out, exist_ok=True)
    write_meta(out)
    write_blocks(out)
    write_split(out)
    write_deepseek2(out, "tiny-deepseek2.gguf", kvb=False)
    write_deepseek2(out, "tiny-deepseek2-kvb.gguf", kvb=True)
    for f in sorted(os.listdir(out)):
        if f.endswith(".gguf"):
            print(f"{f}: {os.path.getsize(os.path.join(out, f))} bytes")


if __name__ == "__main__":
    main()
