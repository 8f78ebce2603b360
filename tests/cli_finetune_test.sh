#!/usr/bin/env bash
# Fine-tuning runs as users drive them, run by ctest: cli_finetune_test.sh STRATA_BINARY CASE.
# Validation (--eval-*), packed JSONL rows (--pack) and `strata plot`.
source "$(dirname "$0")/cli_case.sh" "$@"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi() { mpirun --oversubscribe -np "$@"; }
sft=(--model "$src/configs/llama-bytes.json" --data "$src/data/sft-tiny.jsonl"
     --tokenizer "$src/tests/fixtures/spm-tiny/tokenizer.model" --seq-len 64)
# "step eval_loss eval_tokens" of each evaluated step of OUT.
evals() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1] + "/metrics.jsonl"):
    j = json.loads(l)
    if "eval_loss" in j: print(j["step"], repr(j["eval_loss"]), j["eval_tokens"])' "$1"; }
# Whether two runs' evaluations agree: the same steps and tokens, losses within a relative 1e-6.
same_evals() { paste -d' ' <(evals "$1") <(evals "$2") | awk '
  { n++; if ($1 != $4 || $3 != $6) exit 1; d = $2 - $5; if (d < 0) d = -d; if (d > 1e-6 * $2) exit 1 }
  END { exit !(n > 0) }'; }

# Whether two runs logged the same steps: losses to 1e-6; the grad norm, whose square sum runs
# in another order on other rank counts, to 1e-5 as cli.pack takes it.
close() { paste -d' ' <(log_lines "$1") <(log_lines "$2") | awk '
  { n++; for (i = 2; i <= 4; i++) { a = $i; b = $(i + 4); tol = $i ~ /grad_norm/ ? 1e-5 : 1e-6;
    sub(/.*:/, "", a); sub(/.*:/, "", b); d = a - b; if (d < 0) d = -d;
    if (d > tol * (a < 0 ? -a : a) + 1e-9) exit 1 } }
  END { exit !(n > 0) }'; }

case $case_name in
  eval)
    # --eval-fraction with --eval-every: metrics.jsonl, the progress and closing lines and
    # --summary; the same evaluations on 1 and 2 ranks and at stage 3 with everything
    # offloaded; DeepSpeed-config runs take the options from the command line.
    run=("${sft[@]}" --steps 6 --eval-fraction 0.1 --eval-every 3 --log-every 2)
    "$bin" train "${run[@]}" --micro-batch 4 --summary "$tmp/sum.json" --out "$tmp/one" 2>"$tmp/err" ||
      fail "train: $(cat "$tmp/err")"
    grep -q "strata: validation: 40 records" "$tmp/err" || fail "no validation line: $(cat "$tmp/err")"
    grep -q "step      3/6 .* | eval loss [0-9.]* (ppl [0-9.]*)" "$tmp/err" || fail "no eval on the progress line: $(cat "$tmp/err")"
    grep -q "strata: done in .*; eval loss [0-9.]* (ppl" "$tmp/err" || fail "no eval on the closing line: $(cat "$tmp/err")"
    [[ "$(evals "$tmp/one" | cut -d' ' -f1 | tr '\n' ' ')" == "3 6 " ]] || fail "evaluated steps: $(evals "$tmp/one")"
    grep -q '"eval_perplexity"' "$tmp/one/metrics.jsonl" || fail "no eval_perplexity in metrics.jsonl"
    # The evaluations (after steps 3 and 6) allocate nothing in the steady state either.
    /usr/bin/python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["eval_tokens"] > 0 and s["eval_loss"] > 0 and s["steady_state_allocations"] == 0, s' \
      "$tmp/sum.json" || fail "--summary: $(cat "$tmp/sum.json")"
    mpi 2 "$bin" train "${run[@]}" --micro-batch 2 --zero-stage 3 --out "$tmp/two" >/dev/null 2>"$tmp/err" ||
      fail "2 ranks: $(tail -3 "$tmp/err")"
    same_evals "$tmp/one" "$tmp/two" || fail "1 rank: $(evals "$tmp/one"); 2 ranks at stage 3: $(evals "$tmp/two")"
    mkdir -p "$tmp/nvme"
    mpi 2 "$bin" train "${run[@]}" --micro-batch 1 --grad-accum 2 --zero-stage 3 --offload-optimizer nvme \
      --offload-param nvme --nvme-path "$tmp/nvme" --activation-checkpointing --offload-activations cpu \
      --out "$tmp/nvme_run" >/dev/null 2>"$tmp/err" || fail "stage 3 on NVMe: $(tail -3 "$tmp/err")"
    same_evals "$tmp/one" "$tmp/nvme_run" || fail "1 rank: $(evals "$tmp/one"); stage 3 on NVMe: $(evals "$tmp/nvme_run")"
    printf '{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}' >"$tmp/ds.json"
    "$bin" train --config "$tmp/ds.json" "${run[@]}" --out "$tmp/ds" >/dev/null 2>"$tmp/err" || fail "--config: $(cat "$tmp/err")"
    same_evals "$tmp/one" "$tmp/ds" || fail "1 rank: $(evals "$tmp/one"); --config: $(evals "$tmp/ds")"
    # Resumed from step 3: the same evaluation at step 6 (the held-out split and rows depend on
    # the file and the seed alone).
    "$bin" train "${run[@]}" --micro-batch 4 --steps 3 --save-every 3 --out "$tmp/res" >/dev/null 2>&1 || fail "first half"
    "$bin" train "${run[@]}" --micro-batch 4 --save-every 3 --resume --out "$tmp/res" >/dev/null 2>"$tmp/err" ||
      fail "resume: $(cat "$tmp/err")"
    same_evals "$tmp/one" "$tmp/res" || fail "uninterrupted: $(evals "$tmp/one"); resumed: $(evals "$tmp/res")"
    expect_error 2 "\-\-eval-data with \-\-eval-fraction" -- train "${sft[@]}" --eval-fraction 0.1 --eval-data x.jsonl --steps 1
    expect_error 2 "without validation data" -- train "${sft[@]}" --eval-every 5 --steps 1
    expect_error 1 "leaves none to train on" -- train "${sft[@]}" --eval-fraction 0.9999 --steps 1
    expect_error 1 "for validation and" -- train --eval-fraction 0.00001 --steps 1
    echo "ok: $(evals "$tmp/one" | tr '\n' ';')" ;;
  pack)
    # Packed rows: the start-up line's rows and padding, useful tokens/s; the same losses on 1
    # and 2 ranks and across a resume; --pack false puts one record per row.
    run=("${sft[@]}" --steps 6 --log-every 1)
    "$bin" train "${run[@]}" --micro-batch 4 --out "$tmp/one" 2>"$tmp/err" || fail "train: $(cat "$tmp/err")"
    grep -q "packed into [0-9]* rows ([0-9.]*% padding)" "$tmp/err" || fail "no packing on the data line: $(cat "$tmp/err")"
    grep -q '"useful_tokens_per_s"' "$tmp/one/metrics.jsonl" || fail "no useful_tokens_per_s"
    mpi 2 "$bin" train "${run[@]}" --micro-batch 2 --zero-stage 2 --out "$tmp/two" >/dev/null 2>"$tmp/err" ||
      fail "2 ranks: $(tail -3 "$tmp/err")"
    paste -d' ' <(log_lines "$tmp/one") <(log_lines "$tmp/two") | awk '
      { for (i = 2; i <= 4; i++) { a = $i; b = $(i + 4); sub(/.*:/, "", a); sub(/.*:/, "", b); d = a - b; if (d < 0) d = -d;
        if (d > 1e-5 * (a < 0 ? -a : a) + 1e-7) exit 1 } }' || fail "1 and 2 ranks differ: $(log_lines "$tmp/two")"
    "$bin" train "${run[@]}" --micro-batch 4 --steps 3 --save-every 3 --out "$tmp/res" >/dev/null 2>&1 || fail "first half"
    "$bin" train "${run[@]}" --micro-batch 4 --save-every 3 --resume --out "$tmp/res" >/dev/null 2>&1 || fail "resume"
    [[ "$(log_lines "$tmp/one")" == "$(log_lines "$tmp/res")" ]] ||
      fail "resumed losses differ: $(log_lines "$tmp/one") vs $(log_lines "$tmp/res")"
    "$bin" train "${run[@]}" --micro-batch 4 --pack false --steps 1 --out "$tmp/unpacked" 2>"$tmp/err" || fail "--pack false"
    grep -q "one per row" "$tmp/err" || fail "--pack false: $(cat "$tmp/err")"
    echo "ok: $(grep -o 'packed into .*' "$tmp/err" || true)" ;;
  eval_transformers)
    # The evaluation loss against transformers'. Stored: the tiny Llama of
    # tests/fixtures/hf-families trained the 5 AdamW steps cli.hf_families trains, then
    # evaluated on its sequence, against the loss of the logits torch reached after the same 5
    # steps (after.bin, float64), packed and not, on 1 and 2 ranks. Live, with each Python at
    # hand that has torch and transformers ($STRATA_TORCH_PYTHON, colon-separated; default
    # .venv's): validation records of mixed lengths and prompt masks, evaluated after 2 steps,
    # against the export's per-record losses in transformers (each record alone).
    fx="$src/tests/fixtures/hf-families/llama2"
    # after.bin's two rows of tokens as validation records (each token's logits depend on the
    # tokens before it only, so the record's 15 targets see what torch's forward saw).
    /usr/bin/python3 - "$fx/after.bin" "$tmp/after.jsonl" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
