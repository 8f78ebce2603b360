#!/usr/bin/env bash
# Training with device memory the host cannot address (STRATA_OPAQUE_DEVICE=1) gives
# the same losses and norms, bit for bit, as the normal mode, in every tier and across
# ranks, and a run resumed in the other mode continues the same curve. Run by ctest:
#   opaque_test.sh STRATA_BINARY
set -u
bin=$1
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$src/tests/test_lib.sh"
cd "$src"
mpirun=(mpirun --oversubscribe --allow-run-as-root)
curve() { log_lines "$1"; }  # step, loss, lr, grad_norm of every logged step
base=(train --model configs/gpt2-tiny-bytes.json --seq-len 16 --micro-batch 2 --steps 4 --log-every 1 --seed 5)
run() {  # run NAME RANKS ARGS...: once in each mode, then the curves must be equal
  local name=$1 ranks=$2; shift 2
  for mode in 0 1; do
    local out="$tmp/$name.$mode"
    local cmd=("$bin" "${base[@]}" --out "$out" "$@")
    if ((ranks > 1)); then cmd=("${mpirun[@]}" -np "$ranks" "${cmd[@]}"); fi
    STRATA_OPAQUE_DEVICE=$mode "${cmd[@]}" >"$tmp/log" 2>&1 || fail "$name (opaque=$mode) failed: $(tail -3 "$tmp/log")"
  done
  cmp -s <(curve "$tmp/$name.0") <(curve "$tmp/$name.1") ||
    fail "$name: the opaque run's losses differ: $(diff <(curve "$tmp/$name.0") <(curve "$tmp/$name.1") | head -4)"
  [[ $(curve "$tmp/$name.1" | wc -l) -eq 4 ]] || fail "$name: expected 4 logged steps"
  echo "ok: $name: $(curve "$tmp/$name.1" | tail -1)"
}
mkdir -p "$tmp/nvme"
run stage0 1 --zero-stage 0
run stage3_bf16 1 --zero-stage 3 --precision bf16
run offload_cpu_act 1 --zero-stage 2 --offload-optimizer cpu --activation-checkpointing --offload-activations cpu
run nvme 1 --zero-stage 3 --precision bf16 --offload-optimizer nvme --offload-param nvme --nvme-path "$tmp/nvme"
run ranks2_stage1_f16 2 --zero-stage 1 --precision f16
run ranks4_stage3_hpz 4 --zero-stage 3 --hpz-partition-size 2 --precision bf16
run llama_stage2 2 --model configs/llama-tiny-bytes.json --zero-stage 2 --precision bf16
run bf16_states_on_device 2 --zero-stage 2 --precision bf16 --master-dtype bf16 --optimizer-state-dtype bf16
# Imported Hugging Face weights: uploaded whole by the trainer (stage 0) or a unit at a time
# by the engine (stage 3).
"$bin" train --model configs/llama-tiny-bytes.json --seq-len 16 --steps 2 --save-every 2 --out "$tmp/src" \
  >"$tmp/log" 2>&1 || fail "training the model to export failed: $(tail -3 "$tmp/log")"
"$bin" export "$tmp/src" --out "$tmp/hf" --dtype f32 >"$tmp/log" 2>&1 || fail "export failed: $(tail -3 "$tmp/log")"
run hf_import_stage0 1 --model "$tmp/hf" --zero-stage 0
run hf_import_stage3 2 --model "$tmp/hf" --zero-stage 3 --precision bf16

# Resume across modes: saved in the normal mode, resumed opaque (and the reverse), the curve
# equals the uninterrupted run's.
full="$tmp/resume.full"
STRATA_OPAQUE_DEVICE=0 "$bin" "${base[@]}" --steps 6 --zero-stage 3 --offload-optimizer cpu --save-every 3 \
  --out "$full" >"$tmp/log" 2>&1 || fail "uninterrupted run failed: $(tail -3 "$tmp/log")"
for first in 0 1; do
  out="$tmp/resume.$first"
  STRATA_OPAQUE_DEVICE=$first "$bin" "${base[@]}" --steps 3 --zero-stage 3 --offload-optimizer cpu --save-every 3 \
    --out "$out" >"$tmp/log" 2>&1 || fail "first half (opaque=$first) failed: $(tail -3 "$tmp/log")"
  STRATA_OPAQUE_DEVICE=$((1 - first)) "$bin" "${base[@]}" --steps 6 --zero-stage 3 --offload-optimizer cpu \
    --save-every 3 --resume --out "$out" >"$tmp/log" 2>&1 || fail "resume (opaque=$((1 - first))) failed: $(tail -3 "$tmp/log")"
  cmp -s <(curve "$full") <(curve "$out") || fail "resumed across modes (first opaque=$first): the curve differs"
  echo "ok: saved with opaque=$first, resumed with opaque=$((1 - first)): the uninterrupted curve"
done
