#!/usr/bin/python3
"""Writes tests/fixtures/hf-llama-tiny{,-sharded}/ (see make_llama) and
tests/fixtures/hf-gpt2-tiny/ and tests/fixtures/hf-gpt2-tiny-sharded/: a tiny
GPT-2 in Hugging Face's format (config.json + safetensors, Conv1D [in, out] weights, the
unpadded vocabulary, tied head) and the logits PyTorch computes for a batch (float64, the
reference forward of make_gpt2_fixture.py, which documents the contract op by op).

  hf-gpt2-tiny/           model.safetensors, F32, names without a prefix ("h.0.attn.c_attn.weight")
  hf-gpt2-tiny-sharded/   model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json,
                          BF16, names under "transformer." (as GPT2LMHeadModel saves them)
  */expected.bin          int32 B, T, V; int32 tokens[B*T]; f32 logits[B*T*V]

safetensors is written by hand (8-byte header length, JSON header, data) so the script
needs only Debian's torch:  /usr/bin/python3 tests/tools/make_hf_fixture.py
CI never runs this; it only reads the committed fixtures.
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_gpt2_fixture import ROOT, forward  # noqa: E402


def write_safetensors(path, tensors, dtype):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        t = t.detach().to(dtype).contiguous()
        raw = t.view(torch.int16).numpy().tobytes() if dtype == torch.bfloat16 else t.numpy().tobytes()
        header[name] = {"dtype": {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[dtype],
                        "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def write_model(out, config, named, dtype, shards, expected):
    """config.json, the weights (one file, or `shards` files with an index) and expected.bin."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), named, dtype)
    else:
        per = (len(named) + shards - 1) // shards
        index = {"metadata": {"total_size": 0}, "weight_map": {}}
        for i in range(shards):
            shard = named[i * per:(i + 1) * per]
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(os.path.join(out, fname), shard, dtype)
            for n, _ in shard:
                index["weight_map"][n] = fname
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    B, T, tokens, logits = expected
    with open(os.path.join(out, "expected.bin"), "wb") as f:
        f.write(struct.pack("<3i", B, T, logits.shape[-1]))
        f.write(tokens.to(torch.int32).numpy().tobytes())
        f.write(logits.float().numpy().tobytes())
    print(f"wrote {out}")


