#!/usr/bin/env python3
"""Convert a DeepSeek-V4 checkpoint (DeepSeek's tensor names, as `numla synth --preset
v4-flash|v4-pro|tiny-v4 --weights fp8` or tests/golden/v4/model_fp8 hold it) to a GGUF
`deepseek4` file with llama.cpp's own converter (its conversion/deepseek.py, DeepseekV4Model).

    /opt/venv/bin/python scripts/make_v4_gguf.py SRC_DIR OUT.gguf [--fp8-as-bf16]
        [--mtp [--eh-proj-as-source]] [--llama-cpp /opt/peers/llama.cpp]

llama.cpp's converter takes the published form only: every routed expert as FP4 (I8 e2m1 pairs
with an F8_E8M0 `.scale` per 32), which it repacks to ggml MXFP4 blocks (lossless); F8_E4M3
projections it dequantizes and stores as Q8_0 (lossy: a second rounding); BF16 and F32 tensors
stay as they are (1-D ones become F32); tid2eid becomes I32. A bf16 checkpoint without FP4
experts is refused by the converter (KeyError on the experts' `.scale`).

--fp8-as-bf16 first writes a copy of SRC_DIR whose F8_E4M3 weights are dequantized to bf16
(exact: an e4m3 code times a power of two fits bf16's mantissa) and their `.scale` tensors
dropped, so the converter keeps them as BF16 and the GGUF holds exactly the checkpoint's values
(tests/golden/v4/model_fp8.gguf is made so: numla must give model_fp8's logits on it).

--mtp runs the converter with its own --mtp: the multi-token-prediction layer only, as the
separate file llama.cpp's converter writes for it (its main conversion leaves `mtp.*` out):
`deepseek4.nextn_predict_layers` 1, block_count one more than the model's layers, the block's
tensors as `blk.N.*` (N = num_hidden_layers), `blk.N.nextn.eh_proj` (e_proj and h_proj side
by side, (D, 2D): the converter forces it to Q8_0), `nextn.enorm`, `nextn.hnorm`,
`nextn.shared_head_norm` (mtp.0.norm), the layer's own hyper-head as the root `output_hc_*`,
and a copy of token_embd, output_norm and output. --eh-proj-as-source keeps eh_proj in the
source's type instead of Q8_0 (with --fp8-as-bf16: bf16, the checkpoint's values exactly).

`layers.N.attn.norm.weight` and `mtp.N.attn.norm.weight` (transformers' and numla synth's name
of the KV norm) are given to the converter as DeepSeek's `...attn.kv_norm.weight`, the one
name it maps.
Checkpoints without tokenizer files get a placeholder vocabulary (byte-level BPE: GPT-2's byte
alphabet, one merge, then control tokens up to vocab_size; pre-tokenizer "deepseek-v3", bos/eos
from config.json): the converter's own set_vocab needs a
tokenizer.json whose hash it knows. Everything else (keys, tensor names, types) is the
converter's. The gguf package comes from llama.cpp's own gguf-py.
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path


def model_files(src: Path) -> list:
    """The checkpoint's weight files (the index's, else model*.safetensors): a golden directory
    also holds expected.safetensors, which is no part of the model."""
    idx = src / "model.safetensors.index.json"
    if idx.exists():
        return sorted({src / f for f in json.loads(idx.read_text())["weight_map"].values()})
    return sorted(src.glob("model*.safetensors"))


def stage(src: Path, dst: Path) -> None:
    """dst: links to src's config, tokenizer and weight files only."""
    for f in src.iterdir():
        if f.suffix == ".json" or f.name.startswith("tokenizer"):
            os.symlink(f.resolve(), dst / f.name)
    for f in model_files(src):
        if not (dst / f.name).exists():
            os.symlink(f.resolve(), dst / f.name)


