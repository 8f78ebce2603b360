#!/usr/bin/env bash
# Faults a user meets on a bad day, run by ctest: fault_test.sh STRATA_BINARY CASE
#   bad_values        every bad option value exits 2 naming the option
#   out_lock          a second run on one --out is refused naming the owner; stale locks
#   checkpoint_space  a checkpoint that cannot fit: sizes in the message, no partial files
#   resume_checks     --resume says what it does and refuses result-changing settings
#   signals           SIGTERM/SIGINT: finish the step, save, exit 128+N; a second one at once
#   signals_mpi       the same under mpirun: every rank stops after the same step
#   kill_storm        kill -9 at random moments, resumed each time: the log equals the
#                     uninterrupted run's, every step once (1 rank, and 2 ranks at stage 3)
set -u
bin=$1; case_name=$2
src=$(cd "$(dirname "$0")/.." && pwd)
# On any exit, a failed check included, the runs left in the background go too: one left
# running would hold ctest's output pipe open, and ctest would wait for it to its timeout.
tmp=$(mktemp -d); trap 'kill -9 $(jobs -p) 2>/dev/null; umount "$tmp"/small 2>/dev/null; rm -rf "$tmp"' EXIT
source "$src/tests/test_lib.sh"
mpi=(mpirun --allow-run-as-root --oversubscribe)
same_log() {  # same_log REF RUN: identical, each step exactly once
  log_lines "$1" >"$tmp/ref.lines"; log_lines "$2" >"$tmp/run.lines"
  local dup; dup=$(cut -d' ' -f1 "$tmp/run.lines" | sort | uniq -d | head -3)
  [[ -z $dup ]] || fail "steps logged twice in $2: $dup"
  diff "$tmp/ref.lines" "$tmp/run.lines" >"$tmp/diff" || fail "log of $2 differs from the uninterrupted run's: $(head -6 "$tmp/diff")"
}
wait_for_step() {  # wait_for_step DIR N: until metrics.jsonl logs step N (at most 60 s)
  for _ in $(seq 1 600); do
    grep -q "\"step\":$2," "$1/metrics.jsonl" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "step $2 never logged in $1"
}
case $case_name in
  bad_values)
    for bad in "--steps 0" "--steps -3" "--steps 99999999999999999999" "--micro-batch -1" "--micro-batch 3000000000" \
               "--grad-accum 0" "--seq-len 0" "--lr -1" "--lr 0" "--lr 1e999" "--warmup -1" "--threads -1" \
               "--device-threads -2" "--host-threads -1" "--seed -1" "--beta1 1.5" "--beta2 -0.1" "--eps 0" \
               "--weight-decay -0.1" "--min-lr-ratio 2" "--grad-clip -1" "--log-every 0" "--save-every -5" \
               "--keep-checkpoints -1" "--zero-stage 4" "--sub-group-size 0" "--prefetch-depth 99999999999" \
               "--aio-block-size 1000" "--aio-queue-depth 0" "--offload-ratio 1.5" "--pin-buffer-count 0" \
               "--initial-scale-power 400" "--hysteresis 0" "--comm-timeout 0" "--device-mem 0" \
               "--device-mem 1e30GiB" "--host-mem 0" "--hpz-partition-size 0" "--peak-tflops -1" \
               "--lr-decay sawtooth" "--adam-isa avx9" "--device tpu"; do
      read -r opt value <<<"$bad"
      expect_error 2 "\\$opt" -- train "$opt" "$value"
    done
    # cuda where this build or machine lacks it (or the backend is not written yet): which.
    expect_error 2 "\-\-device cuda: \(this build has no CUDA\|no GPU is visible\|.*not written yet\)" -- train --device cuda
    expect_error 2 "\-\-device cuda: " -- bench model --device cuda
    expect_error 2 "out of range" -- train --steps 99999999999999999999
    expect_error 2 "out of range" -- train --threads -1
    expect_error 2 "\-\-offload-param" -- train --zero-stage 3 --offload-param cpu
    expect_error 2 "\-\-offload-activations" -- train --offload-activations cpu
    # The same checks guard a config file's values.
    printf '{"train_micro_batch_size_per_gpu": -2}' >"$tmp/neg.json"
    expect_error 2 "micro" -- train --config "$tmp/neg.json" ;;
  out_lock)
    args=(train --steps 100000 --log-every 1 --micro-batch 2 --seq-len 32)
    "$bin" "${args[@]}" --out "$tmp/run" 2>/dev/null &
    owner=$!
    wait_for_step "$tmp/run" 1
    expect_error 1 "in use by another run (PID $owner on host $(hostname))" -- "${args[@]}" --out "$tmp/run"
    grep -q "give another --out" "$tmp/err" || fail "no hint: $(cat "$tmp/err")"
    n=$(wc -l <"$tmp/run/metrics.jsonl")
    for _ in $(seq 1 300); do  # (up to 30 s: under ctest -j2 the owner may wait for a core)
      [[ $(wc -l <"$tmp/run/metrics.jsonl") -gt $n ]] && break
      sleep 0.1
    done
    [[ $(wc -l <"$tmp/run/metrics.jsonl") -gt $n ]] || fail "the owner stopped logging after the refused run"
    kill -9 $owner; wait $owner 2>/dev/null
    # The owner died holding the lock: the next run takes it over and says whose it was.
    "$bin" train --steps 2 --out "$tmp/run" 2>"$tmp/err" || fail "a stale lock blocked the run: $(cat "$tmp/err")"
    grep -q "took over --out $tmp/run from PID $owner on host" "$tmp/err" || fail "no stale-lock note: $(cat "$tmp/err")"
    # A cleanly finished run leaves no owner behind.
    "$bin" train --steps 2 --out "$tmp/run" 2>"$tmp/err" || fail "rerun failed: $(cat "$tmp/err")"
    grep -q "took over" "$tmp/err" && fail "a clean exit left a stale lock: $(cat "$tmp/err")"
    # Under MPI the job holds one lock, and a second job on the same --out is refused.
    "${mpi[@]}" -np 2 "$bin" "${args[@]}" --out "$tmp/mpi" 2>/dev/null &
    job=$!
    wait_for_step "$tmp/mpi" 1
    "${mpi[@]}" -np 2 "$bin" train --steps 2 --out "$tmp/mpi" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    kill -TERM $job 2>/dev/null; wait $job 2>/dev/null
    [[ $rc -ne 0 ]] && grep -q "is in use by another run (PID [0-9]* on host" "$tmp/err" ||
      fail "a second mpirun job on one --out: exit $rc, $(cat "$tmp/err")"
    echo "ok: $(grep -m1 'in use' "$tmp/err")" ;;
  checkpoint_space)
    # A small file system of its own (root only): 16 MiB holds one 10.3 MB checkpoint, not two.
    mkdir -p "$tmp/small"
    if [[ $(id -u) -ne 0 ]] || ! mount -t tmpfs -o size=16M tmpfs "$tmp/small" 2>/dev/null; then
      echo "skip: needs root to mount a small tmpfs"; exit 77
    fi
    args=(train --steps 10 --log-every 1 --save-every 5 --keep-checkpoints 2)
    expect_error 1 "checkpoint of step 10 failed: it needs [0-9.]* MiB, has [0-9.]* MiB free at $tmp/small/run/checkpoints" \
      -- "${args[@]}" --out "$tmp/small/run"
    grep -q "the last complete checkpoint is $tmp/small/run/checkpoints/step-00000005" "$tmp/err" ||
      fail "hint does not name step 5: $(cat "$tmp/err")"
    [[ -z $(ls -A "$tmp/small/run/checkpoints" | grep -v '^step-00000005$') ]] ||
      fail "left behind: $(ls -A "$tmp/small/run/checkpoints")"
    [[ $(grep -c '"step"' "$tmp/small/run/metrics.jsonl") -eq 10 ]] || fail "metrics lost lines"
    # The write itself failing (the free-space check bypassed): nothing partial stays.
    STRATA_TEST_SKIP_SPACE_CHECK=1 "$bin" "${args[@]}" --out "$tmp/small/run2" 2>"$tmp/err"
    [[ $? -eq 1 ]] || fail "ENOSPC during the write did not fail the run"
    grep -q "No space left on device" "$tmp/err" || fail "no ENOSPC message: $(cat "$tmp/err")"
    [[ -z $(ls -A "$tmp/small/run2/checkpoints" | grep -v '^step-00000005$') ]] ||
      fail "a failed write left: $(ls -A "$tmp/small/run2/checkpoints")"
    rm -rf "$tmp/small/run" "$tmp/small/run2"
    # No checkpoint fits at all: the hint says there is none.
    umount "$tmp/small" && mount -t tmpfs -o size=4M tmpfs "$tmp/small"
    expect_error 1 "has [0-9.]* MiB free" -- "${args[@]}" --out "$tmp/small/run"
    grep -q "there is no complete checkpoint" "$tmp/err" || fail "hint: $(cat "$tmp/err")"
    grep -q "previous checkpoint is intact" "$tmp/err" && fail "claims an intact previous checkpoint"
    [[ -z $(ls -A "$tmp/small/run/checkpoints") ]] || fail "left behind: $(ls -A "$tmp/small/run/checkpoints")"
    echo "ok" ;;
  resume_checks)
    args=(train --steps 10 --log-every 1 --save-every 5 --micro-batch 4 --seq-len 32)
    "$bin" "${args[@]}" --steps 5 --out "$tmp/run" 2>/dev/null || fail "first run failed"
    expect_error 1 "\-\-precision bf16 (checkpoint: f32)" -- "${args[@]}" --precision bf16 --resume --out "$tmp/run"
    expect_error 1 "\-\-seq-len 64 (checkpoint: 32)" -- "${args[@]}" --seq-len 64 --resume --out "$tmp/run"
    expect_error 1 "global batch .* 2 x 1 x 1 = 2 (checkpoint: 4 x 1 x 1 = 4)" -- "${args[@]}" --micro-batch 2 --resume --out "$tmp/run"
    grep -q "allow-changes" "$tmp/err" || fail "no --allow-changes hint"
    # Together: each difference named. A different split of the same global batch is fine.
    expect_error 1 "\-\-precision bf16.*; \-\-seq-len 64" -- "${args[@]}" --precision bf16 --seq-len 64 --resume --out "$tmp/run"
    cp -r "$tmp/run" "$tmp/split"
    "$bin" "${args[@]}" --micro-batch 2 --grad-accum 2 --resume --out "$tmp/split" 2>"$tmp/err" ||
      fail "same global batch refused: $(cat "$tmp/err")"
    "$bin" "${args[@]}" --precision bf16 --lr 1e-3 --allow-changes --resume --out "$tmp/run" 2>"$tmp/err" ||
      fail "--allow-changes refused: $(cat "$tmp/err")"
    grep -q "resumed from $tmp/run/checkpoints/step-00000005 (step 5 of 10" "$tmp/err" || fail "no resume line: $(cat "$tmp/err")"
    grep -q "\-\-precision changes from f32 to bf16 (allowed by --allow-changes)" "$tmp/err" || fail "$(cat "$tmp/err")"
    grep -q "\-\-lr changes from 0.002 to 0.001" "$tmp/err" || fail "lr change not noted: $(cat "$tmp/err")"
    # A finished run: exit 0, saying so, and the log untouched.
    cp "$tmp/run/metrics.jsonl" "$tmp/before"
    "$bin" "${args[@]}" --precision bf16 --resume --out "$tmp/run" 2>"$tmp/err" || fail "finished run: exit $?: $(cat "$tmp/err")"
    grep -q "is at step 10 of --steps 10: the run is complete" "$tmp/err" || fail "$(cat "$tmp/err")"
    cmp -s "$tmp/before" "$tmp/run/metrics.jsonl" || fail "a finished run's log was rewritten"
    "$bin" "${args[@]}" --resume --out "$tmp/fresh" 2>"$tmp/err" || fail "fresh --resume failed"
    grep -q "no complete checkpoint in $tmp/fresh/checkpoints: starting fresh" "$tmp/err" || fail "$(cat "$tmp/err")"
    echo "ok" ;;
  signals)
    # The signalled runs are open-ended (--steps 100000); warmup spans every step, so the LR
    # does not depend on --steps and the resumed run can be held to a 100-step reference.
    args=(train --log-every 1 --seed 7 --micro-batch 4 --seq-len 64 --warmup 100000)
    "$bin" "${args[@]}" --steps 100 --out "$tmp/ref" 2>/dev/null || fail "reference run failed"
    for sig in TERM INT; do
      [[ $sig == TERM ]] && code=143 || code=130
      "$bin" "${args[@]}" --steps 100000 --save-every 100000 --out "$tmp/$sig" 2>"$tmp/err.$sig" &
      pid=$!
      wait_for_step "$tmp/$sig" 5
      kill -$sig $pid; wait $pid; rc=$?
      [[ $rc -eq $code ]] || fail "SIG$sig: exit $rc, expected $code: $(tail -3 "$tmp/err.$sig")"
      line=$(grep -o "stopped by SIG$sig after step [0-9]* of 100000; checkpoint [^;]*" "$tmp/err.$sig") ||
        fail "no stop message: $(tail -3 "$tmp/err.$sig")"
      step=$(sed -E 's/.*after step ([0-9]+).*/\1/' <<<"$line")
      [[ -e "$tmp/$sig/checkpoints/$(printf 'step-%08d' "$step")/manifest.json" ]] || fail "no checkpoint of step $step"
      [[ $(tail -1 "$tmp/$sig/metrics.jsonl" | grep -o '"step":[0-9]*') == "\"step\":$step" ]] || fail "log ends elsewhere"
      echo "ok: SIG$sig -> exit $rc, $line"
    done
    # Resumed, it continues exactly: the log equals the uninterrupted run's.
    [[ $(ls "$tmp/TERM/checkpoints") < step-00000100 ]] || fail "stopped too late for the reference: $(ls "$tmp/TERM/checkpoints")"
    "$bin" "${args[@]}" --steps 100 --resume --out "$tmp/TERM" 2>/dev/null || fail "resume after SIGTERM failed"
    same_log "$tmp/ref" "$tmp/TERM"
    # A second signal stops at once: no checkpoint, no stop message.
    "$bin" "${args[@]}" --steps 100000 --save-every 100000 --out "$tmp/twice" 2>"$tmp/err" &
    pid=$!
    wait_for_step "$tmp/twice" 3
    kill -TERM $pid; kill -INT $pid; wait $pid; rc=$?
    [[ $rc -eq 130 || $rc -eq 143 ]] || fail "second signal: exit $rc"  # killed by whichever came second
    grep -q "stopped by" "$tmp/err" && fail "the second signal let the run finish: $(tail -2 "$tmp/err")"
    [[ -z $(ls "$tmp/twice/checkpoints" 2>/dev/null) ]] || fail "saved after a second signal"
    echo "ok: a second signal ends the run at once (exit $rc)" ;;
  signals_mpi)
    # SIGTERM to one rank only: the ranks agree in the step's reduction and all stop after the
    # same step, with one checkpoint.
    args=(train --steps 100000 --log-every 1 --seed 7 --micro-batch 2 --seq-len 32 --zero-stage 2 --save-every 100000)
    "${mpi[@]}" -np 2 "$bin" "${args[@]}" --out "$tmp/run" 2>"$tmp/err" &
    job=$!
    wait_for_step "$tmp/run" 5
    ranks=($(pgrep -f "$bin ${args[*]} --out $tmp/run" | grep -v "^$job$"))
    ((${#ranks[@]} == 2)) || fail "expected 2 ranks, found ${#ranks[@]}"
    kill -TERM "${ranks[1]}"
    wait $job; rc=$?
    [[ $rc -eq 143 ]] || fail "mpirun exit $rc, expected 143: $(tail -5 "$tmp/err")"
    line=$(grep -o "stopped by SIGTERM after step [0-9]*" "$tmp/err") || fail "no stop message: $(tail -5 "$tmp/err")"
    step=${line##* }
    [[ $(ls "$tmp/run/checkpoints") == $(printf 'step-%08d' "$step") ]] || fail "checkpoints: $(ls "$tmp/run/checkpoints")"
    grep -q '"world": 2' "$tmp/run/checkpoints/$(printf 'step-%08d' "$step")/manifest.json" || fail "manifest"
    # mpirun itself signalled: it forwards SIGTERM to every rank (OpenMPI), with the same result.
    "${mpi[@]}" -np 2 "$bin" "${args[@]}" --out "$tmp/run2" 2>"$tmp/err2" &
    job=$!
    wait_for_step "$tmp/run2" 5
    kill -TERM $job; wait $job; rc=$?
    grep -q "stopped by SIGTERM after step" "$tmp/err2" || fail "mpirun SIGTERM: exit $rc, $(tail -5 "$tmp/err2")"
    [[ -n $(ls "$tmp/run2/checkpoints" 2>/dev/null) ]] || fail "mpirun SIGTERM: no checkpoint"
    echo "ok: $line; mpirun SIGTERM: $(grep -o 'stopped by SIGTERM after step [0-9]*' "$tmp/err2") (exit $rc)" ;;
  kill_storm)
    # One rank, then two at stage 3 (with the optimizer on "NVMe"): kill -9 at random moments
    # (during start-up and resume, steps and checkpoint writes; some exactly mid-save), each
    # followed by --resume; finally run to the end.
    storm() {  # storm NAME ROUNDS MAX_DELAY_MS LAUNCH... (the last word of LAUNCH is strata's args)
      local name=$1 rounds=$2 max_ms=$3; shift 3
      local out=$tmp/$name kills=0 mid_save=0
      for ((i = 0; i < rounds; i++)); do
        local env=()
        rnd 4
        if ((R == 0)); then  # die inside the next save, after the partitions, before the manifest
          local last; last=$(ls "$out/checkpoints" 2>/dev/null | grep -o '[0-9]*$' | sort -n | tail -1)
          env=(STRATA_TEST_KILL_DURING_SAVE=$(( (10#${last:-0}) + 3 )))
          mid_save=$((mid_save + 1))
        fi
        env "${env[@]}" "$@" --resume --out "$out" >/dev/null 2>>"$tmp/$name.log" &
        local pid=$! delay; rnd "$max_ms"; delay=$R
        sleep "$((delay / 1000)).$(printf '%03d' $((delay % 1000)))"
        if kill -0 $pid 2>/dev/null; then
          # One process: the run itself; under mpirun one rank, chosen at random.
          local victim=$pid kids; kids=($(pgrep -P $pid -f "strata train" || true))
          ((${#kids[@]})) && rnd ${#kids[@]} && victim=${kids[$R]}
          kill -9 $victim 2>/dev/null && kills=$((kills + 1))
        fi
        timeout 60 tail --pid=$pid -f /dev/null || { kill -9 $pid; fail "$name: a killed run did not end"; }
        wait $pid 2>/dev/null
      done
      "$@" --resume --out "$out" >/dev/null 2>>"$tmp/$name.log" || fail "$name: final resume failed: $(tail -3 "$tmp/$name.log")"
      same_log "$tmp/$name-ref" "$out"
      echo "ok: $name: $kills kills ($mid_save armed mid-save), $(wc -l <"$out/metrics.jsonl") steps logged once each, equal to the uninterrupted run"
    }
    RANDOM=${STRATA_STORM_SEED:-2026}
    rnd() { R=$(((RANDOM * 32768 + RANDOM) % $1)); }  # into R; bash's RANDOM alone repeats in its low bits
    one=("$bin" train --steps 120 --log-every 1 --seed 11 --save-every 3 --keep-checkpoints 2)
    "${one[@]}" --out "$tmp/one-ref" 2>/dev/null || fail "reference run failed"
    storm one 14 1200 "${one[@]}"
    mkdir -p "$tmp/nvme"
    two=("${mpi[@]}" -np 2 "$bin" train --steps 40 --log-every 1 --seed 11 --save-every 3 --micro-batch 4 --seq-len 64
         --zero-stage 3 --offload-optimizer nvme --nvme-path "$tmp/nvme")
    "${two[@]}" --out "$tmp/two-ref" 2>/dev/null || fail "2-rank reference run failed"
    storm two 5 4000 "${two[@]}" ;;
  *) fail "unknown case $case_name" ;;
esac
