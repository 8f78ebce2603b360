#!/usr/bin/env bash
# How many DeepSpeed configs train unchanged: each *.json under DIR (a corpus gathered from
# public repositories; it stays outside this repository) is given to `strata train --config`
# for one step of a tiny model, on as many ranks as its batch triple implies (train_batch_size
# ÷ (micro-batch × accumulation), under mpirun, at most 8). Only the model, the step count, the
# output and the NVMe path are the command line's; everything else is the file's.
#   tools/ds-config-survey.sh DIR [STRATA_BINARY]   -> a table per subfolder of DIR, and the
#                                                      refusals grouped by the key they name
set -uo pipefail
dir=${1:?usage: tools/ds-config-survey.sh DIR [STRATA_BINARY]}
bin=${2:-build/strata}
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
results=$tmp/results.tsv
: >"$results"
while IFS= read -r -d '' f; do
  group=$(basename "$(dirname "$f")")
  # Ranks the batch triple implies (1 when it does not pin them down).
  np=$(python3 - "$f" <<'PY'
import json, sys
try:
    c = json.load(open(sys.argv[1]))
    tb, mb, ga = (c.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
    n = int(tb) // (int(mb) * int(ga)) if all(isinstance(v, (int, float)) for v in (tb, mb, ga)) else 1
    print(min(max(n, 1), 8))
except Exception:
    print(1)
PY
)
  launch=("$bin")
  ((np > 1)) && launch=(mpirun --allow-run-as-root --oversubscribe -np "$np" "$bin")
  rm -rf "$tmp/run" "$tmp/nvme"; mkdir -p "$tmp/nvme"
  timeout 120 "${launch[@]}" train --config "$f" --model configs/gpt2-tiny-bytes.json --steps 1 --seq-len 16 \
    --out "$tmp/run" --nvme-path "$tmp/nvme" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if ((rc == 0)); then
    printf '%s\t%s\tok\t\n' "$group" "$(basename "$f")" >>"$results"
  else
    # The key the refusal names: the first 'quoted' name after "config '...':"
    why=$(grep -m1 -oE "config '[^']*': '[^']+'[^(]*" "$tmp/err" | sed -E "s/^config '[^']*': //" | cut -c1-90)
    [[ -n $why ]] || why="exit $rc: $(grep -m1 -v '^\s*$' "$tmp/err" | cut -c1-90)"
    printf '%s\t%s\trefused\t%s\n' "$group" "$(basename "$f")" "$why" >>"$results"
  fi
done < <(find "$dir" -name '*.json' -print0 | sort -z)

echo "| group | configs | train unchanged | share |"
echo "|---|---|---|---|"
awk -F'\t' '{n[$1]++; if ($3 == "ok") ok[$1]++} END {for (g in n) printf "| %s | %d | %d | %.0f%% |\n", g, n[g], ok[g], 100 * ok[g] / n[g]}' "$results" | sort
echo
echo "| still refused: what the message names | configs | groups |"
echo "|---|---|---|"
awk -F'\t' '$3 == "refused" {k = $4; sub(/ = .*/, "", k); sub(/ is not.*/, "", k); c[k]++; g[k] = g[k] (index(g[k], $1) ? "" : (g[k] ? ", " : "") $1)} END {for (k in c) printf "| %s | %d | %s |\n", k, c[k], g[k]}' "$results" | sort -t'|' -k3 -nr
cp "$results" "${SURVEY_RESULTS:-/dev/null}" 2>/dev/null || true