def fp8_to_bf16_copy(src: Path, dst: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    files = model_files(src)
    index = {}
    for f in files:
        t = load_file(str(f))
        out = {}
        for name, w in t.items():
            if name.endswith(".scale") and name[:-6] + ".weight" in t \
                    and t[name[:-6] + ".weight"].dtype == torch.float8_e4m3fn:
                continue
            if w.dtype == torch.float8_e4m3fn:
                s = t[name[:-7] + ".scale"]
                sf = torch.exp2(s.view(torch.uint8).float() - 127.0)
                n, k = w.shape
                sf = sf.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
                v = w.float() * sf
                b = v.to(torch.bfloat16)
                if not torch.equal(b.float(), v):
                    raise SystemExit(f"{name}: not exact in bf16")
                out[name] = b
            else:
                out[name] = w
        (dst / f.name).unlink()
        save_file(out, str(dst / f.name), metadata={"format": "pt"})
        index.update({n: f.name for n in out})
    if len(files) > 1:
        (dst / "model.safetensors.index.json").unlink()
        with open(dst / "model.safetensors.index.json", "w") as fh:
            json.dump({"metadata": {}, "weight_map": index}, fh)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--fp8-as-bf16", action="store_true")
    ap.add_argument("--mtp", action="store_true")
    ap.add_argument("--eh-proj-as-source", action="store_true")
    ap.add_argument("--llama-cpp", default="/opt/peers/llama.cpp")
    a = ap.parse_args()
    lc = Path(a.llama_cpp)
    sys.path.insert(0, str(lc / "gguf-py"))
    sys.path.insert(0, str(lc))
    src = Path(a.src)
    tmp = tempfile.mkdtemp(prefix="v4gguf-")
    stage(src, Path(tmp))
    if a.fp8_as_bf16:
        fp8_to_bf16_copy(src, Path(tmp))
    src = Path(tmp)
    try:
        import gguf
        import convert_hf_to_gguf
        from conversion.deepseek import DeepseekV4Model

        # transformers' save (and numla synth) spell the KV norm `attn.norm.weight`, DeepSeek's
        # files `attn.kv_norm.weight`, the only name the converter maps
        orig_filter = DeepseekV4Model.filter_tensors.__func__

        def kv_norm_name(cls, item):
            name, gen = item
            m = re.fullmatch(r"(layers|mtp)\.(\d+)\.attn\.norm\.weight", name)
            if m:
                item = (f"{m.group(1)}.{m.group(2)}.attn.kv_norm.weight", gen)
            return orig_filter(cls, item)

        DeepseekV4Model.filter_tensors = classmethod(kv_norm_name)
        if a.eh_proj_as_source:
            orig_force = DeepseekV4Model.tensor_force_quant

            def eh_as_source(self, name, new_name, bid, n_dims):
                if new_name.endswith(".nextn.eh_proj.weight"):
                    return False
                return orig_force(self, name, new_name, bid, n_dims)

            DeepseekV4Model.tensor_force_quant = eh_as_source
        if not (src / "tokenizer.json").exists():
            cfg = json.loads((src / "config.json").read_text())

            def placeholder_vocab(self):
                # byte-level BPE: GPT-2's byte alphabet, one merge ("!" "!"), then control
                # tokens up to vocab_size
                n = self.hparams["vocab_size"]
                bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) \
                    + list(range(ord("\u00ae"), ord("\u00ff") + 1))
                cs, k = bs[:], 0
                for b in range(256):
                    if b not in bs:
                        bs.append(b)
                        cs.append(256 + k)
                        k += 1
                alphabet = [chr(c) for c in cs]
                nb = min(n - 1, 256)
                toks = alphabet[:nb] + ["!!"]
                toks += [f"<|placeholder_{i}|>" for i in range(len(toks), n)]
                types = [gguf.TokenType.NORMAL] * (nb + 1) + [gguf.TokenType.CONTROL] * (n - nb - 1)
                self.gguf_writer.add_tokenizer_model("gpt2")
                self.gguf_writer.add_tokenizer_pre("deepseek-v3")
                self.gguf_writer.add_token_list(toks)
                self.gguf_writer.add_token_types(types)
                self.gguf_writer.add_token_merges(["! !"])
                self.gguf_writer.add_bos_token_id(int(cfg.get("bos_token_id", 0)))
                self.gguf_writer.add_eos_token_id(int(cfg.get("eos_token_id", 1)))

            DeepseekV4Model.set_vocab = placeholder_vocab
        # the name of the source (the staging directory's is random)
        sys.argv = ["convert_hf_to_gguf.py", str(src), "--outfile", a.out, "--outtype", "bf16",
                    "--model-name", Path(a.src).resolve().name] + (["--mtp"] if a.mtp else [])
        convert_hf_to_gguf.main()
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    os.environ.setdefault("NO_LOCAL_GGUF", "")
    main()
