#!/usr/bin/env python3
"""Writes tests/fixtures/peft/<name>/: low-rank adapters made and trained by PEFT over the
tiny models of tests/fixtures/hf-families-tf5/<name>, every family's (gemma3, the multimodal
checkpoint, aside: its text model is gemma3-text's), so Strata's LoRA parity is with peft +
torch themselves.

  adapter_init/   PEFT's adapter directory before training: LoRA of rank 4, alpha 8, no
                  dropout, on all-linear, A and B both random (init_lora_weights=False), so
                  the adapters matter from the first step
  adapter_after/  the same after 5 steps of torch.optim.AdamW over the trainable parameters
                  (every lora_A and lora_B) on the base fixture's training sequence, the loss
                  the mean over its 16 targets
  train.json      the optimizer settings and those 5 losses

Run it with a Python that has torch, transformers 5.x and peft (not CI's business: CI reads
the committed files); tests/tools/make_fixture_venv.sh 5 DIR makes one, then
  DIR/bin/pip install peft
  DIR/bin/python tests/tools/make_peft_fixtures.py
The committed ones were made with peft 0.22.0, transformers 5.25.0 and torch 2.15.0.
"""
import json
import os

import peft
import torch
import transformers
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
BASES = os.path.join(HERE, "..", "fixtures", "hf-families-tf5")
ROOT = os.path.join(HERE, "..", "fixtures", "peft")
STEPS, LR, BETAS, EPS, WD, T = 5, 2e-3, (0.9, 0.95), 1e-8, 0.1, 16


def save(model, out, name):
    """save_pretrained, with the base named relative to tests/fixtures and without the model card."""
    model.save_pretrained(out)
    os.remove(os.path.join(out, "README.md"))
    path = os.path.join(out, "adapter_config.json")
    with open(path) as f:
        c = json.load(f)
    c["base_model_name_or_path"] = f"hf-families-tf5/{name}"
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def make(name):
    out = os.path.join(ROOT, name)
    os.makedirs(out, exist_ok=True)
    base = AutoModelForCausalLM.from_pretrained(os.path.join(BASES, name), dtype=torch.float32)
    base.config._attn_implementation = "eager"
    torch.manual_seed(4321)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", init_lora_weights=False,
                          task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, cfg)
    save(model, os.path.join(out, "adapter_init"), name)
    with open(os.path.join(BASES, name, "train.jsonl")) as f:
        seq = torch.tensor([json.loads(f.readline())["input_ids"]])
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        logits = model(seq[:, :T]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), seq[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    save(model, os.path.join(out, "adapter_after"), name)
    with open(os.path.join(out, "train.json"), "w") as f:
        json.dump({"base": f"hf-families-tf5/{name}", "steps": STEPS, "seq_len": T, "lr": LR, "beta1": BETAS[0],
                   "beta2": BETAS[1], "eps": EPS, "weight_decay": WD, "losses": losses,
                   "made_with": {"peft": peft.__version__, "transformers": transformers.__version__,
                                 "torch": torch.__version__.split("+")[0]}}, f, indent=1)
    print(f"{name}: {sum(p.numel() for p in trainable)} adapter parameters, losses {['%.5f' % x for x in losses]}")


if __name__ == "__main__":
    import sys
    names = sys.argv[1:] or sorted(n for n in os.listdir(BASES) if n != "gemma3")
    for name in names:
        make(name)
