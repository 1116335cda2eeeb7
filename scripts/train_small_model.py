#!/usr/bin/env python3
"""scripts/train_small_model.py — trains models/kjv-v3, a small DeepSeek-V3-architecture model on
the King James Bible, so that numla has a model whose output a reader can judge and whose
quantization losses and multi-token-prediction acceptance mean something.

The model (config.json): MLA with q_lora (q_lora_rank 256, kv_lora_rank 128, 4 heads of
64 + 32 rope / 64 value dims), 4 layers with a dense first layer and 3 MoE layers (8 routed
experts of width 256, top-2 by noaux_tc sigmoid routing over 4 groups of which 2 are kept,
one shared expert, the correction bias trained by DeepSeek-V3's auxiliary-loss-free balancing),
hidden 256, a byte-level BPE of 4096 tokens, and one multi-token-prediction (MTP) layer: the
next-next-token module of DeepSeek-V3 (enorm/hnorm, eh_proj, one MoE decoder block, the shared
head), stored under the published checkpoints' names model.layers.4.{enorm,hnorm,eh_proj,
embed_tokens,shared_head.norm,shared_head.head,self_attn...,mlp...}. transformers' DeepseekV3
classes run the main model; the MTP module is written below (transformers does not run it).

Text: Debian's bible-kjv-text (`apt-get install bible-kjv-text`: /usr/lib/bible.data, read with
the `bible` program of the bible-kjv package it pulls in). Every chapter is one document:
"Book N" on its first line, then one verse per line without its number. The last two books
(Jude, Revelation) are held out: models/kjv-v3/heldout.txt, the text numla perplexity is
measured on. A few percent of the training sequences are DeepSeek-V3 chat turns (the user gives
the start of a verse, the assistant finishes it), so the chat template gives sensible answers.

Tokenizer: tokenizers' BPE on the training text with DeepSeek-V3's pre-tokenizer (digit runs of
1-3, CJK runs, the word/punctuation/space split, ByteLevel without its regex) and DeepSeek's
special tokens at ids 0-4, BOS added by a TemplateProcessing as in DeepSeek-V3's tokenizer.json;
tokenizer_config.json carries DeepSeek-V3's chat template verbatim
(numla recognises it as its built-in deepseek-v3 renderer).

Run (CPU, one thread, fixed seeds; about an hour on one core of a loaded machine):
    apt-get install bible-kjv-text
    /opt/venv/bin/python scripts/train_small_model.py            # writes models/kjv-v3/
    /opt/venv/bin/python scripts/train_small_model.py --steps 20 --out /tmp/k   # a quick look
Writes model.safetensors (bf16; the routers' correction bias fp32), config.json,
generation_config.json, tokenizer.json, tokenizer_config.json, heldout.txt and train_log.json
(loss curve, held-out perplexity, MTP accuracy, greedy samples: the figures of the model's
README.md).
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
import tokenizers  # noqa: E402
from safetensors.torch import save_file, load_file  # noqa: E402
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers,  # noqa: E402
                        processors, trainers)
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as mv3  # noqa: E402

PINNED = {"torch": "2.15.0", "transformers": "5.25.0", "tokenizers": "0.23.3"}

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
PAD = "<｜▁pad▁｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
SPECIALS = [BOS, EOS, PAD, USER, ASSISTANT]
RE_DIGITS = r"\p{N}{1,3}"
RE_CJK = "[一-龥\u3040-ゟ゠-ヿ]+"
RE_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"
            r" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
HELDOUT_BOOKS = ("Jude", "Revelation")
SEED = 4242

CONFIG = dict(
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=768,
    moe_intermediate_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_shared_experts=1,
    n_routed_experts=8,
    num_experts_per_tok=2,
    routed_scaling_factor=2.5,
    n_group=4,
    topk_group=2,
    norm_topk_prob=True,
    first_k_dense_replace=1,
    q_lora_rank=256,
    kv_lora_rank=128,
    qk_nope_head_dim=64,
    qk_rope_head_dim=32,
    v_head_dim=64,
    hidden_act="silu",
    max_position_embeddings=2048,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    rope_interleave=True,
    tie_word_embeddings=False,
    attention_bias=False,
    attention_dropout=0.0,
    initializer_range=0.02,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=2,
    num_nextn_predict_layers=1,
)
SEQ = 256
BATCH = 8
LR = 2e-3
MTP_WEIGHT = 0.3
# DeepSeek-V3's auxiliary-loss-free balancing, bias += speed * sign(mean load - load), faster
# than V3's 1e-3 because this run has few steps; plus V3's complementary sequence-wise balance
# loss with a small weight.
BIAS_SPEED = 1e-2
SEQ_AUX_ALPHA = 1e-3


def check_versions():
    got = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
           "tokenizers": tokenizers.__version__}
    bad = {k: (got[k], v) for k, v in PINNED.items() if got[k] != v}
    if bad:
        sys.exit("train_small_model.py: version mismatch (installed, pinned): %r" % bad)


# --------------------------------------------------------------------------------------------
# corpus

def read_bible():
    """[(book, chapter, [verse text, ...])] in canonical order, from the `bible` program."""
    if not os.path.exists("/usr/lib/bible.data"):
        sys.exit("train_small_model.py: apt-get install bible-kjv-text (needs /usr/lib/bible.data)")
    out = subprocess.run(["bible", "-l0", "gen1:1-rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    chapters = []
    head = re.compile(r"^(\S.*) (\d+)$")
    verse = re.compile(r"^\s+(\d+) (.*)$")
    for line in out.split("\n"):
        if not line.strip():
            continue
        m = head.match(line)
        if m:
            chapters.append((m.group(1), int(m.group(2)), []))
            continue
        m = verse.match(line)
        if not m or not chapters:
            sys.exit("train_small_model.py: unexpected line from bible: %r" % line)
        if int(m.group(1)) != len(chapters[-1][2]) + 1:
            sys.exit("train_small_model.py: verse out of order: %r" % line)
        chapters[-1][2].append(m.group(2).strip())
    if len(chapters) != 1189 or sum(len(c[2]) for c in chapters) != 31102:
        sys.exit("train_small_model.py: expected 1189 chapters / 31102 verses, got %d / %d"
                 % (len(chapters), sum(len(c[2]) for c in chapters)))
    return chapters


def chapter_text(ch):
    book, n, verses = ch
    return "%s %d\n%s\n" % (book, n, "\n".join(verses))


# --------------------------------------------------------------------------------------------
# tokenizer

def train_tokenizer(texts, vocab):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(RE_DIGITS), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(RE_CJK), behavior="isolated", invert=False),
        pre_tokenizers.Split(Regex(RE_WORDS), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, show_progress=False,
                             special_tokens=[AddedToken(s, special=True, normalized=False)
                                             for s in SPECIALS],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, tr)
    # BOS before every encoded text, as DeepSeek-V3's tokenizer.json does (TemplateProcessing):
    # transformers and numla then both start a plain text with BOS.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)])
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    assert tok.get_vocab_size() == vocab, tok.get_vocab_size()
    return tok


def v3_chat_template():
    with open(os.path.join(ROOT, "tests", "golden", "chat", "templates.json")) as f:
        t = json.load(f)["deepseek-v3"]
    assert t["bos_token"] == BOS and t["eos_token"] == EOS
    return t["template"]


def write_tokenizer(tok, out):
    tok.save(os.path.join(out, "tokenizer.json"))
    cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": {"__type": "AddedToken", "content": BOS, "lstrip": False,
                      "normalized": True, "rstrip": False, "single_word": False},
        "eos_token": {"__type": "AddedToken", "content": EOS, "lstrip": False,
                      "normalized": True, "rstrip": False, "single_word": False},
        "pad_token": {"__type": "AddedToken", "content": PAD, "lstrip": False,
                      "normalized": True, "rstrip": False, "single_word": False},
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": CONFIG["max_position_embeddings"],
        "sp_model_kwargs": {},
        "unk_token": None,
        "tokenizer_class": "LlamaTokenizerFast",
        "chat_template": v3_chat_template(),
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)
        f.write("\n")


# --------------------------------------------------------------------------------------------
# model

def make_config():
    kw = dict(CONFIG)
    cfg = DeepseekV3Config(**kw)
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = "eager"
    return cfg


class MTP(nn.Module):
    """DeepSeek-V3's multi-token-prediction module (depth 1): at position i it combines the main
    model's final (normed) hidden state h_i with the embedding of token i+1 and predicts token
    i+2: x = eh_proj([enorm(emb(t_{i+1})); hnorm(h_i)]), one decoder block (an MoE layer, layer
    index num_hidden_layers), then shared_head.norm and the output head shared with the main
    model (embedding and head are the main model's; the checkpoint stores copies)."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg.hidden_size
        self.enorm = mv3.DeepseekV3RMSNorm(h, cfg.rms_norm_eps)
        self.hnorm = mv3.DeepseekV3RMSNorm(h, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.block = mv3.DeepseekV3DecoderLayer(cfg, layer_idx=cfg.num_hidden_layers)
        self.norm = mv3.DeepseekV3RMSNorm(h, cfg.rms_norm_eps)

    def forward(self, main, hidden, next_ids, position_ids):
        """hidden: (B, T, H) the main model's final hidden states (after model.norm) at
        positions 0..T-1; next_ids: (B, T) the tokens at positions 1..T. Returns logits (B, T, V)
        for the tokens at positions 2..T+1."""
        emb = main.model.embed_tokens(next_ids)
        x = self.eh_proj(torch.cat([self.enorm(emb), self.hnorm(hidden)], dim=-1))
        pe = main.model.rotary_emb(x, position_ids)
        T = x.shape[1]
        mask = None
        if main.config._attn_implementation == "eager":
            mask = torch.full((T, T), float("-inf")).triu(1)[None, None]
        x = self.block(x, attention_mask=mask, position_ids=position_ids, position_embeddings=pe)
        return main.lm_head(self.norm(x))


def init_mtp(mtp, gen, std):
    with torch.no_grad():
        for name, p in mtp.named_parameters():
            if "norm" in name:
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * std)
        for name, b in mtp.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.zero_()


def layer_tensors(layer, prefix):
    """A DeepseekV3DecoderLayer's tensors under DeepSeek's checkpoint names (one tensor per
    expert: experts.E.{gate,up,down}_proj.weight)."""
    out = {}
    for name, t in list(layer.named_parameters()) + list(layer.named_buffers()):
        t = t.detach()
        if name == "mlp.experts.gate_up_proj":
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                out[prefix + "mlp.experts.%d.gate_proj.weight" % e] = t[e, :inter]
                out[prefix + "mlp.experts.%d.up_proj.weight" % e] = t[e, inter:]
        elif name == "mlp.experts.down_proj":
            for e in range(t.shape[0]):
                out[prefix + "mlp.experts.%d.down_proj.weight" % e] = t[e]
        else:
            out[prefix + name] = t
    return out


def checkpoint_tensors(model, mtp):
    cfg = model.config
    out = {"model.embed_tokens.weight": model.model.embed_tokens.weight.detach(),
           "model.norm.weight": model.model.norm.weight.detach(),
           "lm_head.weight": model.lm_head.weight.detach()}
    for i, layer in enumerate(model.model.layers):
        out.update(layer_tensors(layer, "model.layers.%d." % i))
    n = cfg.num_hidden_layers
    p = "model.layers.%d." % n
    out.update(layer_tensors(mtp.block, p))
    out[p + "enorm.weight"] = mtp.enorm.weight.detach()
    out[p + "hnorm.weight"] = mtp.hnorm.weight.detach()
    out[p + "eh_proj.weight"] = mtp.eh_proj.weight.detach()
    out[p + "embed_tokens.weight"] = model.model.embed_tokens.weight.detach()
    out[p + "shared_head.norm.weight"] = mtp.norm.weight.detach()
    out[p + "shared_head.head.weight"] = model.lm_head.weight.detach()
    bf = {}
    for k, v in out.items():
        v = v.contiguous()
        bf[k] = v.float().clone() if k.endswith("e_score_correction_bias") else \
            v.to(torch.bfloat16).clone()
    return bf


def write_config(out):
    cfg = make_config()
    d = cfg.to_dict()
    keep = dict(CONFIG)
    c = {k: d[k] for k in keep if k in d}
    c.update(keep)
    c.update({
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "moe_layer_freq": 1,
        "ep_size": 1,
        "rope_scaling": None,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "transformers_version": transformers.__version__,
    })
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "do_sample": True,
                   "temperature": 0.7, "top_p": 0.9}, f, indent=2)
        f.write("\n")