B, T, V = struct.unpack_from("<3i", raw)
tokens = struct.unpack_from(f"<{B * T}i", raw, 12)
with open(sys.argv[2], "w") as f:
    for b in range(B):
        f.write(json.dumps({"input_ids": list(tokens[b * T:(b + 1) * T]), "loss_mask": [1] * T}) + "\n")
PY
    five=(train --model "$fx" --data "$fx/train.jsonl" --eval-data "$tmp/after.jsonl" --steps 5 --seq-len 16 --lr 1e-3
          --warmup 0 --lr-decay constant --weight-decay 0.1 --beta1 0.9 --beta2 0.95 --eps 1e-8 --grad-clip 0 --log-every 1)
    "$bin" "${five[@]}" --micro-batch 1 --out "$tmp/s1" >/dev/null 2>"$tmp/err" || fail "5 steps: $(cat "$tmp/err")"
    "$bin" "${five[@]}" --micro-batch 1 --pack false --out "$tmp/s1u" >/dev/null 2>"$tmp/err" || fail "--pack false: $(cat "$tmp/err")"
    mpi 2 "$bin" "${five[@]}" --micro-batch 1 --zero-stage 3 --out "$tmp/s2" >/dev/null 2>"$tmp/err" ||
      fail "5 steps on 2 ranks: $(tail -3 "$tmp/err")"
    for run in s1 s1u s2; do
      /usr/bin/python3 - "$fx/after.bin" "$(evals "$tmp/$run" | tail -1)" "$run" <<'PY' ||
