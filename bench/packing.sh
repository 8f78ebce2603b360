#!/usr/bin/env bash
# Packed rows against one record per row, on chat data prepared as users prepare it
# (tools/prepare_data.py with a chat template): data/chat-tiny.jsonl and a longer synthetic
# chat set (bench/make_chat.py: median about 320 tokens). For each, two runs of the same model
# and batch, --pack false then --pack true, measured in the same sitting; prints one JSON line
# per set: the share of each row that is padding, the tokens/s the loss counts
# (useful_tokens_per_s, --summary's mean over the timed steps) and their ratio, packed over
# padded.
#
#   bench/packing.sh [STRATA_BINARY]      (env: MODEL, SEQ_LEN, MICRO_BATCH, STEPS, PRECISION)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$src/build/strata}
model=${MODEL:-$src/configs/llama-small-bytes.json}
seq=${SEQ_LEN:-1024} micro=${MICRO_BATCH:-2} steps=${STEPS:-6} precision=${PRECISION:-bf16}
py=$src/.venv/bin/python
"$py" -c "import transformers, jinja2" 2>/dev/null || { echo "bench/packing.sh: needs $py with transformers (tools/setup.sh)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/tok" && cp "$src"/tests/fixtures/hf-chat-tiny/*.json "$tmp/tok/"  # a BPE tokenizer and chat template
python3 "$src/bench/make_chat.py" --records 600 --seed 1 >"$tmp/synthetic.jsonl"
for set in chat-tiny synthetic; do
  in=$([[ $set == chat-tiny ]] && echo "$src/data/chat-tiny.jsonl" || echo "$tmp/synthetic.jsonl")
  "$py" "$src/tools/prepare_data.py" --model "$tmp/tok" --input "$in" --output "$tmp/$set.ids.jsonl" 2>/dev/null
  for pack in false true; do
    "$bin" train --model "$model" --data "$tmp/$set.ids.jsonl" --seq-len "$seq" --micro-batch "$micro" \
      --steps "$steps" --precision "$precision" --pack "$pack" --log-every 1 --summary "$tmp/$set.$pack.json" \
      --out "$tmp/run.$set.$pack" 2>"$tmp/$set.$pack.err"
  done
  python3 - "$set" "$seq" "$tmp/$set" <<'PY'
import json, re, sys
name, seq, base = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {"data": name, "seq_len": seq}
for pack in ("false", "true"):
    s = json.load(open(f"{base}.{pack}.json"))
    line = open(f"{base}.{pack}.err").read()
    pad = float(re.search(r"\(([0-9.]+)% padding\)", line).group(1)) / 100
    key = "packed" if pack == "true" else "padded"
    out[f"padding_fraction_{key}"] = round(pad, 4)
    out[f"useful_tokens_per_s_{key}"] = round(s["useful_tokens_per_s"], 1)
    out[f"tokens_per_s_{key}"] = round(s["tokens_per_s"], 1)
out["model"] = s["model"].rsplit("/", 1)[-1]
out["precision"] = s["precision"]
out["micro_batch"] = s["micro_batch"]
out["timed_steps"] = s["timed_steps"]
out["useful_ratio_packed_vs_padded"] = round(out["useful_tokens_per_s_packed"] / out["useful_tokens_per_s_padded"], 2)
print(json.dumps(out))
PY
done