def load_main(out, dtype=torch.float32):
    """The saved main model through transformers (the MTP layer's tensors are ignored by it)."""
    m = DeepseekV3ForCausalLM.from_pretrained(out, dtype=dtype, attn_implementation="eager",
                                              experts_implementation="eager")
    m.eval()
    return m


def load_mtp(out, main):
    """The MTP module from the saved checkpoint, fp32 (upcast bf16)."""
    sd = load_file(os.path.join(out, "model.safetensors"))
    mtp = MTP(main.config)
    p = "model.layers.%d." % main.config.num_hidden_layers
    want = layer_tensors(mtp.block, p)
    with torch.no_grad():
        inter = main.config.moe_intermediate_size
        e = mtp.block.mlp.experts
        for i in range(e.num_experts):
            e.gate_up_proj[i, :inter].copy_(sd[p + "mlp.experts.%d.gate_proj.weight" % i].float())
            e.gate_up_proj[i, inter:].copy_(sd[p + "mlp.experts.%d.up_proj.weight" % i].float())
            e.down_proj[i].copy_(sd[p + "mlp.experts.%d.down_proj.weight" % i].float())
        names = dict(list(mtp.block.named_parameters()) + list(mtp.block.named_buffers()))
        for k in want:
            short = k[len(p):]
            if short in names:
                names[short].copy_(sd[k].float())
        mtp.enorm.weight.copy_(sd[p + "enorm.weight"].float())
        mtp.hnorm.weight.copy_(sd[p + "hnorm.weight"].float())
        mtp.eh_proj.weight.copy_(sd[p + "eh_proj.weight"].float())
        mtp.norm.weight.copy_(sd[p + "shared_head.norm.weight"].float())
    mtp.eval()
    return mtp


