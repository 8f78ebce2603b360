#!/usr/bin/python3
"""PyTorch peer for `strata bench model`: the same GPT-2 or Llama training step (forward,
loss, backward, AdamW) on the CPU, same shapes and threads. Prints one JSON line.

Run by `strata bench model` with Debian's python3-torch. For a fair peer install
libopenblas0-openmp (Debian's default reference BLAS is ~25x slower) and keep
GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which strata sets when it launches this.
bf16 uses torch.autocast (bf16 compute, f32 master weights), like strata --precision bf16.
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def attn(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, maxT):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.T  # tied embeddings
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate(x, cos, sin):  # rotate-half RoPE, as transformers' Llama
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, NKV, I, eps):
        super().__init__()
        self.NH, self.NKV, self.hd, self.eps = NH, NKV, C // NH, eps
        self.n1, self.n2 = nn.Parameter(torch.ones(C)), nn.Parameter(torch.ones(C))
        self.qkv = nn.Linear(C, (NH + 2 * NKV) * self.hd, bias=False)
        self.o = nn.Linear(NH * self.hd, C, bias=False)
        self.gate_up, self.down = nn.Linear(C, 2 * I, bias=False), nn.Linear(I, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(rms_norm(x, self.n1, self.eps)).split(
            [self.NH * self.hd, self.NKV * self.hd, self.NKV * self.hd], dim=2)
        q = rotate(q.view(B, T, self.NH, self.hd).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, T, self.NKV, self.hd).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.NKV, self.hd).transpose(1, 2)
        k, v = (t.repeat_interleave(self.NH // self.NKV, dim=1) for t in (k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).contiguous().view(B, T, self.NH * self.hd))
        g, u = self.gate_up(rms_norm(x, self.n2, self.eps)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
        NKV, V = cfg.get("num_key_value_heads", NH), cfg["vocab_size"]
        self.eps, self.hd, self.theta = cfg.get("rms_norm_eps", 1e-5), C // NH, cfg.get("rope_theta", 10000.0)
        self.embed = nn.Embedding(V, C)
        self.blocks = nn.ModuleList(
            LlamaBlock(C, NH, NKV, cfg["intermediate_size"], self.eps) for _ in range(cfg["num_hidden_layers"]))
        self.norm = nn.Parameter(torch.ones(C))
        self.head = nn.Linear(C, V, bias=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hd, 2).float() / self.hd))
        ang = torch.outer(torch.arange(T).float(), inv)
        cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
        x = self.embed(idx)
        for b in self.blocks:
            x = b(x, cos, sin)
        logits = self.head(rms_norm(x, self.norm, self.eps))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def blas_name():
    """The BLAS library actually mapped into this process (Debian switches it by alternatives)."""
    try:
        torch.ones(64, 64) @ torch.ones(64, 64)  # make sure BLAS is loaded
        with open("/proc/self/maps") as f:
            maps = f.read()
        for name in ("openblas", "blis", "mkl", "atlas"):
            if "lib" + name in maps:
                return name
        return "reference" if "libblas" in maps else "unknown"
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    cfg = json.load(open(a.config))
    torch.manual_seed(0)
    if cfg.get("arch") == "llama" or cfg.get("model_type") == "llama":
        model = Llama(cfg)
    else:
        model = GPT(cfg["n_layer"], cfg["n_embd"], cfg["n_head"], cfg["vocab_size"], cfg["n_positions"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq_len))
    tgt = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq_len))
    best = float("inf")
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            best = min(best, dt)
    print(json.dumps({"tokens_per_s": a.batch * a.seq_len / best, "step_s": best, "dtype": a.dtype,
                      "threads": torch.get_num_threads(), "blas": blas_name(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