import math, struct, sys
raw = open(sys.argv[1], "rb").read()
B, T, V = struct.unpack_from("<3i", raw)
tokens = struct.unpack_from(f"<{B * T}i", raw, 12)
logits = struct.unpack_from(f"<{B * T * V}f", raw, 12 + 4 * B * T)
total = 0.0
for b in range(B):
    for t in range(T - 1):
        row = logits[(b * T + t) * V:(b * T + t + 1) * V]
        m = max(row)
        total += m + math.log(sum(math.exp(x - m) for x in row)) - row[tokens[b * T + t + 1]]
want = total / (B * (T - 1))
step, loss, counted = sys.argv[2].split()
rel = abs(float(loss) - want) / want
print(f"{sys.argv[3]}: step {step} eval_loss {float(loss):.8f}, torch after 5 steps {want:.8f}, rel {rel:.1e}")
sys.exit(0 if step == "5" and int(counted) == B * (T - 1) and rel < 1e-5 else 1)
PY
        fail "$run: the evaluation loss differs from the stored transformers/torch one"
    done
    tpys=()
    IFS=: read -ra candidates <<<"${STRATA_TORCH_PYTHON:-$src/.venv/bin/python}"
    for p in "${candidates[@]}"; do "$p" -c "import torch, transformers" 2>/dev/null && tpys+=("$p"); done
    ((${#tpys[@]})) || { echo "ok (the live comparison needs a Python with torch and transformers: set STRATA_TORCH_PYTHON)"; exit 0; }
    /usr/bin/python3 - "$tmp/val.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for n in (5, 33, 17, 9, 26, 12, 30):
        ids = [rng.randrange(97) for _ in range(n)]
        prompt = rng.randrange(1, n - 1)
        f.write(json.dumps({"input_ids": ids, "loss_mask": [0] * prompt + [1] * (n - prompt)}) + "\n")
PY
    base=(train --model "$fx" --data "$fx/train.jsonl" --eval-data "$tmp/val.jsonl" --steps 2 --seq-len 32 --lr 1e-3
          --warmup 0 --save-every 2 --log-every 1)
    "$bin" "${base[@]}" --micro-batch 2 --pack true --out "$tmp/p" >/dev/null 2>"$tmp/err" || fail "packed: $(cat "$tmp/err")"
    "$bin" "${base[@]}" --micro-batch 2 --pack false --out "$tmp/u" >/dev/null 2>"$tmp/err" || fail "unpacked: $(cat "$tmp/err")"
    mpi 2 "$bin" "${base[@]}" --micro-batch 1 --zero-stage 3 --pack true --out "$tmp/p2" >/dev/null 2>"$tmp/err" ||
      fail "2 ranks: $(tail -3 "$tmp/err")"
    same_evals "$tmp/p" "$tmp/p2" || fail "1 rank: $(evals "$tmp/p"); 2 ranks: $(evals "$tmp/p2")"
    "$bin" export "$tmp/p" --out "$tmp/hf" --dtype f32 >/dev/null 2>"$tmp/err" || fail "export: $(cat "$tmp/err")"
    for py in "${tpys[@]}"; do
      "$py" - "$tmp/hf" "$tmp/val.jsonl" "$(evals "$tmp/p" | tail -1)" "$(evals "$tmp/u" | tail -1)" <<'PY' ||
import json, sys
import torch, transformers
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).eval()
total, count = 0.0, 0
for line in open(sys.argv[2]):
    r = json.loads(line)
    ids, mask = r["input_ids"][:33], r["loss_mask"][:33]  # strata's cut: --seq-len + 1 tokens
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]])).logits[0].double()
    lp = torch.log_softmax(logits, -1)
    for t in range(len(ids) - 1):
        if mask[t + 1]:
            total -= lp[t, ids[t + 1]].item()
            count += 1