# --------------------------------------------------------------------------------------------
# data

def build_stream(tok, chapters, gen):
    """The training token stream: per chapter BOS + text + EOS, then one chat turn finishing a
    verse of that chapter (BOS <User> start <Assistant> rest EOS)."""
    ids = []
    n_chat = 0
    for ch in chapters:
        ids += [0] + tok.encode(chapter_text(ch), add_special_tokens=False).ids + [1]
        verses = [v for v in ch[2] if len(v.split()) >= 8]
        if verses:
            v = verses[int(torch.randint(len(verses), (1,), generator=gen))].split()
            k = int(torch.randint(2, min(7, len(v) - 3), (1,), generator=gen))
            ids += ([0, 3] + tok.encode(" ".join(v[:k]), add_special_tokens=False).ids + [4] +
                    tok.encode(" ".join(v[k:]), add_special_tokens=False).ids + [1])
            n_chat += 1
    return torch.tensor(ids, dtype=torch.long), n_chat


def batch(stream, gen, bsz, seq):
    """Random windows of seq + 2 tokens (inputs, next and next-next targets)."""
    starts = torch.randint(0, len(stream) - seq - 2, (bsz,), generator=gen)
    return torch.stack([stream[s:s + seq + 2] for s in starts.tolist()])


def moe_gates(model, mtp):
    return [l.mlp.gate for l in model.model.layers if isinstance(l.mlp, mv3.DeepseekV3MoE)] + \
        [mtp.block.mlp.gate]


