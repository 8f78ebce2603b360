#!/usr/bin/env python3
"""Writes tests/fixtures/hf-families/<name>/ (with transformers 4.x) or
tests/fixtures/hf-families-tf5/<name>/ (with transformers 5.x): tiny models of the
Llama-family variants that people fine-tune, made and run by Hugging Face transformers
itself, so Strata's parity is with the library and not with a re-implementation of it, and
with the config.json each major version writes (transformers 5: rope_parameters, dtype,
layer_types).

  gpt2             GPT-2 (Conv1D weights, tied head, learned positions); its *_pdrop at 0,
                   since Strata's dropout masks are its own (per sample), not torch's RNG
  llama2           Llama 2: MHA, untied, no scaling
  llama31-scaled   Llama 3.1: rope_scaling llama3, GQA, untied
  llama32-tied     Llama 3.2: rope_scaling llama3, tied embeddings, explicit head_dim
  llama2-linear    Llama 2 long-context: rope_scaling linear
  mistral          Mistral-Nemo style: head_dim 16 with hidden 32 / 4 heads, sliding_window
                   4096 (longer than any sequence here, so full causal attention)
  mistral-window   Mistral v0.1 style: a sliding_window of 5 keys, shorter than the sequence
  qwen2-window     Qwen2 with use_sliding_window: layer 0 full, layer 1 under a window of 6
  olmo2            OLMo-2: norms after each sublayer, q/k norms over the whole projections
  phi3             Phi-3/Phi-4: fused qkv_proj and gate_up_proj, partial_rotary_factor 0.5
  gemma2           Gemma-2: norms around both sublayers with 1 + w, GeGLU, the scaled
                   embedding, query_pre_attn_scalar, attention and final soft-caps (small
                   enough to matter), sliding and full layers alternating (window 5), tied
  gemma3-text      Gemma-3's language model: q/k norms, no soft-caps, a sliding layer with its
                   own RoPE base and a full one with linear scaling
  gemma3           Gemma3ForConditionalGeneration with a tiny vision tower: Strata trains the
                   language model and exports the text model
  qwen2            Qwen2.5: q/k/v biases, tied embeddings
  qwen3            Qwen3: per-head q/k RMSNorm, head_dim 16 ≠ hidden/heads, tied embeddings

Each holds what save_pretrained writes (config.json with every key transformers puts
there, model.safetensors, F32), and:

  expected.bin        int32 B, T, V; int32 tokens[B*T]; f32 logits[B*T*V] (float64 forward)
  train.jsonl         the one training sequence (T+1 ids, loss on every target), 4 times
  train.json          the optimizer settings and the 5 losses of torch.optim.AdamW on it
  after.bin           expected.bin's layout: the logits after those 5 steps (the export's check)

Run it with a Python that has torch ≥ 2 and transformers 4.51+ or 5.x (not CI's business: CI
reads the committed files); tests/tools/make_fixture_venv.sh makes one:
  tests/tools/make_fixture_venv.sh 5 /opt/strata-fixtures/tf5
  /opt/strata-fixtures/tf5/bin/python tests/tools/make_hf_family_fixtures.py
The committed hf-families/ were made with transformers 4.51.3 and torch 2.5.1 (mistral-window
and qwen2-window with 4.57.6 and torch 2.15.0), hf-families-tf5/ with 5.25.0 and torch 2.15.0.
"""
import json
import os
import struct

import torch
import transformers
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3Config, Gemma3ForCausalLM,
                          Gemma3ForConditionalGeneration, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, Olmo2Config, Olmo2ForCausalLM, Phi3Config,
                          Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

MAJOR = int(transformers.__version__.split(".")[0])
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                    "hf-families" if MAJOR < 5 else "hf-families-tf5")
B, T, V = 2, 16, 97
STEPS, LR, BETAS, EPS, WD = 5, 1e-3, (0.9, 0.95), 1e-8, 0.1
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}


def rope(theta=None, scaling=None):
    """The RoPE keyword arguments as this transformers names them: rope_theta and rope_scaling
    (4.x) or one rope_parameters object (5.x)."""
    if MAJOR < 5:
        return {**({"rope_theta": theta} if theta else {}), **({"rope_scaling": scaling} if scaling else {})}
    return {"rope_parameters": {"rope_theta": theta or 10000.0, **(scaling or {"rope_type": "default"})}}


def gemma3_rope():
    """Gemma-3's two RoPEs: the full layers' base with linear scaling (as the 4B-27B models),
    the sliding layers' own base."""
    if MAJOR < 5:
        return dict(rope_theta=1e6, rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 8.0})
    return {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}}


GEMMA = dict(head_dim=16, query_pre_attn_scalar=12, sliding_window=5, pad_token_id=0,
             layer_types=["sliding_attention", "full_attention"])


