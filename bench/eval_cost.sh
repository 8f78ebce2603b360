#!/usr/bin/env bash
# What validation costs: one run with --eval-every and --eval-batches, the seconds spent
# evaluating against the seconds spent training (--summary's eval_s and step time, and
# metrics.jsonl's eval_s of every evaluation). The bound is a forward pass per batch evaluated,
# a third of a training step's FLOPs: eval_batches / (3 · eval_every) of the training time.
# Prints one JSON line with the fraction, the bound and their ratio.
#
#   bench/eval_cost.sh [STRATA_BINARY]   (env: MODEL, STEPS, EVAL_EVERY, EVAL_BATCHES, SEQ_LEN,
#                                          MICRO_BATCH, PRECISION, EXTRA: more train options)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$src/build/strata}
model=${MODEL:-$src/configs/gpt2-small-bytes.json}
steps=${STEPS:-50} every=${EVAL_EVERY:-50} batches=${EVAL_BATCHES:-8}
seq=${SEQ_LEN:-256} micro=${MICRO_BATCH:-4} precision=${PRECISION:-bf16}
extra=${EXTRA:---zero-stage 1 --offload-optimizer cpu}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
"$bin" train --model "$model" --data "$src/data/default.txt" --eval-fraction 0.1 --eval-every "$every" \
  --eval-batches "$batches" --steps "$steps" --seq-len "$seq" --micro-batch "$micro" --precision "$precision" \
  --log-every 1 $extra --summary "$tmp/summary.json" --out "$tmp/run" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
python3 - "$tmp/summary.json" "$tmp/run/metrics.jsonl" "$every" "$batches" "$extra" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2])]
every, batches = int(sys.argv[3]), int(sys.argv[4])
train_s = sum(l["step_ms"] for l in lines) / 1e3
eval_s = sum(l.get("eval_s", 0) for l in lines)
evals = sum("eval_s" in l for l in lines)
fraction = eval_s / train_s
bound = batches / (3 * every)
print(json.dumps({"model": s["model"].rsplit("/", 1)[-1], "precision": s["precision"], "options": sys.argv[5],
                  "steps": len(lines), "evaluations": evals, "eval_batches": batches, "eval_every": every,
                  "train_s": round(train_s, 2), "eval_s": round(eval_s, 2), "eval_fraction_of_training": round(fraction, 4),
                  "bound_fraction": round(bound, 4), "ratio_vs_bound": round(fraction / bound, 2),
                  "eval_loss": s.get("eval_loss")}))
PY
