#!/usr/bin/python3
"""Writes tests/fixtures/adam_trajectory.bin: 10 steps of torch.optim.AdamW and of
torch.optim.Adam (L2 weight decay) from the same start, with per-step random gradients,
so tests can check Strata's fused CPU Adam element-wise (not by norms).

Run with Debian's torch:  /usr/bin/python3 tests/tools/make_adam_fixture.py

Layout (little-endian): int32 magic 0x53544144 ('STAD'), int32 version 1, int32 n, int32 steps,
f32 lr, beta1, beta2, eps, weight_decay, f32 param0[n], f32 grads[steps][n],
f32 adamw_params[steps][n], f32 adam_l2_params[steps][n]
"""
import os
import struct

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N, STEPS = 1003, 10
LR, B1, B2, EPS, WD = 1e-2, 0.9, 0.999, 1e-8, 0.05


def trajectory(opt_cls, param0, grads):
    p = param0.clone().requires_grad_(True)
    opt = opt_cls([p], lr=LR, betas=(B1, B2), eps=EPS, weight_decay=WD)
    out = []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        out.append(p.detach().clone())
    return out


def main():
    g = torch.Generator().manual_seed(7)
    param0 = torch.randn(N, generator=g)
    # Gradients spanning magnitudes, including exact zeros, so tiny and large updates are both exercised.
    grads = [torch.randn(N, generator=g) * torch.logspace(-4, 1, N)[torch.randperm(N, generator=g)] for _ in range(STEPS)]
    grads[3][::17] = 0.0
    adamw = trajectory(torch.optim.AdamW, param0, grads)
    adam = trajectory(torch.optim.Adam, param0, grads)
    path = os.path.join(ROOT, "tests", "fixtures", "adam_trajectory.bin")
    with open(path, "wb") as f:
        f.write(struct.pack("<4i", 0x53544144, 1, N, STEPS))
        f.write(struct.pack("<5f", LR, B1, B2, EPS, WD))
        for t in [param0, *grads, *adamw, *adam]:
            f.write(t.float().numpy().tobytes())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
