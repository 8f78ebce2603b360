#!/usr/bin/env python3
"""Synthetic chat data for the packing benchmark (bench/packing.sh): OpenAI-format
conversations of 1 to 3 exchanges whose lengths spread as fine-tuning chat sets do (most a
few hundred tokens, some short, a few near the row length), from a fixed word list and a
seed, so every run of the benchmark reads the same records.

    python3 bench/make_chat.py --records 600 --seed 1 > chat-synthetic.jsonl
"""
import argparse
import json
import math
import random

WORDS = ("the river answer window system data model token helpful train step reverse king "
         "queen small large memory device host rank layer batch loss value king city light "
         "green blue north south paper stone water fire cloud").split()


def message(rng, mean_words):
    n = max(2, int(rng.lognormvariate(math.log(mean_words), 0.6)))
    return " ".join(rng.choice(WORDS) for _ in range(n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mean-words", type=float, default=30.0, help="the median words of a message")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    for _ in range(a.records):
        turns = [{"role": "system", "content": "you are a helpful model"}] if rng.random() < 0.3 else []
        for _ in range(rng.choice((1, 1, 2, 3))):
            turns.append({"role": "user", "content": message(rng, a.mean_words * 0.6)})
            turns.append({"role": "assistant", "content": message(rng, a.mean_words)})
        print(json.dumps({"messages": turns}))


if __name__ == "__main__":
    main()
