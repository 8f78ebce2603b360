#!/usr/bin/env bash
# CLI checks run by ctest: cli_test.sh STRATA_BINARY CASE
source "$(dirname "$0")/cli_case.sh" "$@"
case $case_name in
  help)
    "$bin" --help | grep -q "train" || fail "strata --help does not list train"
    "$bin" train --help >"$tmp/h" || fail "strata train --help failed"
    for opt in --model --data --steps --micro-batch --grad-accum --lr --warmup --precision --seed --out --log-every \
               --adam-isa --pin-threads --save-every --keep-checkpoints --resume; do
      grep -q -- "$opt" "$tmp/h" || fail "strata train --help lacks $opt"
    done
    "$bin" bench model --help | grep -q -- "--peer" || fail "strata bench model --help lacks --peer" ;;
  unknown_option) expect_error 2 "bogus" -- train --bogus 1 ;;
  bad_value) expect_error 2 "\-\-steps" -- train --steps 12x ;;
  bad_precision) expect_error 2 "\-\-precision" -- train --precision fp8 ;;
  bad_size) expect_error 2 "\-\-device-mem" -- train --device-mem lots ;;
  stray_argument) expect_error 2 "unexpected argument" -- train extra ;;
  unknown_command) expect_error 2 "unknown command" -- frobnicate ;;
  missing_data) expect_error 1 "nonexistent" -- train --data /nonexistent/data.bin --steps 1 ;;
  zero_steps) expect_error 2 "\-\-steps" -- train --steps 0 ;;
  train_short)
    "$bin" train --steps 12 --log-every 5 --out "$tmp/run" 2>"$tmp/err" || fail "training failed: $(cat "$tmp/err")"
    grep -q "tok/s" "$tmp/err" || fail "no progress line"
    grep -q "ETA" "$tmp/err" || fail "no ETA in the progress line"
    n=$(wc -l <"$tmp/run/metrics.jsonl"); [[ $n -eq 4 ]] || fail "metrics.jsonl has $n lines, expected 4 (steps 1,5,10,12)"
    for k in step loss lr tokens_per_s; do grep -q "\"$k\"" "$tmp/run/metrics.jsonl" || fail "metrics lack $k"; done
    echo "ok: $(tail -1 "$tmp/run/metrics.jsonl")" ;;
  bad_adam_isa) expect_error 2 "\-\-adam-isa" -- train --adam-isa sse9 ;;
  zero_options)
    expect_error 2 "\-\-reduce-bucket-size" -- train --reduce-bucket-size 1.5
    expect_error 2 "\-\-overlap-comm" -- train --overlap-comm maybe
    expect_error 2 "\-\-zero-stage" -- train --zero-stage 5
    expect_error 2 "\-\-loss-scale" -- train --loss-scale -1
    expect_error 1 "max-live-params" -- train --zero-stage 3 --max-live-params 10 --steps 1
    "$bin" train --help >"$tmp/h"
    for opt in --zero-stage --reduce-bucket-size --allgather-bucket-size --overlap-comm --prefetch-depth \
               --param-persistence-threshold --max-live-params --loss-scale --initial-scale-power; do
      grep -q -- "$opt" "$tmp/h" || fail "strata train --help lacks $opt"
    done ;;
  train_offload)
    "$bin" train --steps 4 --zero-stage 3 --offload-optimizer cpu --offload-param cpu --activation-checkpointing \
      --offload-activations cpu --log-every 1 --out "$tmp/run" 2>"$tmp/err" || fail "offloaded training failed: $(cat "$tmp/err")"
    for k in timeline overlap cpu_adam host_bytes d2h h2d; do grep -q "\"$k\"" "$tmp/run/metrics.jsonl" || fail "metrics lack $k"; done
    expect_error 2 "\-\-offload-optimizer" -- train --offload-optimizer gpu
    expect_error 1 "zero-stage" -- train --offload-optimizer cpu --steps 1
    # 16-bit optimizer states from the command line and from a DeepSpeed config.
    "$bin" train --steps 3 --zero-stage 2 --offload-optimizer cpu --precision bf16 --master-dtype bf16 \
      --optimizer-state-dtype bf16 --state-rounding nearest --out "$tmp/run16" 2>"$tmp/err" || fail "16-bit states failed: $(cat "$tmp/err")"
    printf '{"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
             "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}' >"$tmp/ds16.json"
    "$bin" train --config "$tmp/ds16.json" --print-config >"$tmp/cfg" 2>&1 || fail "print-config: $(cat "$tmp/cfg")"
    grep -q "master-dtype.*bf16" "$tmp/cfg" && grep -q "optimizer-state-dtype.*bf16" "$tmp/cfg" || fail "DeepSpeed's keys not mapped: $(cat "$tmp/cfg")"
    "$bin" train --steps 3 --zero-stage 3 --precision bf16 --master-dtype bf16 --optimizer-state-dtype bf16 \
      --out "$tmp/dev16" 2>"$tmp/err" || fail "16-bit states on the device failed: $(cat "$tmp/err")"
    expect_error 1 "with --zero-stage 0" -- train --zero-stage 0 --precision bf16 --master-dtype bf16 --steps 1
    expect_error 1 "with --precision f32" -- train --zero-stage 2 --offload-optimizer cpu --master-dtype bf16 --steps 1
    expect_error 2 "optimizer-state-dtype" -- train --optimizer-state-dtype f16
    echo "ok: $(tail -1 "$tmp/run/metrics.jsonl" | head -c 300)" ;;
  train_nvme)
    mkdir -p "$tmp/nvme"
    "$bin" train --steps 3 --zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path "$tmp/nvme" \
      --nvme-checksum --log-every 1 --out "$tmp/run" 2>"$tmp/err" || fail "NVMe training failed: $(cat "$tmp/err")"
    grep -q '"h2n":[1-9]' "$tmp/run/metrics.jsonl" || fail "no bytes written to NVMe: $(tail -1 "$tmp/run/metrics.jsonl")"
    [[ -z $(ls "$tmp/nvme") ]] || fail "swap files left behind: $(ls "$tmp/nvme")"
    # Every step moves exactly the bytes strata plan states for the row, and the drive
    # at most 1.15x the least it must: 2 micro-batches, and a host budget that keeps 60% of
    # the parameters in RAM between passes (from the plan's host bytes with none and all).
    row() { /usr/bin/python3 -c 'import json,sys; print(next(r for r in json.loads(sys.stdin.read().splitlines()[-1])["plan"]
      if r["stage"] == 3 and r["offload"] == "nvme+param" and not r["checkpointing"])["host_bytes"])'; }
    none=$("$bin" plan --model configs/default.json --precision bf16 --param-persistence-threshold 1000 --grad-accum 2 --host-mem 1 --json | row)
    all=$("$bin" plan --model configs/default.json --precision bf16 --param-persistence-threshold 1000 --grad-accum 2 --json | row)
    budget=$(/usr/bin/python3 -c "print(int($none + 0.6 * ($all - $none)))")
    "$bin" train --steps 3 --zero-stage 3 --offload-optimizer nvme --offload-param nvme --nvme-path "$tmp/nvme" \
      --precision bf16 --param-persistence-threshold 1000 --grad-accum 2 --host-mem "$budget" --log-every 1 --out "$tmp/run2" 2>"$tmp/err" || fail "NVMe training failed: $(cat "$tmp/err")"
    "$bin" plan --model configs/default.json --precision bf16 --param-persistence-threshold 1000 --grad-accum 2 --host-mem "$budget" --json >"$tmp/plan" || fail "plan failed"
    /usr/bin/python3 - "$tmp/plan" "$tmp/run2/metrics.jsonl" <<'PY' || fail "metrics.jsonl's bytes are not the plan's"