@torch.no_grad()
def perplexity(model, ids, ctx):
    """Perplexity over non-overlapping windows of ctx tokens (each starting with BOS), every
    token but the window's first scored."""
    nll, n = 0.0, 0
    for s in range(0, len(ids) - 1, ctx - 1):
        w = [0] + ids[s:s + ctx - 1]
        if len(w) < 2:
            break
        x = torch.tensor([w])
        logits = model(input_ids=x).logits.float()[0]
        lp = F.log_softmax(logits[:-1], dim=-1)
        tgt = x[0, 1:]
        nll -= float(lp.gather(1, tgt[:, None]).sum())
        n += len(tgt)
    return math.exp(nll / n), n


@torch.no_grad()
def mtp_accuracy(model, mtp, ids, ctx):
    """How often the MTP module's argmax is the token after next (a draft's acceptance)."""
    hit, n = 0, 0
    for s in range(0, min(len(ids), 8 * ctx) - 2, ctx):
        w = torch.tensor([[0] + ids[s:s + ctx - 1]])
        if w.shape[1] < 3:
            break
        h = model.model(input_ids=w[:, :-1]).last_hidden_state
        pos = torch.arange(h.shape[1])[None]
        lg = mtp(model, h[:, :-1], w[:, 1:-1], pos[:, :-1])
        hit += int((lg.argmax(-1) == w[:, 2:]).sum())
        n += w.shape[1] - 2
    return hit / max(n, 1)


