#!/usr/bin/python3
"""Writes tests/fixtures/gpt2_tiny.bin: a tiny GPT-2's parameters, a batch, and the
reference logits, loss and parameter gradients computed by PyTorch in float64. With --tiles,
tests/fixtures/gpt2_tiny_tiles.bin instead: the same model with one 64-wide head (n_embd 64,
GPT-2's head size) and 64 positions, so that a CPU with AMX runs its attention on tiles (cpu/attention_amx.h
takes heads whose T and head size are multiples of 32).

The reference forward is written out here op by op (pre-LN GPT-2, learned positions, tied
embeddings, tanh GELU, LayerNorm eps 1e-5) so it documents the contract Strata matches.
Run with Debian's torch:  /usr/bin/python3 tests/tools/make_gpt2_fixture.py [--tiles]
CI never runs this; it only reads the committed fixture.

File layout (little-endian):
  int32 magic 0x53545231 ('STR1'), int32 version 1
  int32 L, NH, C, V, Vp, maxT, B, T
  int32 tokens[B*T], int32 targets[B*T]     (a target of -1 is masked)
  f32 params[N]                              (llm.c order, see src/model/gpt2_params.cpp)
  f32 logits[B*T*Vp]
  f64 loss
  f32 grads[N]
"""
import json
import math
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def param_shapes(L, C, Vp, maxT):
    return [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
            ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
            ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
            ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def attention(qkv, NH):
    B, T, C3 = qkv.shape
    C = C3 // 3
    q, k, v = qkv.split(C, dim=-1)
    q = q.view(B, T, NH, C // NH).transpose(1, 2)
    k = k.view(B, T, NH, C // NH).transpose(1, 2)
    v = v.view(B, T, NH, C // NH).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C)


def forward(p, tokens, L, NH):
    B, T = tokens.shape
    x = p["wte"][tokens] + p["wpe"][:T]
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        x = x + attention(qkv, NH) @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        x = x + gelu(h @ p["fcw"][l].T + p["fcb"][l]) @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    return x @ p["wte"].T  # logits over the padded vocabulary


def main():
    tiles = "--tiles" in sys.argv[1:]
    cfg = json.load(open(os.path.join(ROOT, "configs", "gpt2-tiny.json")))
    L, NH, C, V = cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["vocab_size"]
    Vp, maxT = cfg["padded_vocab_size"], cfg["n_positions"]
    B, T = 2, 16
    std = 0.2
    if tiles:  # the weights' spread scaled so that activations keep the tiny model's size
        NH, C, maxT, T = 1, 64, 64, 64
        std = 0.2 * math.sqrt(cfg["n_embd"] / C)
    g = torch.Generator().manual_seed(1234)
    params = {}
    for name, shape in param_shapes(L, C, Vp, maxT):
        t = std * torch.randn(shape, generator=g, dtype=torch.float64)
        if name in ("ln1w", "ln2w", "lnfw"):
            t = t + 1.0
        # Round to f32 first so Strata (which stores f32) sees exactly these values.
        params[name] = t.float().double().requires_grad_(True)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    targets[0, 3] = -1
    logits = forward(params, tokens, L, NH)
    loss = torch.nn.functional.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1), ignore_index=-1)
    loss.backward()

    out = os.path.join(ROOT, "tests", "fixtures", "gpt2_tiny_tiles.bin" if tiles else "gpt2_tiny.bin")
    with open(out, "wb") as f:
        f.write(struct.pack("<2i", 0x53545231, 1))
        f.write(struct.pack("<8i", L, NH, C, V, Vp, maxT, B, T))
        f.write(tokens.to(torch.int32).numpy().tobytes())
        f.write(targets.to(torch.int32).numpy().tobytes())
        for name, _ in param_shapes(L, C, Vp, maxT):
            f.write(params[name].detach().float().numpy().tobytes())
        f.write(logits.detach().float().numpy().tobytes())
        f.write(struct.pack("<d", loss.item()))
        for name, _ in param_shapes(L, C, Vp, maxT):
            f.write(params[name].grad.float().numpy().tobytes())
    print(f"wrote {out}: loss {loss.item():.6f}")


if __name__ == "__main__":
    sys.exit(main())
