#!/usr/bin/env bash
# Convergence evidence for 16-bit optimizer states: the same runs with f32 optimizer states
# (master, m, v: 12 B per parameter), with bf16 m and v (8 B) and with bf16 master, m and v
# (6 B), each rounded to nearest and stochastically, for a GPT-2 and a Llama on real text
# (data/default.txt, Debian's license texts); then each variant's final loss against f32's,
# and the curves with their ratio to f32's as one PNG (gnuplot).
#
# usage: bench/state_dtype_convergence.sh STRATA OUT [STEPS] [extra strata train options...]
#   STRATA: the strata binary; OUT: a directory for the runs, table.md and curves.png.
# Environment (defaults: the 0.86M models on data/default.txt, all five variants):
#   MODELS="gpt2:CONFIG llama:CONFIG"  the models, each as name:config (a name is gpt2 or llama)
#   DATA=FILE                          the training text
#   VARIANTS="f32 all16-nearest ..."   a subset of the variants below; f32 is always run first
# The GPT-2-small-class runs (86M and 76M: GPT-2 small's and llama-small's transformers over
# bytes, on a text larger than they can memorise in 2000 steps):
#   cat /usr/share/vim/vim90/doc/*.txt >vimdoc.txt   # Debian's vim-runtime: 9.5 MB of English
#   MODELS="gpt2:configs/gpt2-small-bytes.json llama:configs/llama-small-bytes.json" \
#   DATA=vimdoc.txt VARIANTS="all16-nearest all16-stochastic" \
#   bench/state_dtype_convergence.sh build/strata OUT 2000 --micro-batch 1 --seq-len 128 --lr 6e-4 --warmup 100
# (tens of minutes a run on a few cores). Each run: bf16 compute, ZeRO stage 1 with the optimizer
# in host RAM (the CPU Adam owns the 16-bit states), the default batch (8 × 128 tokens) unless
# the options after STEPS say otherwise, every step logged. The final
# loss is the mean of the last 200 steps' losses (one batch a step is noisy; every variant
# sees the same batches).
set -euo pipefail
strata=$1 out=$2 steps=${3:-2000}
shift $(($# < 3 ? $# : 3))
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
read -ra models <<<"${MODELS:-gpt2:$src/configs/default.json llama:$src/configs/llama-bytes.json}"
data=${DATA:-$src/data/default.txt}
# name:master:m and v:rounding
variants=("f32:f32:f32:stochastic" "mv16-nearest:f32:bf16:nearest" "mv16-stochastic:f32:bf16:stochastic"
  "all16-nearest:bf16:bf16:nearest" "all16-stochastic:bf16:bf16:stochastic")
# The chosen variants in the order above, f32 first; a name not above is an error.
chosen=" f32 ${VARIANTS:-mv16-nearest mv16-stochastic all16-nearest all16-stochastic} "
picked=() run_names=()
for v in "${variants[@]}"; do
  [[ $chosen == *" ${v%%:*} "* ]] && picked+=("$v") run_names+=("${v%%:*}")
done
for name in $chosen; do
  [[ " ${run_names[*]} " == *" $name "* ]] || { echo "VARIANTS: no variant '$name' (${variants[*]%%:*})" >&2; exit 2; }
done
for m in "${models[@]}"; do
  for v in "${picked[@]}"; do
    IFS=: read -r name master moments rounding <<<"$v"
    run="$out/${m%%:*}-$name"
    [[ -s $run/metrics.jsonl && $(tail -1 "$run/metrics.jsonl" | grep -o '"step":[0-9]*') == "\"step\":$steps" ]] &&
      continue # done before: the script resumes where it stopped
    rm -rf "$run"
    echo "== ${m%%:*}, $name" >&2
    "$strata" train --model "${m#*:}" --data "$data" --steps "$steps" --precision bf16 \
      --zero-stage 1 --offload-optimizer cpu --master-dtype "$master" --optimizer-state-dtype "$moments" \
      --state-rounding "$rounding" --log-every 1 --out "$run" "$@" >"$run.log" 2>&1 ||
      { echo "run failed: $run.log" >&2; tail -5 "$run.log" >&2; exit 1; }
  done
done

model_names=()
for m in "${models[@]}"; do model_names+=("${m%%:*}"); done

/usr/bin/python3 - "$out" "$steps" "${model_names[*]}" "${run_names[*]}" <<'PY'
import json, sys
out, steps, models, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
names = {"f32": "f32 (12 B)", "mv16-nearest": "bf16 m, v; nearest (8 B)",
         "mv16-stochastic": "bf16 m, v; stochastic (8 B)", "all16-nearest": "bf16 master, m, v; nearest (6 B)",
         "all16-stochastic": "bf16 master, m, v; stochastic (6 B)"}
rows = ["| model | optimizer states | final loss (mean of the last 200 steps) | vs f32 |", "|---|---|---|---|"]
for model in models:
    ref = None
    for name in runs:
        loss = {}
        for l in open(f"{out}/{model}-{name}/metrics.jsonl"):
            p = json.loads(l)
            loss[p["step"]] = p["loss"]
        ref = loss if ref is None else ref
        # The curve, and its ratio to f32's as a 100-step moving average of both.
        with open(f"{out}/{model}-{name}.dat", "w") as f:
            for s in sorted(loss):
                w = [k for k in range(max(1, s - 99), s + 1) if k in loss and k in ref]
                f.write(f"{s} {loss[s]} {sum(loss[k] for k in w) / sum(ref[k] for k in w)}\n")
        last = [s for s in loss if s > steps - 200]
        final = sum(loss[s] for s in last) / len(last)
        base = sum(ref[s] for s in last) / len(last)
        rows.append(f"| {model} | {names[name]} | {final:.4f} | {100 * (final / base - 1):+.2f}% |")
open(f"{out}/table.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY

gnuplot <<GP
set terminal pngcairo size $((600 * ${#model_names[@]})),800 font ",10"
set output "$out/curves.png"
set multiplot layout 2,${#model_names[@]} title "f32 vs bf16 optimizer states, $steps steps on $(basename "$data") (bf16 compute, CPU Adam)"
set grid; set key top right
names = "${run_names[*]}"
titles = "$(for r in "${run_names[@]}"; do
  r=${r/mv16-/bf16-m,v-}
  printf '%s ' "${r/all16-/bf16-all-}"
done)"
do for [m in "${model_names[*]}"] {
  set title m." loss"; set xlabel "step"; set ylabel "loss (nats/byte)"; set logscale y; set yrange [0.6:6]
  plot for [i=1:words(names)] "$out/".m."-".word(names,i).".dat" u 1:2 w l lw (i == 1 ? 2 : 1) t word(titles,i)
}
do for [m in "${model_names[*]}"] {
  set title m.": loss / f32's loss (100-step moving averages)"; unset logscale y; set yrange [0.94:1.08]
  set ylabel "ratio"
  plot for [i=2:words(names)] "$out/".m."-".word(names,i).".dat" u 1:3 w l lw 1.5 t word(titles,i), 1 w l lc "black" dt 2 notitle
}
unset multiplot
GP
echo "wrote $out/table.md and $out/curves.png" >&2
