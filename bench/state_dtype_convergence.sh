#!/usr/bin/env bash
# S17's convergence evidence: the same runs with f32 optimizer states, with bf16 master, m and
# v rounded to nearest, and with them rounded stochastically, for a GPT-2 and a Llama on real
# text (data/default.txt, Debian's license texts), then each variant's final loss against
# f32's and the curves as one PNG (gnuplot).
#
# usage: bench/state_dtype_convergence.sh STRATA OUT [STEPS] [extra strata train options...]
#   STRATA: the strata binary; OUT: a directory for the runs, table.md and curves.png.
# Each run: bf16 compute, ZeRO stage 1 with the optimizer in host RAM (the CPU Adam owns the
# 16-bit states), the model's default batch (8 × 128 tokens), logged every 10 steps. The
# final loss is the mean of the last 100 steps' losses (one batch a step is noisy).
set -euo pipefail
strata=$1 out=$2 steps=${3:-2000}
shift $(($# < 3 ? $# : 3))
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
models=("gpt2:$src/configs/default.json" "llama:$src/configs/llama-bytes.json")
variants=("f32:f32:stochastic" "bf16-nearest:bf16:nearest" "bf16-stochastic:bf16:stochastic")
for m in "${models[@]}"; do
  for v in "${variants[@]}"; do
    IFS=: read -r name dtype rounding <<<"$v"
    run="$out/${m%%:*}-$name"
    [[ -s $run/metrics.jsonl && $(tail -1 "$run/metrics.jsonl" | grep -o '"step":[0-9]*') == "\"step\":$steps" ]] &&
      continue # done before: the script resumes where it stopped
    rm -rf "$run"
    echo "== ${m%%:*}, $name" >&2
    "$strata" train --model "${m#*:}" --data "$src/data/default.txt" --steps "$steps" --precision bf16 \
      --zero-stage 1 --offload-optimizer cpu --master-dtype "$dtype" --optimizer-state-dtype "$dtype" \
      --state-rounding "$rounding" --log-every 10 --out "$run" "$@" >"$run.log" 2>&1 ||
      { echo "run failed: $run.log" >&2; tail -5 "$run.log" >&2; exit 1; }
  done
done

/usr/bin/python3 - "$out" "$steps" <<'PY'
import json, sys
out, steps = sys.argv[1], int(sys.argv[2])
rows = ["| model | states | final loss (mean of last 100 steps) | vs f32 |", "|---|---|---|---|"]
for model in ("gpt2", "llama"):
    ref = None
    for name in ("f32", "bf16-nearest", "bf16-stochastic"):
        pts = [json.loads(l) for l in open(f"{out}/{model}-{name}/metrics.jsonl")]
        with open(f"{out}/{model}-{name}.dat", "w") as f:
            for p in pts:
                f.write(f"{p['step']} {p['loss']}\n")
        tail = [p["loss"] for p in pts if p["step"] > steps - 100]
        final = sum(tail) / len(tail)
        ref = final if ref is None else ref
        rows.append(f"| {model} | {name} | {final:.4f} | {100 * (final / ref - 1):+.2f}% |")
open(f"{out}/table.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY

gnuplot <<EOF
set terminal pngcairo size 1200,460 font ",10"
set output "$out/curves.png"
set multiplot layout 1,2 title "Training loss, f32 vs bf16 optimizer states (master, m, v), $steps steps, data/default.txt"
set xlabel "step"; set ylabel "loss (nats/byte)"; set grid; set key top right
set logscale y
do for [m in "gpt2 llama"] {
  set title m
  plot "$out/".m."-f32.dat" w l lw 2 t "f32", \
       "$out/".m."-bf16-nearest.dat" w l lw 1.5 t "bf16, nearest", \
       "$out/".m."-bf16-stochastic.dat" w l lw 1.5 dt 2 t "bf16, stochastic"
}
unset multiplot
EOF
echo "wrote $out/table.md and $out/curves.png" >&2
