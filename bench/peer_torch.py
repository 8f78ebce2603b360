#!/usr/bin/python3
"""PyTorch peer for `strata bench model`: the same GPT-2 or Llama training step (forward, loss,
backward, AdamW) on the CPU, same shapes and threads. Prints one JSON line.

Written as nanoGPT (GPT-2) and torchtitan (Llama) write their models on PyTorch 2:
F.scaled_dot_product_attention(is_causal=True), with enable_gqa for grouped-query attention;
the fused AdamW; bf16 through torch.autocast (bf16 compute, f32 master weights, like strata
--precision bf16); eager, or under torch.compile with --compile. GPT-2's embedding is padded to
padded_vocab_size, as nanoGPT pads it to 50304.

On PyTorch 1.13 (Debian's python3-torch), which has none of these, it falls back to the
hand-written attention and the for-loop AdamW and says so in its JSON. There, install
libopenblas0-openmp (Debian's default reference BLAS is ~25x slower); strata sets
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 and OPENBLAS_CORETYPE when it launches this.
"""
import argparse
import json
import math
import os
import re
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


def attention(q, k, v, n_rep):
    """Causal attention over (B, heads, T, hd); k and v may have n_rep times fewer heads."""
    if HAS_SDPA:
        if n_rep > 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if n_rep > 1:
        k, v = (t.repeat_interleave(n_rep, dim=1) for t in (k, v))
    T = q.size(-2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(dim=-1)
    return att @ v


class CausalSelfAttention(nn.Module):  # nanoGPT's
    def __init__(self, C, NH):
        super().__init__()
        self.n_head = NH
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        return self.c_proj(attention(q, k, v, 1).transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.attn = CausalSelfAttention(C, NH)
        self.c_fc, self.c_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, maxT):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as nanoGPT

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(C))

    def forward(self, x):
        if hasattr(F, "rms_norm"):
            return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cache(T, hd, theta):
    inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.outer(torch.arange(T).float(), inv)
    return torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()


