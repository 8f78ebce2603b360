#!/usr/bin/env bash
# A 13B-class LoRA fine-tune on one machine: Llama-2-13B's shape (configs/hf/llama-2-13b.json)
# initialised from --seed and stored once as bf16 safetensors (strata export --init random),
# then LoRA of rank 16 on every linear layer at ZeRO stage 3 with the frozen weights on NVMe,
# the adapters' optimizer in host RAM, --host-mem 12GiB and --device-mem 8GiB (the CPU
# backend's "device" is RAM too: 20 GiB in all), at --seq-len 512. Then fio on the same drive
# with the store's request size and queue depth, and a report (bench/lora_13b_report.py): the
# step time and where it goes, peak RSS, the bytes read per step against strata plan's least,
# and drive_ratio as `strata bench offload` defines it (the step's drive bytes at fio's speed ÷
# the step's wall time).
#
#   bench/lora_13b.sh WORKDIR [STRATA_BINARY]     (env: STEPS, default 4; WORKDIR needs ~55 GB)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?give a WORKDIR on the drive to measure (about 55 GB free)}
bin=${2:-$src/build/strata}
steps=${STEPS:-4}
command -v fio >/dev/null || { echo "bench/lora_13b.sh: needs fio (apt-get install fio)" >&2; exit 1; }
mkdir -p "$work/nvme"
[[ -f $work/llama13b/model.safetensors.index.json ]] ||
  "$bin" export --model "$src/configs/hf/llama-2-13b.json" --init random --out "$work/llama13b" --dtype bf16
run=(--model "$work/llama13b" --data "$src/data/default.txt" --seq-len 512 --micro-batch 1 --precision bf16
     --lora-rank 16 --lora-targets all-linear --zero-stage 3 --offload-param nvme --nvme-path "$work/nvme"
     --offload-optimizer cpu --host-mem 12GiB --device-mem 8GiB --activation-checkpointing)
"$bin" plan --model "$work/llama13b" --lora-rank 16 --lora-targets all-linear --seq-len 512 --micro-batch 1 \
  --device-mem 8GiB --host-mem 12GiB --threads 2 --json | tail -1 >"$work/plan.json"
rm -rf "$work/run"
/usr/bin/time -v -o "$work/time.txt" "$bin" train "${run[@]}" --steps "$steps" --log-every 1 --out "$work/run"
# The drive, read as the store reads it (1 MiB requests, 32 in flight), the best of two, on
# weight files the run read.
for k in 1 2; do
  fio --name=strata --readonly --filename="$work/llama13b/model-00003-of-00006.safetensors" --rw=read --bs=1048576 \
    --iodepth=32 --ioengine=io_uring --direct=1 --size=4000000000 --output-format=json 2>/dev/null
done | python3 -c 'import json, sys
d = json.JSONDecoder(); s = sys.stdin.read(); best, i = 0, 0
while (i := s.find("{", i)) >= 0:
    j, n = d.raw_decode(s, i); best = max(best, j["jobs"][0]["read"]["bw_bytes"]); i += n
print(best)' >"$work/fio_read_bps"
python3 "$src/bench/lora_13b_report.py" "$work"
