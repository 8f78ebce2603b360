#!/usr/bin/env bash
# The ZeRO and offload equivalence runs with --device cuda: every ZeRO stage, with and without
# the optimizer (and stage 3's parameters) offloaded, on 1 and 2 ranks (one GPU each), against
# the same run on the CPU backend. Exits 77 (ctest: skipped) with the reason where no GPU can
# run it; tools/gpu-check.sh runs it on a GPU machine.
#   cuda_equivalence.sh STRATA_BINARY MODEL PRECISION
set -u
bin=$1; model=$2; precision=$3
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$src/tests/test_lib.sh"
cd "$src" || exit 1

if ! "$bin" train --device cuda --steps 1 --model "$model" --out "$tmp/probe" >/dev/null 2>"$tmp/probe.err"; then
  if grep -qE "no GPU is visible|has no CUDA" "$tmp/probe.err"; then
    echo "skipped: $(grep -oE '(no GPU is visible|this build has no CUDA)[^;]*' "$tmp/probe.err" | head -1)"
    exit 77
  fi
  fail "the probe run on the GPU failed: $(cat "$tmp/probe.err")"
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
common=(--model "$model" --precision "$precision" --steps 6 --log-every 1 --micro-batch 2 --seq-len 64 --seed 7)
tol=$([[ $precision == f32 ]] && echo 1e-4 || echo 2e-2)
# The last logged loss of a run, and how far two runs' loss curves are apart (max relative).
apart() { paste <(log_lines "$1" | cut -d' ' -f2) <(log_lines "$2" | cut -d' ' -f2) | sed 's/"loss"://g' |
  awk '{d=($1-$2); if (d<0) d=-d; r=d/($1<0?-$1:$1); if (r>m) m=r} END {printf "%.3g", m}'; }
run() {  # run NAME RANKS DEVICE ARGS...
  local name=$1 np=$2 dev=$3; shift 3
  local launch=("$bin")
  ((np > 1)) && launch=(mpirun --allow-run-as-root --oversubscribe -np "$np" "$bin")
  "${launch[@]}" train --device "$dev" "${common[@]}" "$@" --out "$tmp/$name" 2>"$tmp/$name.err" ||
    fail "$name failed: $(tail -5 "$tmp/$name.err")"
}
for np in 1 2; do
  for cfg in "0" "1" "2" "3" "2 --offload-optimizer cpu" "3 --offload-optimizer cpu --offload-param cpu"; do
    read -r stage extra <<<"$cfg"
    name="np${np}_z${stage}${extra:+_offload}"
    # shellcheck disable=SC2086  # extra is a list of options
    run "${name}_cpu" "$np" cpu --zero-stage "$stage" $extra
    # shellcheck disable=SC2086
    run "${name}_cuda" "$np" cuda --zero-stage "$stage" $extra
    d=$(apart "$tmp/${name}_cpu" "$tmp/${name}_cuda")
    awk -v d="$d" -v t="$tol" 'BEGIN {exit !(d <= t)}' || fail "$name: cuda's losses are $d apart from the CPU's (tolerance $tol)"
    echo "ok: $name cuda vs cpu losses within $d"
  done
done
