#!/usr/bin/env python3
"""Writes data/sft-tiny.jsonl: 400 prompt/completion records (reverse a word of the GPL
text), a small fine-tuning set for the byte-level models and for the sentencepiece fixture.
Deterministic; CI only reads the committed file.   python3 tests/tools/make_sft_example.py"""
import json
import os
import random
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
words = sorted(set(w.lower() for w in re.findall(r"[A-Za-z]{4,10}", open(os.path.join(ROOT, "data", "default.txt")).read())))
rng = random.Random(7)
rng.shuffle(words)
with open(os.path.join(ROOT, "data", "sft-tiny.jsonl"), "w") as f:
    for w in words[:400]:
        f.write(json.dumps({"prompt": f"reverse: {w}\n", "completion": w[::-1] + "\n"}) + "\n")
