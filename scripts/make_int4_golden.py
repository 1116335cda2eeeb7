#!/usr/bin/env python3
"""Write tests/golden/v2lite/model_int4/: tests/golden/v2lite's model as a compressed-tensors
pack-quantized checkpoint (Kimi-K2-Thinking's format for its routed experts) and the reference
outputs. Never needed by the build or the tests (the files are committed):

    python3 -m venv /tmp/ct && /tmp/ct/bin/pip install compressed-tensors==0.20.1 loguru psutil
    (with torch 2.15.0, transformers 5.25.0, safetensors 0.8.0, numpy 2.4.6 importable, e.g.
    /opt/pyref's site-packages on its path)
    /tmp/ct/bin/python scripts/make_int4_golden.py

The routed experts' gate_proj / up_proj (K = 96: 3 groups of 32) are int4, symmetric, group 32:
scale = bf16(max |w| / 7.5) per group, q = clamp(round(w / scale), -8, 7), packed by
compressed_tensors' own pack_to_int32 into X.weight_packed (I32), with X.weight_scale (BF16) and
X.weight_shape (I64); their down_proj (K = 16, not whole groups) and every other tensor are in
quantization_config.ignore and stored as BF16. The reference is transformers (fp32, eager) on
scale · q and the bf16 values upcast, with the package's unpack_from_int32 checked to give the
codes back.
"""
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402
import make_gguf_model_golden as mgg  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from compressed_tensors.compressors.pack_quantized.helpers import (  # noqa: E402
    pack_to_int32, unpack_from_int32)
from safetensors.torch import save_file  # noqa: E402


def main():
    src = "tests/golden/v2lite"
    out = os.path.join(src, "model_int4")
    os.makedirs(out, exist_ok=True)
    sd = mgg.load_sd(src)
    files, deq, ignore = {}, {}, []
    for k in sorted(sd):
        w = torch.from_numpy(sd[k])
        quant = ".mlp.experts." in k and (k.endswith("gate_proj.weight") or k.endswith("up_proj.weight"))
        if not quant:
            b = w.to(torch.bfloat16)
            files[k] = b
            deq[k] = b.float().numpy()
            if k.endswith("_proj.weight") and ".mlp.gate." not in k:
                ignore.append(k[:-len(".weight")])
            continue
        n, kk = w.shape
        g = w.reshape(n, kk // 32, 32)
        scale = (g.abs().amax(-1) / 7.5).to(torch.bfloat16)
        sf = scale.float().unsqueeze(-1)
        q = torch.clamp(torch.round(g / sf), -8, 7).to(torch.int8).reshape(n, kk)
        packed = pack_to_int32(q, 4)
        back = unpack_from_int32(packed, 4, torch.Size([n, kk]))
        assert torch.equal(back.to(torch.int8), q), k
        base = k[:-len(".weight")]
        files[base + ".weight_packed"] = packed
        files[base + ".weight_scale"] = scale
        files[base + ".weight_shape"] = torch.tensor([n, kk], dtype=torch.int64)
        deq[k] = (q.float().reshape(n, kk // 32, 32) * sf).reshape(n, kk).numpy()
    save_file(files, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "pack-quantized",
        "config_groups": {"group_0": {
            "targets": ["Linear"], "input_activations": None, "output_activations": None,
            "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group",
                        "group_size": 32, "dynamic": False, "actorder": None, "observer": "minmax"}}},
        "ignore": ["lm_head"] + ignore, "quantization_status": "compressed"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    spec = mg.MODELS["v2lite"]
    ref, tensors, meta, rgap, attempt = mgg.reference(mg.model_class(spec), spec, src, deq, 2404)
    extra = {"model": "v2lite/model_int4", "weights": "model.safetensors: compressed-tensors "
             "pack-quantized int4 routed-expert gate/up, the rest bf16; expected outputs from "
             "transformers on scale * q and the upcast bf16 values",
             "prompt_seed_attempt": attempt, "min_router_selection_gap": rgap,
             "min_greedy_margin": mg.min_margin(meta),
             "min_prompt_margin": min(p["min_prompt_margin"] for p in meta)}
    mg.write_expected(out, tensors, meta, mg.expected_scale(ref.config), mg.rope_info(ref), extra)
    print("model_int4: %d bytes, attempt %d, router gap %.3g, min margin %.3g"
          % (os.path.getsize(os.path.join(out, "model.safetensors")), attempt, rgap,
             mg.min_margin(meta)))


if __name__ == "__main__":
    main()
