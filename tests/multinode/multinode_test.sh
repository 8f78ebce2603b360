#!/usr/bin/env bash
# Multinode checks run by ctest (label multinode) across the test hosts (testhosts.sh):
#   multinode_test.sh BUILD_DIR CASE
#   equivalence  the ZeRO equivalence tests (stages 0-3) and hpZ, 4 ranks over 2 hosts
#   offload      an offload run (stage 3, optimizer and parameters in host RAM; stage 2 on
#                NVMe, each host its own --nvme-path) over 2 hosts: losses as on one host; a
#                rank failing at start-up (host 1's directory missing) stops the others at once
#   sigkill      SIGKILL of one rank on host 1: the job ends within 60 s, survivors name the
#                rank and host; --resume on 2 hosts and on 1 host: losses as uninterrupted
#   link_down    host 1's link cut: a timeout (--comm-timeout) reports the lost ranks; resume
# Exit 77 (skipped) where test hosts cannot be made (not root, no network namespaces).
set -u
build=$1; case_name=$2
here=$(cd "$(dirname "$0")" && pwd)
hosts="$here/testhosts.sh"
bin="$build/strata"
tmp=$(mktemp -d /tmp/strata-multinode.XXXXXX)
cleanup() {
  pkill -9 -f "$tmp" 2>/dev/null
  "$hosts" link-up 1 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null; then echo "skip: needs root and iproute2"; exit 77; fi
"$hosts" up 2 >"$tmp/up.log" 2>&1 || { echo "skip: cannot create test hosts: $(cat "$tmp/up.log")"; exit 77; }
printf '10.91.0.11 slots=2\n10.91.0.12 slots=2\n' >"$tmp/hosts2"
printf '10.91.0.11 slots=2\n' >"$tmp/hosts1"
# mpirun over the test hosts: ranks 0-1 on strata-h0, 2-3 on strata-h1.
across() {
  local hf=$1; shift
  "$hosts" mpirun --hostfile "$hf" --map-by ppr:2:node -x OMP_NUM_THREADS=1 -x STRATA_EXPECT_NODES=${STRATA_EXPECT_NODES:-} "$@"
}
# Per-step losses of a run's metrics (log every step).
losses() { grep -o '"loss":[^,]*' "$1/metrics.jsonl" | cut -d: -f2; }
# Losses of runs A and B agree (step by step, same count) within TOL.
same_losses() {
  python3 - "$1" "$2" "$3" "$tmp/cmp" <<'PY' || fail "losses of $1 and $2 differ: $(cat "$tmp/cmp")"
import json, sys
a, b, tol, report = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
def read(d):
    return {j["step"]: j["loss"] for j in map(json.loads, open(d + "/metrics.jsonl"))}
la, lb = read(a), read(b)
bad = [(s, la[s], lb.get(s)) for s in la if lb.get(s) is None or abs(la[s] - lb[s]) > tol]
if bad or len(la) != len(lb):
    open(report, "w").write(f"{len(la)} vs {len(lb)} steps; first differences {bad[:4]}")
    sys.exit(1)
print(f"ok: {len(la)} steps, largest difference {max(abs(la[s] - lb[s]) for s in la):.3g} (tolerance {tol})")
PY
}
# The PID of world rank R of the run whose --out is DIR.
rank_pid() {
  for p in $(pgrep -f -- "--out $2"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
# Ranks (not the launcher) of the run whose --out is DIR still running.
ranks_alive() {
  for p in $(pgrep -f -- "--out $1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q "^OMPI_COMM_WORLD_RANK=" && echo "$p"
  done
}
wait_for() { for _ in $(seq 1 "$2"); do [[ -e $1 ]] && return 0; sleep 0.1; done; return 1; }

train=(train --precision f32 --micro-batch 2 --seq-len 64 --log-every 1 --seed 5)
case $case_name in
  equivalence)
    STRATA_EXPECT_NODES=2 across "$tmp/hosts2" -np 4 "$build/tests/test_zero" \
      --gtest_filter='ZeroEquivalence.Stage*:ZeroEquivalence.WithGradAccumulation:ZeroHpz.*:ZeroTopology.*' \
      >"$tmp/log" 2>&1 || fail "ZeRO equivalence across hosts: $(grep -E 'Failure|FAILED|rror' "$tmp/log" | head -20)"
    grep -q "PASSED" "$tmp/log" || fail "no tests ran: $(tail "$tmp/log")"
    echo "ok: $(($(grep -c "\[       OK \]" "$tmp/log") / 4)) tests passed on 4 ranks over 2 hosts" ;;
  offload)
    mkdir -p "$tmp/nvme-strata-h0" "$tmp/nvme-$(hostname)"
    for cfg in "--zero-stage 3 --offload-optimizer cpu --offload-param cpu" \
               "--zero-stage 2 --offload-optimizer nvme --nvme-path $tmp/nvme-{host}"; do
      rm -rf "$tmp/one" "$tmp/two"
      # shellcheck disable=SC2086
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 4 -x OMP_NUM_THREADS=1 \
        "$bin" "${train[@]}" --steps 12 $cfg --out "$tmp/one" 2>"$tmp/err" || fail "one host: $cfg: $(cat "$tmp/err")"
      if [[ $cfg == *nvme* ]]; then  # each host's ranks use that host's directory: h1's is missing
        # shellcheck disable=SC2086
        across "$tmp/hosts2" -np 4 "$bin" "${train[@]}" --steps 12 $cfg --out "$tmp/two" >"$tmp/err" 2>&1 &&
          fail "ran without host 1's NVMe directory"
        grep -q "nvme-strata-h1" "$tmp/err" || fail "no error naming host 1's --nvme-path: $(cat "$tmp/err")"
        # ... and host 0's ranks stop at once, naming the failed rank (not after --comm-timeout).
        grep -q "lost rank [23] (host strata-h1): it stopped with an error" "$tmp/err" ||
          fail "host 0's ranks did not name the failed rank: $(cat "$tmp/err")"
        echo "ok: $(grep -m1 -o "strata train: .*nvme-strata-h1[^;]*" "$tmp/err" | head -c 200)"
        mkdir -p "$tmp/nvme-strata-h1"
      fi
      # shellcheck disable=SC2086
      across "$tmp/hosts2" -np 4 "$bin" "${train[@]}" --steps 12 $cfg --out "$tmp/two" --summary "$tmp/two.json" \
        2>"$tmp/err" || fail "two hosts: $cfg: $(cat "$tmp/err")"
      same_losses "$tmp/one" "$tmp/two" 1e-5
      python3 -c "import json,sys; j=json.load(open('$tmp/two.json')); assert j['nodes']==2 and j['inter_node_bytes_per_step']>0, j; print('ok:', '$cfg', 'nodes', j['nodes'], 'inter-node bytes/step', j['inter_node_bytes_per_step'], 'peaks', j['peak_bytes'])" || fail "summary"
    done ;;
  sigkill|link_down)
    args=("${train[@]}" --zero-stage 3 --steps 60 --save-every 10 --comm-timeout 10)
    across "$tmp/hosts2" -np 4 "$bin" "${args[@]}" --out "$tmp/ref" 2>"$tmp/err" || fail "reference: $(cat "$tmp/err")"
    across "$tmp/hosts2" -np 4 "$bin" "${args[@]}" --out "$tmp/run" >"$tmp/out" 2>&1 &
    job=$!
    wait_for "$tmp/run/checkpoints/step-00000010/manifest.json" 600 || fail "no checkpoint at step 10: $(cat "$tmp/out")"
    t0=$(date +%s)
    if [[ $case_name == sigkill ]]; then
      pid=$(rank_pid 3 "$tmp/run")
      [[ -n $pid ]] || fail "rank 3 not found"
      kill -9 "$pid"
      want="lost rank 3 (host strata-h1)"
    else
      "$hosts" link-down 1
      want="(host strata-h1): no heartbeat"
    fi
    # The job has ended when every rank has stopped (with a host cut off, mpirun itself may
    # wait minutes for that host's daemon: TCP gives up on it late; it is stopped here).
    for _ in $(seq 1 600); do
      kill -0 $job 2>/dev/null || break
      [[ -z $(ranks_alive "$tmp/run") ]] && break
      sleep 0.1
    done
    t1=$(date +%s)
    kill -0 $job 2>/dev/null && { launcher="mpirun stopped by the test"; kill -9 $job; } || launcher="mpirun exited"
    wait $job 2>/dev/null; rc=$?
    "$hosts" link-up 1
    [[ -e "$tmp/run/checkpoints/step-00000060" ]] && fail "the run finished before the failure"
    (( t1 - t0 <= 60 )) || fail "ranks still ran $((t1 - t0)) s after the failure (rc $rc): $(tail "$tmp/out")"
    grep -q -- "$want" "$tmp/out" || fail "survivors did not report '$want' (rc $rc): $(tail -20 "$tmp/out")"
    echo "ok: $case_name: every rank stopped within $((t1 - t0)) s ($launcher, rc $rc): $(grep -m1 -- "$want" "$tmp/out")"
    # Resume on the same 2 hosts, and (sigkill) on 1 host with 2 ranks.
    cp -r "$tmp/run" "$tmp/run1"
    across "$tmp/hosts2" -np 4 "$bin" "${args[@]}" --resume --out "$tmp/run" 2>"$tmp/err" ||
      fail "resume on 2 hosts: $(cat "$tmp/err")"
    grep -o "resumed from [^;]*" "$tmp/err" || fail "did not resume from a checkpoint: $(cat "$tmp/err")"
    same_losses "$tmp/ref" "$tmp/run" 1e-5
    if [[ $case_name == sigkill ]]; then
      across "$tmp/hosts1" -np 2 "$bin" "${args[@]}" --micro-batch 4 --resume --out "$tmp/run1" 2>"$tmp/err" ||
        fail "resume on 1 host: $(cat "$tmp/err")"
      grep -o "resumed from [^;]*" "$tmp/err" || fail "did not resume from a checkpoint: $(cat "$tmp/err")"
      same_losses "$tmp/ref" "$tmp/run1" 1e-4
    fi ;;
  *) fail "unknown case $case_name" ;;
esac