def rotate(x, cos, sin):  # rotate-half RoPE, as Strata's and transformers' Llama
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class LlamaBlock(nn.Module):  # torchtitan's Attention + FeedForward
    def __init__(self, C, NH, NKV, I, eps):
        super().__init__()
        self.NH, self.NKV, self.hd = NH, NKV, C // NH
        self.attention_norm, self.ffn_norm = RMSNorm(C, eps), RMSNorm(C, eps)
        self.wq = nn.Linear(C, NH * self.hd, bias=False)
        self.wk = nn.Linear(C, NKV * self.hd, bias=False)
        self.wv = nn.Linear(C, NKV * self.hd, bias=False)
        self.wo = nn.Linear(NH * self.hd, C, bias=False)
        self.w1, self.w3 = nn.Linear(C, I, bias=False), nn.Linear(C, I, bias=False)
        self.w2 = nn.Linear(I, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.attention_norm(x)
        q = rotate(self.wq(h).view(B, T, self.NH, self.hd).transpose(1, 2), cos, sin)
        k = rotate(self.wk(h).view(B, T, self.NKV, self.hd).transpose(1, 2), cos, sin)
        v = self.wv(h).view(B, T, self.NKV, self.hd).transpose(1, 2)
        y = attention(q, k, v, self.NH // self.NKV)
        x = x + self.wo(y.transpose(1, 2).contiguous().view(B, T, self.NH * self.hd))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, cfg, T):
        super().__init__()
        C, NH = cfg["hidden_size"], cfg["num_attention_heads"]
        NKV, V = cfg.get("num_key_value_heads", NH), cfg["vocab_size"]
        eps = cfg.get("rms_norm_eps", 1e-5)
        self.tok_embeddings = nn.Embedding(V, C)
        self.layers = nn.ModuleList(
            LlamaBlock(C, NH, NKV, cfg["intermediate_size"], eps) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(C, eps)
        self.output = nn.Linear(C, V, bias=False)
        cos, sin = rope_cache(T, C // NH, cfg.get("rope_theta", 10000.0))
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx, targets):
        x = self.tok_embeddings(idx)
        for b in self.layers:
            x = b(x, self.cos, self.sin)
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def make_optimizer(model):
    """AdamW as nanoGPT makes it: fused where this PyTorch has a fused CPU AdamW."""
    params = list(model.parameters())
    for kind in ("fused", "foreach"):
        try:
            return torch.optim.AdamW(params, lr=1e-4, **{kind: True}), kind
        except (TypeError, RuntimeError, ValueError):
            pass
    return torch.optim.AdamW(params, lr=1e-4), "for-loop"


def blas_name():
    """The BLAS this PyTorch was built with (PyPI's links MKL in statically), else the library
    mapped into this process (Debian's switches it by alternatives)."""
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    if m and m.group(1) not in ("open", "generic"):
        return m.group(1)
    try:
        torch.ones(64, 64) @ torch.ones(64, 64)  # make sure BLAS is loaded
        with open("/proc/self/maps") as f:
            maps = f.read()
        for name in ("mkl", "openblas", "blis", "atlas"):
            if "lib" + name in maps:
                return name
        return "reference" if "libblas" in maps else "unknown"
    except OSError:
        return "unknown"


def captured_stdout(fn):
    """What fn writes to file descriptor 1 (oneDNN and MKL print their verbose lines there)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 1)
        try:
            fn()
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        return f.read().decode(errors="replace")


def libraries():
    """The GEMM libraries' versions and the ISA each dispatches to on this CPU, from their verbose
    output: oneDNN for bf16 linear layers, MKL (or another BLAS) for f32 ones."""
    out = {"cpu_capability": torch.backends.cpu.get_cpu_capability()
           if hasattr(torch.backends, "cpu") and hasattr(torch.backends.cpu, "get_cpu_capability") else "unknown",
           "blas": blas_name()}
    m = re.search(r"MKL-DNN v([\d.]+)", torch.__config__.show())
    out["onednn"] = m.group(1) if m else "none"
    x = torch.randn(64, 64)
    w = torch.randn(64, 64)
    mk = getattr(torch.backends, "mkldnn", None)
    if mk is not None and hasattr(mk, "verbose") and mk.is_available():
        def bf16_linear():
            with mk.verbose(1):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    F.linear(x, w)
        m = re.search(r"isa:([^,\n]+)", captured_stdout(bf16_linear))
        out["onednn_isa"] = m.group(1).strip() if m else "unknown"
    mkl = getattr(torch.backends, "mkl", None)
    if out["blas"] == "mkl" and mkl is not None and hasattr(mkl, "verbose"):
        def f32_gemm():
            with mkl.verbose(1):
                x @ w
        text = captured_stdout(f32_gemm)
        # "MKL_VERBOSE oneMKL 2024.0 Update 2 Product build ... for Intel(R) 64 architecture
        # Intel(R) AVX-512 ... enabled processors, ..."; on CPUs MKL does not tune for it names
        # no ISA ("Intel(R) Architecture processors").
        m = re.search(r"MKL_VERBOSE (?:oneMKL|Intel\(R\) (?:oneAPI )?(?:MKL|Math Kernel Library)) ([\d.]+(?: Update \d+)?)",
                      text)
        out["mkl"] = m.group(1) if m else "unknown"
        m = re.search(r"64 architecture (.*?processors)", text)
        out["mkl_isa"] = m.group(1) if m else "unknown"
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if a.compile and not TORCH2:
        sys.exit(f"--compile: torch {torch.__version__} has no torch.compile")
    cfg = json.load(open(a.config))
    torch.manual_seed(0)
    if cfg.get("arch") == "llama" or cfg.get("model_type") == "llama":
        model = Llama(cfg, a.seq_len)
    else:
        V = cfg.get("padded_vocab_size", cfg["vocab_size"])
        model = GPT(cfg["n_layer"], cfg["n_embd"], cfg["n_head"], V, cfg["n_positions"])
    opt, adamw = make_optimizer(model)
    step_model = torch.compile(model) if a.compile else model
    idx = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq_len))
    tgt = torch.randint(0, cfg["vocab_size"], (a.batch, a.seq_len))
    best, first = float("inf"), 0.0
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = step_model(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        if s == 0:
            first = dt
        if s >= a.warmup:
            best = min(best, dt)
    out = {"tokens_per_s": a.batch * a.seq_len / best, "step_s": best, "first_step_s": first, "dtype": a.dtype,
           "threads": torch.get_num_threads(), "torch": torch.__version__, "compile": a.compile,
           "sdpa": HAS_SDPA, "adamw": adamw, "autocast": a.dtype == "bf16", "loss": loss.item()}
    out.update(libraries())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