import json, sys
plan = json.loads(open(sys.argv[1]).read().splitlines()[-1])["plan"]
row = next(r for r in plan if r["stage"] == 3 and r["offload"] == "nvme+param" and not r["checkpointing"])
want = row["bytes_per_step"]
steps = [json.loads(l) for l in open(sys.argv[2])]
assert len(steps) == 3, steps
for s in steps:
    got = s["timeline"]["bytes"]
    for k in ("d2h", "h2d", "n2h", "h2n"):
        assert got[k] == want[k], (s["step"], k, got[k], want[k])
assert want["n2h"] <= 1.15 * want["min_n2h"] and want["h2n"] <= 1.15 * want["min_h2n"], want
print("bytes per step as planned:", want)
PY
    expect_error 2 "nvme-path" -- train --zero-stage 2 --offload-optimizer nvme --steps 1
    expect_error 1 "not a directory" -- train --zero-stage 2 --offload-optimizer nvme --nvme-path /nonexistent --steps 1
    echo "ok: $(tail -1 "$tmp/run/metrics.jsonl" | head -c 300)" ;;
  pin_limit)
    # The staging pool is page-locked: a too-low `ulimit -l` must say so (root is exempt, so
    # the check runs as nobody).
    if [[ $(id -u) -ne 0 ]] || ! command -v setpriv >/dev/null; then echo "skip: needs root and setpriv"; exit 77; fi
    # nobody may not reach the build (a checkout in /root is 0700): a copy of the binary and
    # the default model and data, all of them readable.
    mkdir -p "$tmp/configs" "$tmp/data"
    cp "$bin" "$tmp/strata" && cp "$src/configs/default.json" "$tmp/configs/" && cp "$src/data/default.txt" "$tmp/data/"
    chmod -R a+rX "$tmp" && chmod 777 "$tmp"
    (cd "$tmp" && setpriv --reuid=65534 --regid=65534 --clear-groups bash -c \
      "ulimit -l 64; ./strata train --zero-stage 1 --offload-optimizer cpu --steps 1 --out '$tmp/run'") 2>"$tmp/err"
    rc=$?
    [[ $rc -ne 0 ]] || fail "page-locking past ulimit -l succeeded?"
    grep -q "ulimit -l" "$tmp/err" || fail "no ulimit hint: $(cat "$tmp/err")"
    echo "ok: $(head -c 300 "$tmp/err")" ;;
  train_fp16)
    "$bin" train --steps 6 --precision f16 --initial-scale-power 30 --log-every 1 --out "$tmp/run" 2>"$tmp/err" ||
      fail "fp16 training failed: $(cat "$tmp/err")"
    grep -q '"skipped":true' "$tmp/run/metrics.jsonl" || fail "2^30 should overflow f16: $(head -2 "$tmp/run/metrics.jsonl")"
    grep -q '"loss_scale":' "$tmp/run/metrics.jsonl" || fail "metrics lack loss_scale"
    echo "ok: $(tail -1 "$tmp/run/metrics.jsonl" | head -c 200)" ;;
  resume_sigkill)
    # Killed with SIGKILL mid-training and mid-checkpoint, then --resume: every loss equals the
    # uninterrupted run's (metrics.jsonl keeps the history up to the checkpoint).
    args=(train --steps 30 --log-every 1 --seed 3 --save-every 5)
    losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl"; }
    "$bin" "${args[@]}" --out "$tmp/ref" 2>/dev/null || fail "reference run failed"
    "$bin" "${args[@]}" --out "$tmp/a" 2>/dev/null &
    pid=$!
    for _ in $(seq 1 3000); do [[ -e "$tmp/a/checkpoints/step-00000010/manifest.json" ]] && break; sleep 0.01; done
    kill -9 $pid 2>/dev/null; wait $pid; rc=$?
    [[ $rc -eq 137 ]] || fail "the run was not killed mid-training (exit $rc)"
    "$bin" "${args[@]}" --resume --out "$tmp/a" 2>"$tmp/err" || fail "resume failed: $(cat "$tmp/err")"
    grep -q "resumed from .*step-000000[1-2][05]" "$tmp/err" || fail "did not resume from a checkpoint: $(cat "$tmp/err")"
    diff <(losses "$tmp/ref") <(losses "$tmp/a") >"$tmp/diff" || fail "losses differ after SIGKILL + resume: $(head "$tmp/diff")"
    STRATA_TEST_KILL_DURING_SAVE=10 "$bin" "${args[@]}" --out "$tmp/b" 2>/dev/null; rc=$?
    [[ $rc -eq 137 ]] || fail "the run was not killed mid-checkpoint (exit $rc)"
    half=$(ls -d "$tmp"/b/checkpoints/.step-00000010.*.tmp 2>/dev/null)
    [[ -n $half && ! -e "$tmp/b/checkpoints/step-00000010" ]] ||
      fail "expected a half-written step 10 and no complete one: $(ls -a "$tmp/b/checkpoints")"
    "$bin" "${args[@]}" --resume --out "$tmp/b" 2>"$tmp/err" || fail "resume failed: $(cat "$tmp/err")"
    grep -q "resumed from .*step-00000005" "$tmp/err" || fail "did not resume from step 5: $(cat "$tmp/err")"
    diff <(losses "$tmp/ref") <(losses "$tmp/b") >"$tmp/diff" || fail "losses differ after a killed save: $(head "$tmp/diff")"
    [[ ! -e $half ]] || fail "the half-written checkpoint of the killed run was not cleaned up"
    echo "ok: $(losses "$tmp/b" | wc -l) losses identical after both kills" ;;
  export_import)
    "$bin" train --steps 40 --save-every 40 --out "$tmp/run" 2>/dev/null || fail "training failed"
    "$bin" export "$tmp/run" --out "$tmp/hf" --dtype bf16 2>"$tmp/err" || fail "export failed: $(cat "$tmp/err")"
    [[ -s "$tmp/hf/model.safetensors" && -s "$tmp/hf/config.json" ]] || fail "export wrote $(ls "$tmp/hf")"
    grep -q '"model_type": "gpt2"' "$tmp/hf/config.json" || fail "config.json: $(cat "$tmp/hf/config.json")"
    "$bin" export "$tmp/run/checkpoints/step-00000040" --out "$tmp/one.safetensors" 2>/dev/null || fail "export to a file failed"
    [[ -s "$tmp/one.safetensors" ]] || fail "no file"
    # Fine-tuning from the exported directory starts from the trained weights.
    "$bin" train --model "$tmp/hf" --steps 1 --log-every 1 --out "$tmp/ft" 2>"$tmp/err" || fail "import failed: $(cat "$tmp/err")"
    first=$(grep -o '"loss":[0-9.]*' "$tmp/ft/metrics.jsonl" | head -1 | cut -d: -f2)
    awk -v l="$first" 'BEGIN { exit !(l < 5.0) }' || fail "imported model's loss $first is not below a fresh model's 5.53"
        expect_error 1 "neither a checkpoint" -- export "$tmp" --out "$tmp/x"
    expect_error 2 "\-\-out" -- export "$tmp/run"
    # Shards of at most --max-shard-size with save_pretrained's index; the import reads them
    # as the one file.
    "$bin" export "$tmp/run" --out "$tmp/shards" --dtype bf16 --max-shard-size 100KB 2>"$tmp/err" || fail "sharded export: $(cat "$tmp/err")"
    [[ -s "$tmp/shards/model.safetensors.index.json" && ! -e "$tmp/shards/model.safetensors" ]] ||
      fail "sharded export wrote $(ls "$tmp/shards")"
    n=$(ls "$tmp/shards" | grep -c '^model-.*-of-.*\.safetensors$')
    ((n > 1)) || fail "sharded export wrote $n shards"
    python3 - "$tmp/shards" <<'PY' || fail "a shard passes --max-shard-size with more than one tensor"
