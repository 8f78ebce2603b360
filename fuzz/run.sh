#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-16 (installing it if missing) and runs each for
# SECONDS (default 300) from fuzz/seeds, with fuzz/json.dict. Prints each target's
# executions and whether it crashed; a crash input is saved under build-fuzz/crashes/TARGET/
# (copy it to fuzz/regressions/TARGET/ once fixed, so the replay test keeps it fixed).
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
if ! command -v clang++-16 >/dev/null || [[ ! -d /usr/lib/llvm-16/lib/clang/16/lib/linux ]]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang-16 libclang-rt-16-dev >/dev/null
fi
cmake -S fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
cmake --build build-fuzz -j "$(nproc)" >/dev/null || exit 1
status=0
for target in safetensors_header manifest model_config ds_config; do
  corpus=build-fuzz/corpus/$target crashes=build-fuzz/crashes/$target
  mkdir -p "$corpus" "$crashes"
  cp -n fuzz/seeds/$target/* "$corpus/" 2>/dev/null
  log=build-fuzz/$target.log
  build-fuzz/fuzz_$target "$corpus" -dict=fuzz/json.dict -max_total_time="$seconds" -max_len=4096 \
    -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  n_crash=$(find "$crashes" -type f | wc -l)
  echo "fuzz $target: ${execs:-?} executions in ${seconds}s, exit $rc, $n_crash crash input(s), corpus $(ls "$corpus" | wc -l)"
  ((rc == 0 && n_crash == 0)) || { status=1; grep -m5 -E "ERROR|SUMMARY|what\(\)" "$log"; }
done
exit $status