def gemma3_multimodal(**text):
    """A Gemma3ForConditionalGeneration config: the text model and a tiny SigLIP tower."""
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    cfg = Gemma3Config(text_config=Gemma3TextConfig(**text), vision_config=vision, mm_tokens_per_image=4)
    cfg.text_config._attn_implementation = cfg.vision_config._attn_implementation = "eager"
    return cfg


GPT2 = dict(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, embd_pdrop=0.0, attn_pdrop=0.0,
            resid_pdrop=0.0, bos_token_id=1, eos_token_id=2)

FAMILIES = {
    "gpt2": (GPT2Config, GPT2LMHeadModel, None),
    "llama2": (LlamaConfig, LlamaForCausalLM, dict(num_key_value_heads=4)),
    "llama31-scaled": (LlamaConfig, LlamaForCausalLM, rope(500000.0, LLAMA3)),
    "llama32-tied": (LlamaConfig, LlamaForCausalLM, dict(**rope(500000.0, LLAMA3), tie_word_embeddings=True, head_dim=8)),
    "llama2-linear": (LlamaConfig, LlamaForCausalLM,
                      dict(num_key_value_heads=4, **rope(None, {"rope_type": "linear", "factor": 2.0}))),
    "mistral": (MistralConfig, MistralForCausalLM, dict(head_dim=16, sliding_window=4096, **rope(1e6))),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=True, **rope(1e6))),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(tie_word_embeddings=True, head_dim=16, **rope(1e6))),
    "mistral-window": (MistralConfig, MistralForCausalLM, dict(head_dim=16, sliding_window=5, **rope(1e6))),
    "qwen2-window": (Qwen2Config, Qwen2ForCausalLM,
                     dict(tie_word_embeddings=True, use_sliding_window=True, sliding_window=6, max_window_layers=1,
                          **rope(1e6))),
    "olmo2": (Olmo2Config, Olmo2ForCausalLM, dict(pad_token_id=0, **rope(5e5))),
    "phi3": (Phi3Config, Phi3ForCausalLM, dict(partial_rotary_factor=0.5, pad_token_id=0,
                                               original_max_position_embeddings=64, **rope(1e4))),
    "gemma2": (Gemma2Config, Gemma2ForCausalLM,
               dict(**GEMMA, attn_logit_softcapping=1.0, final_logit_softcapping=2.0, **rope(1e4))),
    "gemma3-text": (Gemma3TextConfig, Gemma3ForCausalLM, dict(**GEMMA, **gemma3_rope())),
    "gemma3": (gemma3_multimodal, Gemma3ForConditionalGeneration, dict(**GEMMA, **gemma3_rope())),
}


def write_logits(path, tokens, logits):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", B, T, V))
        f.write(tokens.to(torch.int32).numpy().tobytes())
        f.write(logits.to(torch.float32).contiguous().numpy().tobytes())


def logits_f64(model, tokens):
    m = model.double()
    with torch.no_grad():
        out = m(tokens).logits
    model.float()
    return out


def make(name, cfg_cls, model_cls, extra):
    out = os.path.join(ROOT, name)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1234)
    cfg = cfg_cls(**GPT2) if extra is None else cfg_cls(**{**COMMON, **extra})
    cfg._attn_implementation = "eager"
    model = model_cls(cfg).float()
    with torch.no_grad():  # biases and norms away from their 0 and 1 inits, so they matter
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out)  # safetensors, the default of both major versions
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, V, (B, T), generator=g)
    write_logits(os.path.join(out, "expected.bin"), tokens, logits_f64(model, tokens))

    # Five AdamW steps on one sequence, the loss the mean over its T targets; decay on the
    # matrices (and embeddings), none on norms and biases, as Strata groups them.
    seq = torch.randint(3, V, (1, T + 1), generator=g)
    with open(os.path.join(out, "train.jsonl"), "w") as f:
        for _ in range(4):
            f.write(json.dumps({"input_ids": seq[0].tolist(), "loss_mask": [1] * (T + 1)}) + "\n")
    model.train()
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": rest, "weight_decay": 0.0}], lr=LR,
                            betas=BETAS, eps=EPS)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        logits = model(seq[:, :T]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), seq[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    write_logits(os.path.join(out, "after.bin"), tokens, logits_f64(model, tokens))
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump({"steps": STEPS, "seq_len": T, "lr": LR, "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS,
                   "weight_decay": WD, "losses": losses}, f, indent=1)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, losses {['%.5f' % x for x in losses]}")


if __name__ == "__main__":
    import sys
    # Names on the command line make only those (the others' files stay as committed).
    for name, (c, m, extra) in FAMILIES.items():
        if len(sys.argv) < 2 or name in sys.argv[1:]:
            make(name, c, m, extra)