def llama_forward(p, tokens, L, NH, NKV, eps, theta):
    """Hugging Face LlamaForCausalLM's forward in float64, op by op: RMSNorm (x·rsqrt(mean
    x²+eps)·w), rotary embeddings in the rotate-half form (pairs (i, i+d/2), inverse
    frequencies theta^(-2i/d), positions 0..T-1), grouped-query attention (query head h
    reads kv head h // (NH/NKV), as repeat_kv does), SwiGLU (silu(x·Wg)·(x·Wu))·Wd, and an
    untied head. Weights are nn.Linear's [out, in]."""
    x = p["embed"][tokens]
    B, T, C = x.shape
    d = C // NH
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rms(v, w):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w

    def rot(v):
        return torch.cat([-v[..., d // 2:], v[..., :d // 2]], dim=-1)

    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for l in range(L):
        h = rms(x, p["attn_norm"][l])
        q = (h @ p["wq"][l].T).view(B, T, NH, d).transpose(1, 2)
        k = (h @ p["wk"][l].T).view(B, T, NKV, d).transpose(1, 2)
        v = (h @ p["wv"][l].T).view(B, T, NKV, d).transpose(1, 2)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(NH // NKV, dim=1), v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-1, -2)) / d ** 0.5
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["wo"][l].T
        h = rms(x, p["mlp_norm"][l])
        x = x + (torch.nn.functional.silu(h @ p["wg"][l].T) * (h @ p["wu"][l].T)) @ p["wd"][l].T
    return rms(x, p["norm"]) @ p["lm_head"].T


def make_llama():
    """hf-llama-tiny/ (F32, one file, with the rotary inv_freq buffer older exports carry)
    and hf-llama-tiny-sharded/ (F16, three shards): grouped-query attention, 4 heads over
    2 kv heads, head size 8, rope_theta 500000."""
    L, NH, NKV, C, I, V, T_max, eps, theta = 2, 4, 2, 32, 48, 37, 16, 1e-5, 500000.0
    d = C // NH
    g = torch.Generator().manual_seed(8765)
    r = lambda *shape: 0.2 * torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    p = {"embed": r(V, C), "attn_norm": 1 + r(L, C), "wq": r(L, NH * d, C), "wk": r(L, NKV * d, C),
         "wv": r(L, NKV * d, C), "wo": r(L, C, NH * d), "mlp_norm": 1 + r(L, C), "wg": r(L, I, C),
         "wu": r(L, I, C), "wd": r(L, C, I), "norm": 1 + r(C), "lm_head": r(V, C)}
    B, T = 2, 12
    tokens = torch.randint(0, V, (B, T), generator=g)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C,
              "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH,
              "num_key_value_heads": NKV, "head_dim": d, "vocab_size": V, "max_position_embeddings": T_max,
              "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": None, "hidden_act": "silu",
              "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0,
              "mlp_bias": False, "pretraining_tp": 1, "initializer_range": 0.02, "bos_token_id": 1,
              "eos_token_id": 2, "use_cache": True, "transformers_version": "4.46.0"}
    for variant, dtype, shards in [("hf-llama-tiny", torch.float32, 1), ("hf-llama-tiny-sharded", torch.float16, 3)]:
        q = {k: v.to(dtype).double() for k, v in p.items()}
        logits = llama_forward(q, tokens, L, NH, NKV, eps, theta)
        named = [("model.embed_tokens.weight", q["embed"])]
        for l in range(L):
            h = f"model.layers.{l}."
            named += [(h + "input_layernorm.weight", q["attn_norm"][l]), (h + "self_attn.q_proj.weight", q["wq"][l]),
                      (h + "self_attn.k_proj.weight", q["wk"][l]), (h + "self_attn.v_proj.weight", q["wv"][l]),
                      (h + "self_attn.o_proj.weight", q["wo"][l]),
                      (h + "post_attention_layernorm.weight", q["mlp_norm"][l]),
                      (h + "mlp.gate_proj.weight", q["wg"][l]), (h + "mlp.up_proj.weight", q["wu"][l]),
                      (h + "mlp.down_proj.weight", q["wd"][l])]
        named += [("model.norm.weight", q["norm"]), ("lm_head.weight", q["lm_head"])]
        named = [(n, t.float()) for n, t in named]
        if shards == 1:
            named.append(("model.layers.0.self_attn.rotary_emb.inv_freq",
                          1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d)))
        cfg = dict(config, torch_dtype="float32" if dtype == torch.float32 else "float16")
        write_model(os.path.join(ROOT, "tests", "fixtures", variant), cfg, named, dtype, shards,
                    (B, T, tokens, logits))


def main():
    make_llama()
    L, NH, C, V, T_max = 2, 2, 16, 37, 16
    Vp = 40  # Strata pads the vocabulary to a multiple of 8 here (padded_vocab_size in its config)
    g = torch.Generator().manual_seed(4321)
    p = {
        "wte": 0.2 * torch.randn(Vp, C, generator=g, dtype=torch.float64),
        "wpe": 0.2 * torch.randn(T_max, C, generator=g, dtype=torch.float64),
    }
    p["wte"][V:] = 0  # padded rows: HF has no such rows
    for name, shape in [("ln1w", (L, C)), ("ln1b", (L, C)), ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)),
                        ("attprojw", (L, C, C)), ("attprojb", (L, C)), ("ln2w", (L, C)), ("ln2b", (L, C)),
                        ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)), ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)),
                        ("lnfw", (C,)), ("lnfb", (C,))]:
        p[name] = 0.2 * torch.randn(shape, generator=g, dtype=torch.float64) + (1.0 if name.endswith("w") and
                                                                                 name.startswith("ln") else 0.0)
    B, T = 2, 12
    tokens = torch.randint(0, V, (B, T), generator=g)
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
              "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1, "layer_norm_epsilon": 1e-05,
              "initializer_range": 0.02, "n_ctx": T_max, "n_embd": C, "n_head": NH, "n_inner": None,
              "n_layer": L, "n_positions": T_max, "vocab_size": V, "bos_token_id": 0, "eos_token_id": 0,
              "scale_attn_weights": True, "use_cache": True, "tie_word_embeddings": True,
              "torch_dtype": "float32", "transformers_version": "4.46.0"}

    for variant, dtype, prefix in [("hf-gpt2-tiny", torch.float32, ""),
                                   ("hf-gpt2-tiny-sharded", torch.bfloat16, "transformer.")]:
        # The weights as stored (rounded to the file's dtype), and the reference from them.
        q = {k: v.to(dtype).double() for k, v in p.items()}
        logits = forward(q, tokens, L, NH)[..., :V]
        named = [("wte.weight", q["wte"][:V]), ("wpe.weight", q["wpe"])]
        for l in range(L):
            h = f"h.{l}."
            named += [(h + "ln_1.weight", q["ln1w"][l]), (h + "ln_1.bias", q["ln1b"][l]),
                      (h + "attn.c_attn.weight", q["qkvw"][l].T), (h + "attn.c_attn.bias", q["qkvb"][l]),
                      (h + "attn.c_proj.weight", q["attprojw"][l].T), (h + "attn.c_proj.bias", q["attprojb"][l]),
                      (h + "ln_2.weight", q["ln2w"][l]), (h + "ln_2.bias", q["ln2b"][l]),
                      (h + "mlp.c_fc.weight", q["fcw"][l].T), (h + "mlp.c_fc.bias", q["fcb"][l]),
                      (h + "mlp.c_proj.weight", q["fcprojw"][l].T), (h + "mlp.c_proj.bias", q["fcprojb"][l])]
        named += [("ln_f.weight", q["lnfw"]), ("ln_f.bias", q["lnfb"])]
        named = [(prefix + n, t.float()) for n, t in named]
        # Older exports carry the causal mask as a buffer; the importer must skip it.
        named.append((prefix + "h.0.attn.bias", torch.tril(torch.ones(1, 1, T_max, T_max))))
        out = os.path.join(ROOT, "tests", "fixtures", variant)
        os.makedirs(out, exist_ok=True)
        cfg = dict(config, torch_dtype="float32" if dtype == torch.float32 else "bfloat16")
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        if prefix == "":
            write_safetensors(os.path.join(out, "model.safetensors"), named, dtype)
        else:
            half = len(named) // 2
            shards = [named[:half], named[half:]]
            index = {"metadata": {"total_size": 0}, "weight_map": {}}
            for i, shard in enumerate(shards):
                fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                # The mask buffer stays F32 in real files; keep every tensor in the shard's dtype here.
                write_safetensors(os.path.join(out, fname), shard, dtype)
                for n, _ in shard:
                    index["weight_map"][n] = fname
            with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
                json.dump(index, f, indent=2)
        with open(os.path.join(out, "expected.bin"), "wb") as f:
            f.write(struct.pack("<3i", B, T, V))
            f.write(tokens.to(torch.int32).numpy().tobytes())
            f.write(logits.float().numpy().tobytes())
        print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