def greedy_text(model, tok, prompt, n):
    ids = [0] + tok.encode(prompt, add_special_tokens=False).ids
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                         eos_token_id=1, pad_token_id=2)
    return tok.decode(out[0, len(ids):].tolist())


# --------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "kjv-v3"))
    ap.add_argument("--steps", type=int, default=800)
    ap.add_argument("--log-every", type=int, default=25)
    args = ap.parse_args()
    check_versions()
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()

    chapters = read_bible()
    held = [c for c in chapters if c[0] in HELDOUT_BOOKS]
    train = [c for c in chapters if c[0] not in HELDOUT_BOOKS]
    os.makedirs(args.out, exist_ok=True)
    held_text = "\n".join(chapter_text(c) for c in held)
    with open(os.path.join(args.out, "heldout.txt"), "w") as f:
        f.write(held_text)
    tok = train_tokenizer([chapter_text(c) for c in train], CONFIG["vocab_size"])
    write_tokenizer(tok, args.out)
    gen = torch.Generator().manual_seed(SEED)
    stream, n_chat = build_stream(tok, train, gen)
    held_ids = tok.encode(held_text, add_special_tokens=False).ids
    train_bytes = sum(len(chapter_text(c)) for c in train)
    print("corpus: %d training chapters (%d bytes, %d tokens with %d chat turns), held out %s: "
          "%d bytes, %d tokens; tokenizer %.1fs" % (len(train), train_bytes, len(stream), n_chat,
                                                    "+".join(HELDOUT_BOOKS), len(held_text),
                                                    len(held_ids), time.time() - t0), flush=True)

    cfg = make_config()
    model = DeepseekV3ForCausalLM(cfg)
    mtp = MTP(cfg)
    init_mtp(mtp, torch.Generator().manual_seed(SEED + 1), cfg.initializer_range)
    model.train()
    mtp.train()
    params = list(model.parameters()) + list(mtp.parameters())
    decay = [p for p in params if p.ndim >= 2]
    nodecay = [p for p in params if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    print("parameters: main %d, mtp %d (embedding and head shared)" % (
        sum(p.numel() for p in model.parameters()), sum(p.numel() for p in mtp.parameters())),
        flush=True)

    gates = moe_gates(model, mtp)
    loads = {}

    def hook(mod, inp, out):
        loads[id(mod)] = (torch.bincount(out[2].reshape(-1), minlength=mod.num_experts),
                          out[0], out[2])
    for g in gates:
        g.register_forward_hook(hook)

    warm = max(1, args.steps // 20)
    log = []
    t_train = time.time()
    for step in range(args.steps):
        lr = LR * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(
            math.pi * min(1.0, step / max(1, args.steps - 1)))))
        for g_ in opt.param_groups:
            g_["lr"] = lr
        b = batch(stream, gen, BATCH, SEQ)
        x, y1, y2 = b[:, :SEQ], b[:, 1:SEQ + 1], b[:, 2:SEQ + 2]
        h = model.model(input_ids=x).last_hidden_state
        logits = model.lm_head(h)
        loss_main = F.cross_entropy(logits.reshape(-1, cfg.vocab_size), y1.reshape(-1))
        pos = torch.arange(SEQ)[None].expand(BATCH, -1)
        lg2 = mtp(model, h, y1, pos)
        loss_mtp = F.cross_entropy(lg2.reshape(-1, cfg.vocab_size), y2.reshape(-1))
        aux = 0.0
        for g in gates:  # sequence-wise balance loss: sum_i f_i * P_i per sequence
            _, rl, idx = loads[id(g)]
            sc = rl.sigmoid().view(BATCH, SEQ, -1)
            p_i = (sc / sc.sum(-1, keepdim=True)).mean(1)
            cnt = F.one_hot(idx.view(BATCH, SEQ * g.top_k), g.num_experts).sum(1).float()
            f_i = cnt * g.num_experts / (g.top_k * SEQ)
            aux = aux + (f_i * p_i).sum(-1).mean()
        loss = loss_main + MTP_WEIGHT * loss_mtp + SEQ_AUX_ALPHA * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        with torch.no_grad():
            for g in gates:
                load = loads[id(g)][0].float()
                g.e_score_correction_bias += BIAS_SPEED * torch.sign(load.mean() - load)
        if step % args.log_every == 0 or step == args.steps - 1:
            el = time.time() - t_train
            maxload = max(float(loads[id(g)][0].max()) / float(loads[id(g)][0].float().mean())
                          for g in gates)
            print("step %4d/%d  loss %.3f  mtp %.3f  lr %.2e  max/mean expert load %.2f  %.0fs"
                  % (step, args.steps, loss_main.item(), loss_mtp.item(), lr, maxload, el),
                  flush=True)
            log.append({"step": step, "loss": round(loss_main.item(), 4),
                        "mtp_loss": round(loss_mtp.item(), 4), "max_over_mean_load": round(maxload, 3)})
    train_s = time.time() - t_train

    # save, then judge the saved bf16 files only
    sd = checkpoint_tensors(model, mtp)
    save_file({k: sd[k] for k in sorted(sd)}, os.path.join(args.out, "model.safetensors"),
              metadata={"format": "pt"})
    write_config(args.out)
    del model, mtp
    ref = load_main(args.out)
    ref.config._attn_implementation = "eager"
    ppl, n_tok = perplexity(ref, held_ids, 512)
    ref_mtp = load_mtp(args.out, ref)
    acc = mtp_accuracy(ref, ref_mtp, held_ids, 512)
    samples = {p: greedy_text(ref, tok, p, 40) for p in
               ("In the beginning", "And Jesus said unto them,", "The LORD is my shepherd;")}
    res = {"train_seconds": round(train_s), "steps": args.steps, "batch": BATCH, "seq": SEQ,
           "train_tokens_seen": args.steps * BATCH * SEQ, "train_stream_tokens": len(stream),
           "heldout_tokens": n_tok, "heldout_ppl_ctx512": round(ppl, 3),
           "heldout_mtp_top1_next_next": round(acc, 4), "final_loss": log[-1]["loss"],
           "greedy_samples": samples, "log": log,
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                        "tokenizers": tokenizers.__version__}}
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    print("trained %d steps in %.0f s; held-out perplexity (bf16 weights, ctx 512, %d tokens) "
          "%.3f; MTP top-1 on the token after next %.3f" % (args.steps, train_s, n_tok, ppl, acc))
    for p, s in samples.items():
        print("greedy: %r -> %r" % (p, s))


if __name__ == "__main__":
    main()