import collections, json, os, sys
d = sys.argv[1]
per_shard = collections.Counter(json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"].values())
big = [f for f, n in per_shard.items() if os.path.getsize(os.path.join(d, f)) > 100000 + 4096 and n > 1]
sys.exit(f"{big}" if big else 0)
PY
    "$bin" train --model "$tmp/shards" --steps 1 --log-every 1 --out "$tmp/fts" 2>"$tmp/err" || fail "import of the shards: $(cat "$tmp/err")"
    [[ $(grep -o '"loss":[0-9.]*' "$tmp/fts/metrics.jsonl" | head -1) == "\"loss\":$first" ]] ||
      fail "the shards' first loss differs from the one file's $first: $(head -1 "$tmp/fts/metrics.jsonl")"
    expect_error 2 "max-shard-size" -- export "$tmp/run" --out "$tmp/x" --max-shard-size 5XB
    # OUT/checkpoints names the newest checkpoint too.
    "$bin" export "$tmp/run/checkpoints" --out "$tmp/hf2" 2>"$tmp/err" || fail "export OUT/checkpoints: $(cat "$tmp/err")"
    [[ -s "$tmp/hf2/model.safetensors" ]] || fail "export OUT/checkpoints wrote $(ls "$tmp/hf2")"
    # A model directory brings its tokenizer files, generation_config.json and special token
    # ids into the export of a run that started from it.
    python3 - "$tmp/hf/config.json" <<'PY' || fail "could not add token ids"
import json, sys
c = json.load(open(sys.argv[1])); c.update(bos_token_id=1, eos_token_id=2); json.dump(c, open(sys.argv[1], "w"))
PY
    echo '{"version": "1.0"}' >"$tmp/hf/tokenizer.json"
    echo '{"bos_token_id": 1, "eos_token_id": 2}' >"$tmp/hf/generation_config.json"
    "$bin" train --model "$tmp/hf" --steps 2 --save-every 2 --out "$tmp/ft2" 2>"$tmp/err" || fail "fine-tune: $(cat "$tmp/err")"
    "$bin" export "$tmp/ft2" --out "$tmp/hf3" 2>"$tmp/err" || fail "export after fine-tuning: $(cat "$tmp/err")"
    for f in tokenizer.json generation_config.json; do [[ -s "$tmp/hf3/$f" ]] || fail "export lacks $f: $(ls "$tmp/hf3")"; done
    grep -q '"bos_token_id": 1' "$tmp/hf3/config.json" && grep -q '"eos_token_id": 2' "$tmp/hf3/config.json" ||
      fail "token ids not kept: $(cat "$tmp/hf3/config.json")"
    grep -q '"torch_dtype": "float32"' "$tmp/hf3/config.json" || fail "torch_dtype: $(cat "$tmp/hf3/config.json")"
    # A model directory without weights trains only with --init random; PyTorch weights get
    # the conversion command.
    mkdir -p "$tmp/noweights" && cp "$tmp/hf/config.json" "$tmp/noweights/"
    expect_error 1 "has config.json but no weights" -- train --model "$tmp/noweights" --steps 1 --out "$tmp/nw"
    "$bin" train --model "$tmp/noweights" --init random --steps 1 --out "$tmp/nw2" 2>"$tmp/err" ||
      fail "--init random: $(cat "$tmp/err")"
    touch "$tmp/noweights/pytorch_model.bin"
    expect_error 1 "save_pretrained" -- train --model "$tmp/noweights" --steps 1 --out "$tmp/nw3"
    echo "ok: imported loss $first" ;;
  llama_finetune)
    # A Llama trained, exported in Hugging Face's names, and fine-tuned from the export on
    # 2 ranks at stage 3 with the optimizer in host RAM.
    "$bin" train --model "$src/configs/llama-bytes.json" --steps 60 --save-every 60 --out "$tmp/run" 2>"$tmp/err" ||
      fail "training failed: $(cat "$tmp/err")"
    "$bin" export "$tmp/run" --out "$tmp/hf" --dtype f16 2>"$tmp/err" || fail "export failed: $(cat "$tmp/err")"
    grep -q '"model_type": "llama"' "$tmp/hf/config.json" || fail "config.json: $(cat "$tmp/hf/config.json")"
    grep -q '"num_key_value_heads": 2' "$tmp/hf/config.json" || fail "config.json: $(cat "$tmp/hf/config.json")"
    mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" train --model "$tmp/hf" --zero-stage 3 \
      --offload-optimizer cpu --steps 2 --log-every 1 --out "$tmp/ft" 2>"$tmp/err" || fail "import failed: $(cat "$tmp/err")"
    first=$(grep -o '"loss":[0-9.]*' "$tmp/ft/metrics.jsonl" | head -1 | cut -d: -f2)
    awk -v l="$first" 'BEGIN { exit !(l < 3.5) }' || fail "imported Llama's loss $first is not that of a trained one"
    # JSONL with the directory's own tokenizer.model, found without --tokenizer.
    cp "$src/tests/fixtures/spm-tiny/tokenizer.model" "$tmp/hf/"
    "$bin" train --model "$tmp/hf" --data "$src/data/sft-tiny.jsonl" --seq-len 32 --steps 2 --out "$tmp/sft" \
      2>"$tmp/err" || fail "JSONL fine-tuning failed: $(cat "$tmp/err")"
    grep -q "by sentencepiece '$tmp/hf/tokenizer.model'" "$tmp/err" || fail "tokenizer not found: $(cat "$tmp/err")"
    echo "ok: imported Llama loss $first" ;;
  finetune_jsonl)
    # Prompt/completion records with the sentencepiece tokenizer: the loss falls.
    "$bin" train --model "$src/configs/llama-bytes.json" --data "$src/data/sft-tiny.jsonl" \
      --tokenizer "$src/tests/fixtures/spm-tiny/tokenizer.model" --seq-len 32 --steps 40 --log-every 1 \
      --out "$tmp/ft" 2>"$tmp/err" || fail "fine-tuning failed: $(cat "$tmp/err")"
    grep -q "400 records" "$tmp/err" || fail "no data line: $(cat "$tmp/err")"
    first=$(grep -o '"loss":[0-9.]*' "$tmp/ft/metrics.jsonl" | head -1 | cut -d: -f2)
    last=$(grep -o '"loss":[0-9.]*' "$tmp/ft/metrics.jsonl" | tail -1 | cut -d: -f2)
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || fail "loss $first -> $last did not fall"
    printf '{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": \n' >"$tmp/bad.jsonl"
    expect_error 1 "bad.jsonl', line 2: invalid JSON" -- train --data "$tmp/bad.jsonl" --tokenizer bytes --steps 1
    expect_error 1 "text records need a tokenizer" -- train --data "$tmp/bad.jsonl" --steps 1
    expect_error 1 "\-\-tokenizer is for JSONL data" -- train --tokenizer bytes --steps 1
    echo "ok: loss $first -> $last" ;;
    finetune_hf)
    # docs/fine-tuning.md, end to end: a model directory with weights,
    # tokenizer and chat template; chat JSONL; prepare, train, export; the export loads.
    py="$src/.venv/bin/python"
    "$py" -c "import transformers, jinja2" 2>/dev/null ||
      { echo "skipped: no $py with transformers and jinja2 (tools/setup.sh installs them from PyPI)"; exit 77; }
    "$bin" train --model "$src/configs/llama-tiny-bytes.json" --seq-len 64 --steps 1 --save-every 1 --out "$tmp/pre" 2>/dev/null ||
      fail "making the starting model failed"
    "$bin" export "$tmp/pre" --out "$tmp/model" 2>/dev/null || fail "exporting the starting model failed"
    cp "$src"/tests/fixtures/hf-chat-tiny/*.json "$tmp/model/"  # "downloaded": weights, tokenizer, template
    "$py" "$src/tools/prepare_data.py" --model "$tmp/model" --input "$src/data/chat-tiny.jsonl" \
      --output "$tmp/chat.ids.jsonl" >/dev/null 2>"$tmp/err" || fail "prepare: $(cat "$tmp/err")"
    "$bin" train --model "$tmp/model" --data "$tmp/chat.ids.jsonl" --steps 40 --lr 5e-3 --seq-len 64 \
      --save-every 40 --out "$tmp/ft" 2>"$tmp/err" || fail "train: $(cat "$tmp/err")"
    "$bin" export "$tmp/ft" --out "$tmp/ft/hf" --dtype bf16 2>"$tmp/err" || fail "export: $(cat "$tmp/err")"
    "$py" - "$tmp/ft/hf" <<'PY' >"$tmp/out" 2>"$tmp/err" || fail "the export does not load: $(tail -5 "$tmp/err")"
import json, sys
from safetensors import safe_open
from transformers import AutoConfig, AutoTokenizer
d = sys.argv[1]
c = AutoConfig.from_pretrained(d)
tok = AutoTokenizer.from_pretrained(d)
tok.apply_chat_template([{"role": "user", "content": "reverse the king"}], add_generation_prompt=True)
assert c.model_type == "llama", c.model_type
assert json.load(open(d + "/config.json"))["torch_dtype"] == "bfloat16"
h, L, kv = c.hidden_size, c.num_hidden_layers, c.num_key_value_heads * (c.hidden_size // c.num_attention_heads)
want = {"model.embed_tokens.weight": [c.vocab_size, h], "model.norm.weight": [h], "lm_head.weight": [c.vocab_size, h]}
for i in range(L):
    p = f"model.layers.{i}."
    want.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                 p + "self_attn.q_proj.weight": [h, h], p + "self_attn.k_proj.weight": [kv, h],
                 p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, h],
                 p + "mlp.gate_proj.weight": [c.intermediate_size, h], p + "mlp.up_proj.weight": [c.intermediate_size, h],
                 p + "mlp.down_proj.weight": [h, c.intermediate_size]})
with safe_open(d + "/model.safetensors", "np") as f:
    got = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
assert got == want, (sorted(set(got) ^ set(want)), [k for k in want if got.get(k) != want[k]])
try:
    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(d)
    m(torch.tensor([tok("reverse the king")["input_ids"]]))
    print("from_pretrained and a forward pass: ok")
except ImportError:
    print("no torch here: config, tokenizer, chat template, tensor names and shapes checked")
PY
    echo "ok: $(tail -1 "$tmp/out")" ;;
  hf_families)
    # The Llama-family variants people fine-tune, as transformers 4 and 5 save them
    # (tests/fixtures/hf-families and hf-families-tf5): 5 training steps against
    # torch.optim.AdamW's losses on the same sequence,
    # then the export, which transformers' from_pretrained loads and runs to the logits its own
    # 5 steps reached, with each Python at hand that has torch and transformers ≥ 4.51
    # ($STRATA_TORCH_PYTHON, colon-separated, e.g. a transformers 4 and a transformers 5 venv
    # from tests/tools/make_fixture_venv.sh).
    tpys=()
    IFS=: read -ra candidates <<<"${STRATA_TORCH_PYTHON:-$src/.venv/bin/python}"
    for p in "${candidates[@]}"; do
      "$p" -c "import torch, transformers.models.qwen3" 2>/dev/null && tpys+=("$p")
    done
    for fam in {hf-families,hf-families-tf5}/{gpt2,llama2,llama31-scaled,llama32-tied,llama2-linear,mistral,qwen2,qwen3,mistral-window,qwen2-window,olmo2,phi3,gemma2,gemma3-text,gemma3}; do
      fx="$src/tests/fixtures/$fam"
      "$bin" train --model "$fx" --data "$fx/train.jsonl" --steps 5 --micro-batch 1 --seq-len 16 --lr 1e-3 \
        --warmup 0 --lr-decay constant --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 0 \
        --log-every 1 --save-every 5 --out "$tmp/$fam" >/dev/null 2>"$tmp/err" || fail "$fam: train: $(cat "$tmp/err")"
      /usr/bin/python3 - "$fx/train.json" "$tmp/$fam/metrics.jsonl" <<'PY' || fail "$fam: losses differ from transformers'"
import json, sys
want = json.load(open(sys.argv[1]))["losses"]
got = [json.loads(l)["loss"] for l in open(sys.argv[2])]
worst = max(abs(g - w) / w for g, w in zip(got, want))
print(" ".join(f"{g:.6f}/{w:.6f}" for g, w in zip(got, want)), f"worst rel {worst:.1e}")
sys.exit(0 if len(got) == len(want) and worst < 1e-4 else 1)
PY
      "$bin" export "$tmp/$fam" --out "$tmp/$fam/hf" --dtype f32 >/dev/null 2>"$tmp/err" || fail "$fam: export: $(cat "$tmp/err")"
      /usr/bin/python3 - "$fx/config.json" "$tmp/$fam/hf/config.json" <<'PY' || fail "$fam: the export's config.json differs"
import json, sys
src, out = (json.load(open(p)) for p in sys.argv[1:])
if "text_config" in src:  # Gemma3ForConditionalGeneration: the export is its language model
    src = {**src["text_config"], "model_type": "gemma3_text"}
def rope(c):  # transformers 5's rope_parameters, or 4's rope_theta and rope_scaling, as one object
    if "rope_parameters" in c:
        p = dict(c["rope_parameters"])
        p.pop("partial_rotary_factor", None)  # compared as a key of its own
        return p
    s = dict(c.get("rope_scaling") or {"rope_type": "default"})
    s["rope_type"] = s.pop("type", s.get("rope_type"))
    full = {"rope_theta": c.get("rope_theta", 10000.0), **s}
    if "rope_local_base_freq" in c:  # Gemma-3's two, as transformers 5 keys them
        return {"full_attention": full, "sliding_attention": {"rope_theta": c["rope_local_base_freq"], "rope_type": "default"}}
    return full
keys = ("model_type", "tie_word_embeddings", "head_dim", "sliding_window", "attention_bias",
        "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "partial_rotary_factor")
bad = [k for k in keys if k in src and src[k] != out.get(k)]
def sliding(c):  # the sliding layers, where some slide (every layer full: none stated, as transformers derives)
    t = c.get("layer_types") or []
    return t if "sliding_attention" in t else None
if src.get("use_sliding_window", True) and sliding(src) != sliding(out):
    bad.append(f"layer_types {sliding(src)} -> {sliding(out)}")
if src.get("model_type") != "gpt2" and rope(src) != rope(out):
    bad.append(f"rope {rope(src)} -> {rope(out)}")
sys.exit(f"{bad}: {[src[k] for k in bad if k in src]} -> {[out.get(k) for k in bad if k in out]}" if bad else 0)
PY
      for tpy in "${tpys[@]}"; do
        "$tpy" - "$tmp/$fam/hf" "$fx/after.bin" <<'PY' || fail "$fam: from_pretrained of the export with $tpy"
import struct, sys
import torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], attn_implementation="eager").double().eval()
raw = open(sys.argv[2], "rb").read()
B, T, V = struct.unpack("<3i", raw[:12])
tokens = torch.frombuffer(bytearray(raw[12:12 + 4 * B * T]), dtype=torch.int32).long().view(B, T)
want = torch.frombuffer(bytearray(raw[12 + 4 * B * T:]), dtype=torch.float32).double().view(B, T, V)
with torch.no_grad():
    got = m(tokens).logits
err = (got - want).abs().max().item()
import transformers
print(f"from_pretrained (transformers {transformers.__version__}): {type(m).__name__}, logits after 5 steps "
      f"within {err:.1e} of transformers' own")
sys.exit(0 if err < 1e-3 else 1)
PY
      done
      ((${#tpys[@]})) ||
        echo "$fam: from_pretrained not run (no Python with torch and transformers ≥ 4.51; set STRATA_TORCH_PYTHON)"
    done
    # The tied head (unit 0 gathered again) and Qwen3's q/k norms under ZeRO stage 3 on 2
    # ranks: the single-rank run's losses, to the reductions' rounding.
    for fam in llama32-tied qwen3; do
      fx="$src/tests/fixtures/hf-families/$fam"
      a=(train --model "$fx" --data "$fx/train.jsonl" --steps 4 --micro-batch 1 --seq-len 16 --lr 1e-3 --warmup 0 --log-every 1)
      "$bin" "${a[@]}" --grad-accum 2 --out "$tmp/$fam-1" >/dev/null 2>&1 || fail "$fam: 1 rank"
      mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${a[@]}" --zero-stage 3 --out "$tmp/$fam-2" >/dev/null 2>"$tmp/err" ||
        fail "$fam: 2 ranks, stage 3: $(tail -3 "$tmp/err")"
      paste -d' ' <(grep -o '"loss":[^,]*' "$tmp/$fam-1/metrics.jsonl" | cut -d: -f2) \
        <(grep -o '"loss":[^,]*' "$tmp/$fam-2/metrics.jsonl" | cut -d: -f2) |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6 * $2) bad = 1 } END { exit bad }' ||
        fail "$fam: stage 3 on 2 ranks differs from 1 rank"
    done
    echo "ok: 15 model variants (sliding windows shorter than the sequence; OLMo-2, Phi-3, Gemma-2 and Gemma-3), as transformers 4 and 5 save them, train as transformers does" ;;
  gpt2_dropout)
    # GPT-2's dropout (embd/attn/resid_pdrop) with masks drawn per global sample: 1 rank with
    # 2 micro-batches and 2 ranks with 1 give the same losses (to the reductions' rounding),
    # a resume from step 3 gives the uninterrupted run's losses exactly, and on 2 ranks as
    # well; with the probabilities at 0 the losses differ (the dropout is really there).
    sed 's/"n_positions": 256/"n_positions": 256, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "resid_pdrop": 0.1/' \
      "$src/configs/default.json" >"$tmp/drop.json"
    grep -q resid_pdrop "$tmp/drop.json" || fail "could not add the dropout keys to $(cat "$tmp/drop.json")"
    args=(train --model "$tmp/drop.json" --steps 6 --seq-len 32 --micro-batch 2 --log-every 1 --seed 5 --save-every 3)
    losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl"; }
    "$bin" "${args[@]}" --grad-accum 2 --out "$tmp/one" 2>"$tmp/err" || fail "1 rank: $(cat "$tmp/err")"
    grep -q "dropout" "$tmp/err" || fail "the start-up line does not mention the dropout: $(head -3 "$tmp/err")"
    mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${args[@]}" --out "$tmp/two" 2>"$tmp/err" ||
      fail "2 ranks: $(tail -5 "$tmp/err")"
    close() { paste -d' ' <(losses "$1" | cut -d: -f2) <(losses "$2" | cut -d: -f2) |
      awk -v tol="$3" '{ d = $1 - $2; if (d < 0) d = -d; if (d > tol * $2) bad = bad " " $1 "/" $2 } END { if (bad) { print bad; exit 1 } }'; }
    close "$tmp/one" "$tmp/two" 1e-5 >"$tmp/diff" || fail "1 and 2 ranks differ with dropout: $(cat "$tmp/diff")"
    cp -r "$tmp/one" "$tmp/resumed" && rm -rf "$tmp/resumed/checkpoints/step-00000006"
    "$bin" "${args[@]}" --grad-accum 2 --resume --out "$tmp/resumed" 2>"$tmp/err" || fail "resume: $(cat "$tmp/err")"
    diff <(losses "$tmp/one") <(losses "$tmp/resumed") >"$tmp/diff" || fail "losses differ after resume: $(head "$tmp/diff")"
    cp -r "$tmp/one" "$tmp/resumed2" && rm -rf "$tmp/resumed2/checkpoints/step-00000006"
    mpirun --allow-run-as-root --oversubscribe -np 2 "$bin" "${args[@]}" --resume --out "$tmp/resumed2" 2>"$tmp/err" ||
      fail "resume on 2 ranks: $(tail -5 "$tmp/err")"
    close "$tmp/one" "$tmp/resumed2" 1e-5 >"$tmp/diff" || fail "resumed on 2 ranks, losses differ: $(cat "$tmp/diff")"
    sed 's/0\.1/0.0/g' "$tmp/drop.json" >"$tmp/nodrop.json"
    "$bin" train --model "$tmp/nodrop.json" "${args[@]:3}" --grad-accum 2 --out "$tmp/none" 2>/dev/null ||
      fail "the run without dropout failed"
    ! close "$tmp/one" "$tmp/none" 1e-4 >/dev/null || fail "the losses with dropout equal those without"
    echo "ok: $(losses "$tmp/one" | tr '\n' ' ')(1 rank = 2 ranks = resumed)" ;;
  monitors)
    # --tensorboard and --csv-dir, and a DeepSpeed config's tensorboard and csv_monitor blocks
    # (output_path/job_name): DeepSpeed's CSV layout, and event files that the tensorboard
    # package's reader reads back with metrics.jsonl's values (.venv's, which tools/setup.sh
    # installs from PyPI, or $STRATA_TENSORBOARD_PYTHON's).
    "$bin" train --steps 5 --log-every 2 --tensorboard "$tmp/tb" --csv-dir "$tmp/csv" --out "$tmp/run" >/dev/null 2>"$tmp/err" ||
      fail "train with monitors: $(cat "$tmp/err")"
    [[ "$(head -1 "$tmp/csv/Train_Samples_train_loss.csv")" == "step,train_loss" ]] || fail "CSV header: $(head -1 "$tmp/csv/Train_Samples_train_loss.csv")"
    /usr/bin/python3 - "$tmp/run/metrics.jsonl" "$tmp/csv" <<'PY' || fail "the CSV monitor's values differ from metrics.jsonl"
import csv, json, sys
metrics = [json.loads(l) for l in open(sys.argv[1])]
for tag, key in (("train_loss", "loss"), ("lr", "lr"), ("grad_norm", "grad_norm")):
    rows = list(csv.reader(open(f"{sys.argv[2]}/Train_Samples_{tag}.csv")))[1:]
    assert [int(r[0]) for r in rows] == [m["step"] * 8 for m in metrics], (tag, rows)  # samples: 8 per step
    assert [float(r[1]) for r in rows] == [m[key] for m in metrics], (tag, rows)
PY
    printf '{"train_micro_batch_size_per_gpu": 8, "tensorboard": {"enabled": true, "output_path": "%s/ds", "job_name": "job"}, "csv_monitor": {"enabled": true, "output_path": "%s/ds_csv/", "job_name": "job"}, "wandb": {"enabled": false}}' "$tmp" "$tmp" >"$tmp/ds.json"
    "$bin" train --config "$tmp/ds.json" --steps 2 --out "$tmp/dsrun" >/dev/null 2>"$tmp/err" || fail "train --config: $(cat "$tmp/err")"
    ls "$tmp"/ds/job/events.out.tfevents.* >/dev/null 2>&1 || fail "no event file in output_path/job_name"
    [[ -s "$tmp/ds_csv/job/Train_Samples_lr.csv" ]] || fail "no CSV file in output_path/job_name"
    py=${STRATA_TENSORBOARD_PYTHON:-$src/.venv/bin/python}
    "$py" -c "import tensorboard" 2>/dev/null ||
      { echo "skipped: the event files' read-back: no $py with the tensorboard package (tools/setup.sh installs it from PyPI)"; exit 77; }
    "$py" - "$tmp/run/metrics.jsonl" "$tmp"/tb/events.out.tfevents.* <<'PY' || fail "the tensorboard reader disagrees with metrics.jsonl"
import json, sys
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
metrics = [json.loads(l) for l in open(sys.argv[1])]
seen = {}
for e in EventFileLoader(sys.argv[2]).Load():  # checks each record's length and data CRC
    for v in e.summary.value:
        value = v.simple_value if v.HasField("simple_value") else v.tensor.float_val[0]
        seen.setdefault(v.tag, []).append((e.step, value))
for tag, key in (("Train/Samples/train_loss", "loss"), ("Train/Samples/lr", "lr"), ("Train/Samples/grad_norm", "grad_norm"),
                 ("Train/Samples/tokens_per_s", "tokens_per_s")):
    got = seen[tag]
    assert [s for s, _ in got] == [m["step"] * 8 for m in metrics], (tag, got)
    assert all(abs(g - m[key]) <= 1e-6 * abs(m[key]) for (_, g), m in zip(got, metrics)), (tag, got)  # f32 values
assert "Train/Samples/bytes_h2d" in seen
print(f"ok: {sum(len(v) for v in seen.values())} scalars under {len(seen)} tags read back")
PY
    ;;
  prepare_data)
    # Chat data (OpenAI messages) through the model's own tokenizer and chat template, the loss
    # on the assistant turns only; then trained on. Raw chat data names the command instead.
    py="$src/.venv/bin/python"
    "$py" -c "import transformers, jinja2" 2>/dev/null ||
      { echo "skipped: no $py with transformers and jinja2 (tools/setup.sh installs them from PyPI)"; exit 77; }
    expect_error 1 "tools/prepare_data.py --model HF_MODEL_DIR --input $src/data/chat-tiny.jsonl" -- \
      train --model "$src/configs/llama-tiny-bytes.json" --data "$src/data/chat-tiny.jsonl" --steps 1 --out "$tmp/raw"
    "$py" "$src/tools/prepare_data.py" --model "$src/tests/fixtures/hf-chat-tiny" --input "$src/data/chat-tiny.jsonl" \
      --output "$tmp/chat.jsonl" >"$tmp/out" 2>"$tmp/err" || fail "prepare_data failed: $(cat "$tmp/err")"
    grep -q "200 records, 5200 tokens (1000 counted by the loss)" "$tmp/out" || fail "prepare_data: $(cat "$tmp/out")"
    # Every counted token belongs to an assistant turn, and every assistant turn is counted
    # through its end-of-turn token; system and user turns never are.
    "$py" - "$src/tests/fixtures/hf-chat-tiny" "$tmp/chat.jsonl" <<'PY' 2>/dev/null || fail "masks are not the assistant turns"
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
start, end_hdr, eot = (tok.convert_tokens_to_ids(t) for t in ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"))
for line in open(sys.argv[2]):
    r = json.loads(line)
    ids, m = r["input_ids"], r["loss_mask"]
    seen = [0] * len(ids)
    for h, x in enumerate(ids):
        if x != start:
            continue
        e3, e = ids.index(end_hdr, h), ids.index(eot, h)
        role = tok.decode(ids[h + 1:e3]).strip()
        assert not any(m[h:e3 + 1]), "a header is counted"
        if role == "assistant":
            assert m[e] == 1 and any(m[e3 + 1:e]), "an assistant turn is not counted"
        else:
            assert not any(m[h:e + 1]), role + " turn counted"
        for i in range(h, e + 1):
            seen[i] = 1
    assert all(s or not c for s, c in zip(seen, m)), "a token outside every turn is counted"
PY
    "$bin" train --model "$src/configs/llama-tiny-bytes.json" --data "$tmp/chat.jsonl" --seq-len 64 --steps 60 \
      --lr 5e-3 --warmup 5 --log-every 20 --out "$tmp/chat" 2>"$tmp/err" || fail "training on prepared chat data: $(cat "$tmp/err")"
    grep -q "200 records" "$tmp/err" || fail "no data line: $(head -3 "$tmp/err")"
    first=$(grep -o '"loss":[0-9.]*' "$tmp/chat/metrics.jsonl" | head -1 | cut -d: -f2)
    last=$(grep -o '"loss":[0-9.]*' "$tmp/chat/metrics.jsonl" | tail -1 | cut -d: -f2)
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' || fail "loss $first -> $last did not fall"
    echo "ok: loss $first -> $last" ;;
  ds_config)
    # A DeepSpeed example config: resolved values and their sources, the command line wins.
    cfg="$src/tests/fixtures/ds_configs/zero2_offload_fp16.json"
    "$bin" train --config "$cfg" --micro-batch 2 --print-config >"$tmp/pc" 2>"$tmp/err" || fail "print-config: $(cat "$tmp/err")"
    grep -qE '^--zero-stage +2 +.*zero_optimization.stage$' "$tmp/pc" || fail "zero-stage: $(grep zero-stage "$tmp/pc")"
    grep -qE '^--micro-batch +2 +command line$' "$tmp/pc" || fail "micro-batch: $(grep micro-batch "$tmp/pc")"
    grep -qE '^--offload-optimizer +cpu ' "$tmp/pc" || fail "offload: $(grep offload-optimizer "$tmp/pc")"
    grep -qE '^--seed +1337 +default$' "$tmp/pc" || fail "seed: $(grep seed "$tmp/pc")"
    "$bin" train --config "$cfg" --model "$src/configs/gpt2-tiny-bytes.json" --seq-len 16 --steps 3 --out "$tmp/run" \
      2>"$tmp/err" || fail "training with the config failed: $(cat "$tmp/err")"
    grep -q '"zero_stage":2' "$tmp/run/metrics.jsonl" || fail "metrics: $(tail -1 "$tmp/run/metrics.jsonl")"
    # Stage 3 with optimizer and parameters on NVMe, bf16, WarmupCosineLR over total_num_steps.
    mkdir -p "$tmp/nvme"
    sed "s|NVME_PATH|$tmp/nvme|g" "$src/tests/fixtures/ds_configs/zero3_nvme_bf16.json" >"$tmp/z3.json"
    "$bin" train --config "$tmp/z3.json" --model "$src/configs/gpt2-tiny-bytes.json" --seq-len 16 --log-every 1 \
      --out "$tmp/run3" 2>"$tmp/err" || fail "stage-3 NVMe config failed: $(cat "$tmp/err")"
    [[ $(grep -c '"step"' "$tmp/run3/metrics.jsonl") -eq 6 ]] || fail "total_num_steps 6: $(wc -l <"$tmp/run3/metrics.jsonl") lines"
    grep -q '"zero_stage":3' "$tmp/run3/metrics.jsonl" || fail "stage 3 not used"
    printf '{"zero_optimisation": {"stage": 2}}' >"$tmp/typo.json"
    expect_error 2 "did you mean 'zero_optimization'" -- train --config "$tmp/typo.json"
    printf '{"optimizer": {"type": "Lamb"}}' >"$tmp/lamb.json"
    expect_error 2 "is not implemented" -- train --config "$tmp/lamb.json"
        OMPI_COMM_WORLD_SIZE=2 "$bin" train --config "$cfg" --print-config >/dev/null 2>"$tmp/err" && fail "world 2 accepted 16 = 4 x 4 x 2"
    grep -q "4 × 4 × 2" "$tmp/err" || fail "batch triple: $(cat "$tmp/err")"
    # The HF Trainer's shape: "auto" filled from the command line and the model, notes printed;
    # WarmupLR without warmup_type warms up logarithmically (DeepSpeed's default), step for step.
    hf="$src/tests/fixtures/ds_configs/hf_zero3_auto.json"
    "$bin" train --config "$hf" --model "$src/configs/gpt2-tiny-bytes.json" --lr 1e-3 --warmup 4 --print-config \
      >"$tmp/pc" 2>"$tmp/err" || fail "print-config (auto): $(cat "$tmp/err")"
    grep -qE '^--lr +1e-3 +command line$' "$tmp/pc" || fail "lr: $(grep -- '^--lr ' "$tmp/pc")"
    grep -qE '^--warmup-type +log +deepspeed default' "$tmp/pc" || fail "warmup-type: $(grep warmup-type "$tmp/pc")"
    grep -qE '^--reduce-bucket-size +[0-9]+ .*"auto" → hidden²' "$tmp/pc" || fail "auto bucket: $(grep reduce-bucket "$tmp/pc")"
    grep -q '^# .*optimizer.params.lr = "auto" → --lr' "$tmp/pc" || fail "no auto note: $(grep '^#' "$tmp/pc")"
    grep -q '^# .*_comment: a comment' "$tmp/pc" || fail "no comment note"
    "$bin" train --config "$hf" --model "$src/configs/gpt2-tiny-bytes.json" --seq-len 16 --steps 5 --lr 1e-3 \
      --warmup 4 --log-every 1 --out "$tmp/run4" 2>"$tmp/err" || fail "training with the HF config failed: $(cat "$tmp/err")"
    lrs=$(grep -oE '"lr":[^,]*' "$tmp/run4/metrics.jsonl" | cut -d: -f2 | paste -sd' ')
    awk -v l="$lrs" 'BEGIN {split(l, a, " "); e[1] = 0; e[2] = 0; e[3] = 1e-3 * log(2) / log(4); e[4] = 1e-3 * log(3) / log(4); e[5] = 1e-3
      for (i = 1; i <= 5; i++) { d = a[i] - e[i]; if (d < 0) d = -d; if (d > 1e-9) exit 1 } }' ||
      fail "log warmup lr per step: $lrs"
    grep -q '"zero_stage":3' "$tmp/run4/metrics.jsonl" || fail "stage 3 not used"
        # A value out of range names the config key as well as the option.
    printf '{"zero_optimization": {"stage": 5}}' >"$tmp/rb.json"
    expect_error 2 "zero_optimization.stage\]" -- train --config "$tmp/rb.json" --steps 1 --out "$tmp/rb"
    # bias_correction false (DeepSpeed's BERT examples): the update is lr·m/(√v+ε) without 1-β^t.
    printf '{"optimizer": {"type": "Adam", "params": {"lr": 1e-3, "bias_correction": false}}}' >"$tmp/bc.json"
    "$bin" train --config "$tmp/bc.json" --print-config 2>/dev/null | grep -qE '^--adam-bias-correction +false ' ||
      fail "bias_correction not mapped"
    "$bin" train --config "$tmp/bc.json" --model "$src/configs/gpt2-tiny-bytes.json" --seq-len 16 --steps 2 \
      --log-every 1 --out "$tmp/bc" 2>/dev/null || fail "training without bias correction failed"
    "$bin" train --config "$tmp/bc.json" --adam-bias-correction true --model "$src/configs/gpt2-tiny-bytes.json" \
      --seq-len 16 --steps 2 --log-every 1 --out "$tmp/bc2" 2>/dev/null || fail "training with bias correction failed"
    [[ $(tail -1 "$tmp/bc/metrics.jsonl" | grep -o '"loss":[^,]*') != $(tail -1 "$tmp/bc2/metrics.jsonl" | grep -o '"loss":[^,]*') ]] ||
      fail "bias_correction false changed nothing"
    echo "ok" ;;
  plan)
    "$bin" plan --params 7.5e9 --ranks 64 >"$tmp/out" 2>"$tmp/err" || fail "plan failed: $(cat "$tmp/err")"
    grep -q "stage 0 120.0 GB, stage 1 31.4 GB, stage 2 16.6 GB, stage 3 1.9 GB" "$tmp/out" || fail "paper figures: $(cat "$tmp/out")"
    "$bin" plan --model "$src/configs/gpt2-small.json" --ranks 2 --threads 2 --device-mem 2.3GB >"$tmp/out" 2>"$tmp/err" ||
      fail "plan --model failed: $(cat "$tmp/err")"
    grep -q "^recommended: --zero-stage" "$tmp/out" || fail "no recommendation: $(tail -3 "$tmp/out")"
    "$bin" plan --model "$src/configs/gpt2-small.json" --device-mem 1MiB >"$tmp/out"; [[ $? -eq 1 ]] || fail "1 MiB fits?"
    grep -q "nothing fits" "$tmp/out" || fail "$(tail -2 "$tmp/out")"
    printf '{"bench":"nvme","rows":[{"read_bps":3e9,"write_bps":1e9}]}\n' >"$tmp/bench.jsonl"
    "$bin" plan --model "$src/configs/gpt2-small.json" --bench "$tmp/bench.jsonl" >"$tmp/out" || fail "plan --bench failed"
    grep -q "measured: NVMe 1 GB/s (strata bench nvme" "$tmp/out" || fail "bench not used: $(head -4 "$tmp/out")"
    expect_error 2 "one of --model" -- plan
    # Across nodes: the hpZ trade-off, K = 1 (none), 2, 4, 8 for 8 ranks per node; hpZ's
    # cross-node bytes are below none's, its device bytes above.
    "$bin" plan --model gpt-20b --ranks 32 --ranks-per-node 8 >"$tmp/hpz" || fail "plan --ranks-per-node failed"
    awk '/^stage 3 across 4 nodes of 8 ranks/ {t=1; next} t && /^[1248] / {print $1, $3, $4}' "$tmp/hpz" >"$tmp/k"
    [[ $(cut -d' ' -f1 "$tmp/k" | tr '\n' ' ') == "1 2 4 8 " ]] || fail "hpZ rows: $(cat "$tmp/hpz" | tail -8)"
    awk 'NR == 1 {d = $2; x = $3; next} !($2 > d && $3 < x) {exit 1}' "$tmp/k" || fail "no trade-off: $(cat "$tmp/k")"
    expect_error 2 "must divide --ranks" -- plan --model gpt-20b --ranks 32 --ranks-per-node 5
    # 16-bit states, K = 6 with a bf16 master, m and v: at stage 3, 8 B per parameter on the
    # device (the master is the compute shard), 10 B offloaded.
    "$bin" plan --params 7.5e9 --ranks 64 --precision bf16 --master-dtype bf16 --optimizer-state-dtype bf16 >"$tmp/out" ||
      fail "plan with 16-bit states failed"
    grep -q "master bf16, m and v bf16 (K = 6)" "$tmp/out" || fail "16-bit states not stated: $(head -2 "$tmp/out")"
    grep -q "stage 3 1.9 GB (0.9 GB with these states on the device, 1.2 GB offloaded)" "$tmp/out" ||
      fail "16-bit states' bytes: $(head -3 "$tmp/out")"
    awk '$1 == 3 && $2 == "none" && $8 == "0.938" {ok = 1} END {exit !ok}' "$tmp/out" ||
      fail "stage 3's device row with a bf16 master: $(grep '^3 ' "$tmp/out")"
    expect_error 2 "needs --precision bf16" -- plan --params 1e9 --precision f32 --master-dtype bf16
    echo "ok: $(grep recommended "$tmp/out")" ;;
  *) fail "unknown case $case_name" ;;
esac