want = total / count
for name, got in (("packed", sys.argv[3]), ("one per row", sys.argv[4])):
    step, loss, tokens = got.split()
    rel = abs(float(loss) - want) / want
    print(f"transformers {transformers.__version__}: {name} eval_loss {float(loss):.8f}, transformers {want:.8f}, rel {rel:.1e}, tokens {tokens}/{count}")
    assert int(tokens) == count and rel < 1e-5, name
PY
        fail "$py: the evaluation loss differs from transformers'"
    done ;;
  lora)
    # Low-rank adapters over frozen weights (a tiny Llama saved by transformers): the first
    # loss is the base model's (B starts at zero) and the loss falls; the same losses at stages
    # 0-2 on 1 and 2 ranks (the adapters' optimizer offloaded too), across a resume, and from a
    # config's lora block; GPT-2 with its default target; the errors.
    fx="$src/tests/fixtures/hf-families/llama2"
    run=(train --model "$fx" --data "$fx/train.jsonl" --seq-len 16 --steps 6 --lora-rank 4 --lora-targets all-linear
         --lr 1e-2 --warmup 0 --lr-decay constant --weight-decay 0 --beta2 0.999 --grad-clip 0 --log-every 1)
    "$bin" "${run[@]}" --micro-batch 2 --out "$tmp/one" 2>"$tmp/err" || fail "train: $(cat "$tmp/err")"
    grep -q "strata: LoRA: rank 4, alpha 8, dropout 0 on all-linear; 0.0040M trainable" "$tmp/err" ||
      fail "no LoRA line: $(cat "$tmp/err")"
    /usr/bin/python3 - "$fx/train.json" "$tmp/one/metrics.jsonl" <<'PY' || fail "the first loss is not the base model's, or the loss does not fall"
import json, sys
base = json.load(open(sys.argv[1]))["losses"][0]
got = [json.loads(l)["loss"] for l in open(sys.argv[2])]
print(f"first {got[0]:.8f} (base {base:.8f}), last {got[-1]:.6f}")
sys.exit(0 if abs(got[0] - base) < 1e-6 * base and got[-1] < got[0] - 0.02 else 1)
PY
    # Stage 3 partitions the frozen weights too: on the device, in host RAM, on NVMe.
    for args in "2 --zero-stage 1" "2 --zero-stage 2" "2 --zero-stage 1 --offload-optimizer cpu" \
      "2 --zero-stage 3 --param-persistence-threshold 0" \
      "2 --zero-stage 3 --param-persistence-threshold 0 --offload-param nvme --nvme-path $tmp --offload-optimizer cpu"; do
      mpi ${args%% *} "$bin" "${run[@]}" --micro-batch 1 ${args#* } --out "$tmp/r" >/dev/null 2>"$tmp/err" ||
        fail "$args: $(tail -3 "$tmp/err")"
      close "$tmp/one" "$tmp/r" || fail "$args: $(log_lines "$tmp/r") against 1 rank: $(log_lines "$tmp/one")"
      rm -rf "$tmp/r"
    done
    "$bin" "${run[@]}" --micro-batch 2 --steps 3 --save-every 3 --out "$tmp/res" >/dev/null 2>&1 || fail "first half"
    "$bin" "${run[@]}" --micro-batch 2 --save-every 3 --resume --out "$tmp/res" >/dev/null 2>"$tmp/err" ||
      fail "resume: $(cat "$tmp/err")"
    [[ "$(log_lines "$tmp/one")" == "$(log_lines "$tmp/res")" ]] || fail "resumed: $(log_lines "$tmp/res")"
    # At stage 3 with the frozen weights in host RAM: the resumed run as the uninterrupted one.
    s3=(--zero-stage 3 --param-persistence-threshold 0 --offload-param cpu --offload-optimizer cpu --save-every 3)
    "$bin" "${run[@]}" --micro-batch 2 "${s3[@]}" --out "$tmp/s3" >/dev/null 2>&1 || fail "stage 3"
    "$bin" "${run[@]}" --micro-batch 2 "${s3[@]}" --steps 3 --out "$tmp/s3r" >/dev/null 2>&1 || fail "stage 3, first half"
    "$bin" "${run[@]}" --micro-batch 2 "${s3[@]}" --resume --out "$tmp/s3r" >/dev/null 2>"$tmp/err" ||
      fail "stage 3, resume: $(cat "$tmp/err")"
    [[ "$(log_lines "$tmp/s3")" == "$(log_lines "$tmp/s3r")" ]] || fail "stage 3, resumed: $(log_lines "$tmp/s3r")"
    expect_error 1 "holds adapters" -- "${run[@]}" --lora-rank 8 --micro-batch 2 --steps 9 --resume --out "$tmp/res"
    # Other frozen weights (the seed's, not the directory's): their checksum is not the checkpoint's.
    expect_error 1 "are not those the checkpoint's adapters were trained on" -- "${run[@]}" --micro-batch 2 --steps 9 \
      --resume --init random --out "$tmp/res"
    expect_error 1 "adapters are written as a directory" -- export "$tmp/res" --out "$tmp/x.safetensors"
    "$bin" "${run[@]}" --lora-rank 0 --micro-batch 2 --steps 1 --save-every 1 --out "$tmp/full" >/dev/null 2>&1 ||
      fail "a run without adapters"
    expect_error 2 "\-\-merge: .* holds no adapters" -- export "$tmp/full" --merge --out "$tmp/x"
    # A model's --init random weights stored once (strata export --model CONFIG --init random):
    # training from the directory is training from the seed.
    tiny=(--data "$src/data/default.txt" --seq-len 16 --micro-batch 2 --steps 2 --log-every 1 --lora-rank 2)
    "$bin" export --model "$src/configs/llama-tiny-bytes.json" --init random --out "$tmp/init" >/dev/null 2>"$tmp/err" ||
      fail "export --init random: $(cat "$tmp/err")"
    "$bin" train --model "$tmp/init" "${tiny[@]}" --out "$tmp/from_dir" >/dev/null 2>&1 || fail "from the directory"
    "$bin" train --model "$src/configs/llama-tiny-bytes.json" "${tiny[@]}" --out "$tmp/from_seed" >/dev/null 2>&1 ||
      fail "from the seed"
    [[ "$(log_lines "$tmp/from_dir")" == "$(log_lines "$tmp/from_seed")" ]] ||
      fail "from the directory: $(log_lines "$tmp/from_dir"); from the seed: $(log_lines "$tmp/from_seed")"
    expect_error 2 "give \-\-model CONFIG with \-\-init random" -- export --model "$src/configs/llama-tiny-bytes.json" \
      --out "$tmp/x"
    # PEFT's adapter directory: its names and shapes; where a Python has peft, PeftModel loads it
    # over the base and gives the loss Strata's last evaluation gave.
    "$bin" "${run[@]}" --micro-batch 2 --steps 3 --save-every 3 --eval-data "$fx/train.jsonl" --out "$tmp/pe" \
      >/dev/null 2>&1 || fail "train for the export"
    "$bin" export "$tmp/pe" --out "$tmp/pe/adapter" >/dev/null 2>"$tmp/err" || fail "export: $(cat "$tmp/err")"
    /usr/bin/python3 - "$tmp/pe/adapter" <<'PY' || fail "the adapter directory is not PEFT's"
import json, struct, sys
d = sys.argv[1]
c = json.load(open(d + "/adapter_config.json"))
assert c["peft_type"] == "LORA" and c["r"] == 4 and c["lora_alpha"] == 8, c
assert c["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], c
raw = open(d + "/adapter_model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
a = header["base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"]
b = header["base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"]
assert a["shape"] == [4, 48] and b["shape"] == [32, 4], (a, b)
assert len([k for k in header if k != "__metadata__"]) == 2 * 7 * 2, sorted(header)
PY
    IFS=: read -ra candidates <<<"${STRATA_TORCH_PYTHON:-$src/.venv/bin/python}"
    for py in "${candidates[@]}"; do
      "$py" -c "import torch, transformers, peft" 2>/dev/null || continue
      "$py" - "$fx" "$tmp/pe/adapter" "$(grep -o '"eval_loss":[0-9.]*' "$tmp/pe/metrics.jsonl" | tail -1 | cut -d: -f2)" <<'PY' ||
import json, sys
import torch, peft
from transformers import AutoModelForCausalLM
base = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32)
m = peft.PeftModel.from_pretrained(base, sys.argv[2]).eval()
ids = json.loads(open(sys.argv[1] + "/train.jsonl").readline())["input_ids"]
with torch.no_grad():
    lp = torch.log_softmax(m(torch.tensor([ids[:16]])).logits[0].double(), -1)
want = -sum(lp[t, ids[t + 1]].item() for t in range(16)) / 16
got = float(sys.argv[3])
print(f"peft {peft.__version__}: loss {want:.8f}, strata's eval_loss {got:.8f}, rel {abs(got - want) / want:.1e}")
sys.exit(0 if abs(got - want) < 1e-6 * want else 1)
PY
        fail "$py: PEFT's loss over the exported adapters differs"
    done
    printf '{"train_micro_batch_size_per_gpu": 2, "lora": {"r": 4, "lora_alpha": 8, "target_modules": "all-linear"}}' >"$tmp/ds.json"
    "$bin" train --config "$tmp/ds.json" --model "$fx" --data "$fx/train.jsonl" --seq-len 16 --steps 6 --lr 1e-2 \
      --warmup 0 --lr-decay constant --log-every 1 --out "$tmp/ds" >/dev/null 2>"$tmp/err" || fail "--config: $(cat "$tmp/err")"
    close "$tmp/one" "$tmp/ds" || fail "--config: $(log_lines "$tmp/ds")"
    "$bin" "${run[@]}" --micro-batch 2 --precision bf16 --steps 2 --out "$tmp/bf16" >/dev/null 2>"$tmp/err" ||
      fail "bf16: $(cat "$tmp/err")"
    g="$src/tests/fixtures/hf-families/gpt2"
    "$bin" train --model "$g" --data "$g/train.jsonl" --seq-len 16 --steps 2 --lora-rank 2 --out "$tmp/gpt2" 2>"$tmp/err" ||
      fail "GPT-2: $(cat "$tmp/err")"
    grep -q "on the family's default modules" "$tmp/err" || fail "GPT-2: $(cat "$tmp/err")"
    expect_error 1 "has no module 'query_key_value'" -- "${run[@]}" --lora-targets q_proj,query_key_value --out "$tmp/bad"
    expect_error 2 "\-\-offload-param cpu with \-\-lora-rank at \-\-zero-stage 2" -- "${run[@]}" --zero-stage 2 \
      --offload-param cpu --offload-optimizer cpu --out "$tmp/bad"
    echo "ok: $(log_lines "$tmp/one" | tail -1)" ;;
  lora_peft)
    # PEFT's own adapters (tests/fixtures/peft, made by peft over every family's tiny model in
    # hf-families-tf5, on all its linear layers): started from adapter_init with --lora-adapter,
    # 5 AdamW steps give peft + torch's losses (to 1e-4, as full fine-tuning's parity in
    # cli.hf_families) and adapter_after's weights (each tensor to 1e-3 in relative L2); --merge
    # gives the adapted model. For Llama 2 and Qwen2.5 (biases, a tied head), the same losses at
    # every stage on 1 to 4 ranks (every sample is the same sequence), with the frozen weights
    # partitioned on the device, in host RAM and on NVMe, and across a resume.
    for pf in "$src"/tests/fixtures/peft/*/; do
      fam=$(basename "$pf")
      fx="$src/tests/fixtures/hf-families-tf5/$fam"
      run=(train --model "$fx" --data "$fx/train.jsonl" --lora-adapter "$pf/adapter_init" --steps 5 --seq-len 16
           --micro-batch 1 --lr 2e-3 --warmup 0 --lr-decay constant --weight-decay 0.1 --beta1 0.9 --beta2 0.95
           --eps 1e-8 --grad-clip 0 --log-every 1)
      "$bin" "${run[@]}" --save-every 5 --eval-data "$fx/train.jsonl" --out "$tmp/$fam" 2>"$tmp/err" ||
        fail "$fam: $(cat "$tmp/err")"
      "$bin" export "$tmp/$fam" --out "$tmp/$fam/adapter" >/dev/null 2>"$tmp/err" || fail "$fam, export: $(cat "$tmp/err")"
      /usr/bin/python3 - "$pf" "$tmp/$fam" "$fam" <<'PY' || fail "$fam: the adapters do not train as peft + torch's"
import json, math, struct, sys
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        out[k] = struct.unpack(f"<{(b - a) // 4}f", data[a:b])
    return out
want = json.load(open(sys.argv[1] + "/train.json"))["losses"]
got = [json.loads(l)["loss"] for l in open(sys.argv[2] + "/metrics.jsonl")]
loss_rel = max(abs(g - w) / w for g, w in zip(got, want))
theirs = tensors(sys.argv[1] + "/adapter_after/adapter_model.safetensors")
ours = tensors(sys.argv[2] + "/adapter/adapter_model.safetensors")
assert set(theirs) == set(ours), sorted(set(theirs) ^ set(ours))
w_rel = max(math.sqrt(sum((x - y) ** 2 for x, y in zip(ours[k], theirs[k])) / sum(y * y for y in theirs[k]))
            for k in theirs)
print(f"{sys.argv[3]}: losses to {loss_rel:.1e}, adapters to {w_rel:.1e} (relative L2, the worst of {len(ours)} tensors)")
sys.exit(0 if len(got) == len(want) and loss_rel < 1e-4 and w_rel < 1e-3 else 1)
PY
      # --merge: the whole model with the adapters folded in; its loss is the adapted model's
      # (the last evaluation), and where a Python has peft, its weights are merge_and_unload()'s.
      "$bin" export "$tmp/$fam" --merge --out "$tmp/$fam/merged" >/dev/null 2>"$tmp/err" ||
        fail "$fam, --merge: $(cat "$tmp/err")"
      "$bin" train --model "$tmp/$fam/merged" --data "$fx/train.jsonl" --steps 1 --seq-len 16 --micro-batch 1 \
        --lr 1e-9 --out "$tmp/$fam/m1" >/dev/null 2>"$tmp/err" || fail "$fam, the merged model: $(cat "$tmp/err")"
      /usr/bin/python3 - "$tmp/$fam" <<'PY' || fail "$fam: the merged model's loss is not the adapted model's"
import json, sys
want = [json.loads(l)["eval_loss"] for l in open(sys.argv[1] + "/metrics.jsonl") if "eval_loss" in l][-1]
got = json.loads(open(sys.argv[1] + "/m1/metrics.jsonl").readline())["loss"]
print(f"merged: loss {got:.9f}, the adapted model's {want:.9f}")
sys.exit(0 if abs(got - want) < 1e-6 * want else 1)
PY
      IFS=: read -ra candidates <<<"${STRATA_TORCH_PYTHON:-$src/.venv/bin/python}"
      for py in "${candidates[@]}"; do
        "$py" -c "import torch, transformers, peft" 2>/dev/null || continue
        "$py" - "$fx" "$tmp/$fam/adapter" "$tmp/$fam/merged" <<'PY' || fail "$py: --merge is not PEFT's merge_and_unload"
import sys
import torch, peft
from transformers import AutoModelForCausalLM
base = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
theirs = peft.PeftModel.from_pretrained(base, sys.argv[2]).merge_and_unload().state_dict()
ours = AutoModelForCausalLM.from_pretrained(sys.argv[3], dtype=torch.float32).state_dict()
assert set(theirs) == set(ours), sorted(set(theirs) ^ set(ours))
worst = max(((ours[k] - theirs[k]).abs().max() / theirs[k].abs().max().clamp_min(1e-30)).item() for k in theirs)
print(f"peft {peft.__version__}: merge_and_unload against --merge, worst tensor {worst:.1e}")
sys.exit(0 if worst < 1e-6 else 1)
PY
      done
      [[ $fam == llama2 || $fam == qwen2 ]] || continue
      s3=(--zero-stage 3 --param-persistence-threshold 0)
      for args in "2 --zero-stage 1" "3 --zero-stage 2 --offload-optimizer cpu" "4 ${s3[*]}" \
        "1 ${s3[*]} --offload-param cpu --offload-optimizer cpu" \
        "2 ${s3[*]} --offload-param nvme --nvme-path $tmp --offload-optimizer cpu"; do
        mpi ${args%% *} "$bin" "${run[@]}" ${args#* } --out "$tmp/r" >/dev/null 2>"$tmp/err" ||
          fail "$fam, $args: $(tail -3 "$tmp/err")"
        close "$tmp/$fam" "$tmp/r" || fail "$fam, $args: $(log_lines "$tmp/r") against 1 rank: $(log_lines "$tmp/$fam")"
        rm -rf "$tmp/r"
      done
      "$bin" "${run[@]}" "${s3[@]}" --steps 3 --save-every 3 --out "$tmp/res" >/dev/null 2>&1 || fail "$fam: first half"
      "$bin" "${run[@]}" "${s3[@]}" --save-every 3 --resume --out "$tmp/res" >/dev/null 2>"$tmp/err" ||
        fail "$fam, resume: $(cat "$tmp/err")"
      close "$tmp/$fam" "$tmp/res" || fail "$fam, resumed: $(log_lines "$tmp/res")"
      rm -rf "$tmp/res"
    done
    # The errors: a rank the adapter does not have; an adapter_config.json whose r is not its
    # tensors'; what Strata does not train (DoRA).
    fx="$src/tests/fixtures/hf-families-tf5/llama2" pf="$src/tests/fixtures/peft/llama2"
    bad=(train --model "$fx" --data "$fx/train.jsonl" --seq-len 16 --steps 1 --out "$tmp/bad")
    expect_error 2 "\-\-lora-rank 8 with \-\-lora-adapter" -- "${bad[@]}" --lora-adapter "$pf/adapter_init" --lora-rank 8
    for edit in 'c["r"] = 8' 'c["use_dora"] = True'; do
      mkdir -p "$tmp/edited" && cp "$pf/adapter_init/"* "$tmp/edited/"
      /usr/bin/python3 -c "import json, sys; c = json.load(open(sys.argv[1])); $edit; json.dump(c, open(sys.argv[1], 'w'))" \
        "$tmp/edited/adapter_config.json"
      code=1 want="lora_A.weight is F32 \[4, 32\], the model's adapter is F32/BF16/F16 \[8, 32\]"
      [[ $edit == *dora* ]] && code=2 want="use_dora is true"
      expect_error $code "$want" -- "${bad[@]}" --lora-adapter "$tmp/edited"
    done
    echo "ok" ;;
  finetune_lora)
    # docs/fine-tuning.md's LoRA commands as the page writes them, on a tiny Llama directory
    # (weights, tokenizer, chat template) and data/chat-tiny.jsonl: prepare, train, export; the
    # adapter directory is PEFT's, and loads in peft where a Python has it.
    py="$src/.venv/bin/python"
    "$py" -c "import transformers, jinja2" 2>/dev/null ||
      { echo "skipped: no $py with transformers and jinja2 (tools/setup.sh installs them from PyPI)"; exit 77; }
    "$bin" export --model "$src/configs/llama-tiny-bytes.json" --init random --out "$tmp/model" >/dev/null 2>&1 ||
      fail "making the starting model failed"
    cp "$src"/tests/fixtures/hf-chat-tiny/*.json "$tmp/model/"  # "downloaded": weights, tokenizer, template
    # The page's first sh block after the LoRA heading, its continuation lines joined.
    awk '/^## Low-rank adapters/ { on = 1 } on && /^```sh/ { take = 1; next } take && /^```/ { exit } take' \
      "$src/docs/fine-tuning.md" | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' >"$tmp/commands"
    [[ $(wc -l <"$tmp/commands") == 3 ]] || fail "the page's LoRA block is not three commands: $(cat "$tmp/commands")"
    sed -i -e "s#^\.venv/bin/python#$py#" -e "s# tools/# $src/tools/#" -e "s#^build/strata#$bin#" -e "s#MODEL_DIR#$tmp/model#g" \
      -e "s# chat\.jsonl# $src/data/chat-tiny.jsonl#" -e 's#--seq-len [0-9]*#--seq-len 64#' \
      -e 's#--steps [0-9]*#--steps 12#' -e 's#--save-every [0-9]*#--save-every 12#' "$tmp/commands"
    (cd "$tmp" && bash -e "$tmp/commands") >"$tmp/out" 2>&1 || fail "the page's commands: $(tail -5 "$tmp/out")"
    /usr/bin/python3 - "$tmp/lora/adapter" <<'PY' || fail "the adapter directory is not PEFT's"
import json, struct, sys
c = json.load(open(sys.argv[1] + "/adapter_config.json"))
assert c["peft_type"] == "LORA" and c["r"] == 16 and c["lora_alpha"] == 32, c
raw = open(sys.argv[1] + "/adapter_model.safetensors", "rb").read()
header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
assert len([k for k in header if k != "__metadata__"]) == 2 * 7 * 2, sorted(header)
PY
    IFS=: read -ra candidates <<<"${STRATA_TORCH_PYTHON:-$src/.venv/bin/python}"
    for py in "${candidates[@]}"; do
      "$py" -c "import torch, transformers, peft" 2>/dev/null || continue
      "$py" - "$tmp/model" "$tmp/lora/adapter" <<'PY' || fail "$py: peft does not load the adapter"
import sys
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM
model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sys.argv[1]), sys.argv[2])
model(torch.tensor([[1, 2, 3]]))
print("peft loads the adapter: ok")
PY
    done
    echo "ok: $(grep -o '"loss":[0-9.]*' "$tmp/lora/metrics.jsonl" | tail -1)" ;;
  plot)
    # strata plot: a finished run with validation and offload, a run still writing (its last
    # line cut short), and the errors.
    command -v gnuplot >/dev/null || { echo "skipped: no gnuplot (tools/setup.sh installs gnuplot-nox)"; exit 77; }
    "$bin" train "${sft[@]}" --steps 8 --micro-batch 4 --eval-fraction 0.1 --eval-every 4 --zero-stage 1 \
      --offload-optimizer cpu --log-every 2 --out "$tmp/run" >/dev/null 2>"$tmp/err" || fail "train: $(cat "$tmp/err")"
    "$bin" plot "$tmp/run" >"$tmp/out" 2>"$tmp/err" || fail "plot: $(cat "$tmp/err")"
    [[ "$(cat "$tmp/out")" == "$tmp/run/plot.png" ]] || fail "plot printed $(cat "$tmp/out")"
    [[ "$(head -c 8 "$tmp/run/plot.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] || fail "not a PNG"
    grep -q "validation" "$tmp/run/plot.gp" || fail "no validation curve in the script"
    grep -q "between tiers" "$tmp/run/plot.gp" || fail "no tier bytes in the script of an offloading run"
    mkdir "$tmp/live" && head -3 "$tmp/run/metrics.jsonl" >"$tmp/live/metrics.jsonl"
    head -c 100 <(sed -n 4p "$tmp/run/metrics.jsonl") >>"$tmp/live/metrics.jsonl"  # a line being written
    "$bin" plot "$tmp/live" --output "$tmp/live.png" >/dev/null 2>"$tmp/err" || fail "plot of a run in progress: $(cat "$tmp/err")"
    [[ -s "$tmp/live.png" ]] || fail "no PNG for a run in progress"
    expect_error 1 "metrics.jsonl' cannot be read" -- plot "$tmp/nowhere"
    expect_error 2 "give the run's --out directory" -- plot
    expect_error 1 "with the pngcairo terminal is not available" -- plot "$tmp/run" --gnuplot /nonexistent/gnuplot
    echo "ok: $(stat -c %s "$tmp/run/plot.png") bytes" ;;
  *) fail "unknown case $case_name" ;;
esac
