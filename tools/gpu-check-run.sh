# The `run` half of tools/gpu-check.sh (sourced by it; uses its settings and helpers): on the
# GPU machine, unpack the pack, check the libraries, run the GPU tests, the equivalence runs
# and the bench suite, each under its own timeout, and write the results under $OUT.
# shellcheck shell=bash
# shellcheck disable=SC2154,SC2153  # the settings are gpu-check.sh's

# ======================================== run =============================================
step_names=() step_results=() step_counts=() step_rcs=() step_secs=()
failures=0
t0=$SECONDS

record() {  # name result counts rc seconds
  step_names+=("$1") step_results+=("$2") step_counts+=("$3") step_rcs+=("$4") step_secs+=("$5")
  [[ $2 == ok || $2 == skipped ]] || failures=$((failures + 1))
}
left() { echo $((BUDGET_S - (SECONDS - t0))); }
# A step's timeout: its own cap, but never past the budget less a reserve for what follows.
step_timeout() {  # cap reserve
  local t=$(($(left) - $2))
  ((t > $1)) && t=$1
  echo "$t"
}

# Runs "$@" under timeout, output to the log and to $WORK/step.log; sets rc and secs.
timed() {  # seconds command...
  local limit=$1
  shift
  local start=$SECONDS
  set +e
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$WORK/step.log"
  rc=${PIPESTATUS[0]}
  set -e
  secs=$((SECONDS - start))
  if ((rc == 124 || rc == 137)); then
    echo "gpu-check: timed out after ${limit}s"
    kill_leftovers
  fi
  return 0
}

# timeout kills its child's process group, but the suite starts each run (mpirun and its
# ranks) in a group of its own, which would run on. Ends every process running a program
# from the pack, by its id: only this script starts those.
kill_leftovers() {
  local p exe pids=()
  for p in /proc/[0-9]*; do
    exe=$(readlink "$p/exe" 2>/dev/null) || continue
    [[ $exe == "$ROOT"/bin/* || $exe == "$ROOT"/libexec/* ]] && pids+=("${p#/proc/}")
  done
  if ((${#pids[@]})); then
    say "ending ${#pids[@]} leftover process(es) of the pack: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
}

unpack() {
  local tarball=$repo/$PACK_DIR/$TARBALL
  [[ -f $tarball ]] || die "$PACK_DIR/$TARBALL not found: run '$script pack' here first, and carry [\"$PACK_DIR\"]"
  rm -rf "$ROOT"
  mkdir -p "$(dirname "$ROOT")"
  local tmp
  tmp=$(mktemp -d "$(dirname "$ROOT")/unpack.XXXXXX")
  if command -v xz >/dev/null; then
    xz -dc "$tarball" | tar -C "$tmp" -xf -
  else  # Python's lzma is always there, the xz tool not always
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$tarball" "$tmp"
  fi
  mv "$tmp/$TOP" "$ROOT"
  rmdir "$tmp"
  # Ignored data files go back where the runs expect them.
  if [[ -d $ROOT/data ]] && [[ -n $(ls -A "$ROOT/data") ]]; then cp -rp "$ROOT/data/." "$repo/"; fi
}

# The nvidia-* wheels' library folders (cuBLAS, cuDNN, NCCL, the CUDA runtime, nvJitLink),
# wherever this image's Python keeps them. Python runs with the caller's environment, not
# the pack's libraries.
wheel_lib_dirs() {
  local py roots=()
  for py in /opt/torch/.venv/bin/python3 python3; do
    command -v "$py" >/dev/null 2>&1 || continue
    # nvidia is a namespace package: __path__ lists its folder in every site-packages.
    mapfile -t roots < <(env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$py" -c \
      'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null || true)
    ((${#roots[@]})) && break
  done
  if ((${#roots[@]} == 0)); then
    mapfile -t roots < <(compgen -G '/opt/torch/.venv/lib/python3*/site-packages/nvidia' || true)
  fi
  ((${#roots[@]})) || return 0
  find "${roots[@]}" \( -name 'lib*.so' -o -name 'lib*.so.*' \) \( -type f -o -type l \) -printf '%h\n' 2>/dev/null | sort -u
}

# The highest GLIBCXX version a libstdc++ offers (empty if unreadable).
glibcxx_max() { { grep -ao 'GLIBCXX_3\.4\.[0-9]*' "$1" 2>/dev/null || true; } | sort -uV | tail -1; }

setup_env() {
  ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  local ld=$ROOT/lib sys_cxx ours theirs
  # libstdc++: the newer of the image's and the pack's (see is_cxx_runtime).
  sys_cxx=$({ /sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null || true; } |
    awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  ours=$(glibcxx_max "$ROOT/lib-cxx/libstdc++.so.6")
  theirs=
  if [[ -n $sys_cxx ]]; then theirs=$(glibcxx_max "$sys_cxx"); fi
  if [[ -n $theirs ]] && [[ $(printf '%s\n%s\n' "$ours" "$theirs" | sort -V | tail -1) == "$theirs" ]]; then
    say "libstdc++: the image's ($sys_cxx, up to $theirs; ours up to $ours)"
  else
    say "libstdc++: the pack's (up to $ours; the image's: ${theirs:-none readable})"
    ld=$ld:$ROOT/lib-cxx
  fi
  local d wheels=()
  mapfile -t wheels < <(wheel_lib_dirs)
  for d in "${wheels[@]}"; do ld=$ld:$d; done
  say "CUDA wheel library folders: ${#wheels[@]}"
  if ((${#wheels[@]})); then printf '  %s\n' "${wheels[@]}"; fi
  # The driver's libcuda; the toolkit's folder last, where an image has one.
  for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/cuda/lib64; do
    if [[ -d $d ]]; then ld=$ld:$d; fi
  done
  export LD_LIBRARY_PATH=$ld${ORIG_LD_LIBRARY_PATH:+:$ORIG_LD_LIBRARY_PATH}
  if [[ -d /usr/local/nvidia/bin ]]; then PATH=/usr/local/nvidia/bin:$PATH; fi
  export PATH=$ROOT/bin:$PATH

  # OpenMPI finds its plugins, help texts and defaults through its install dirs, which these
  # variables move into the pack; PMIx's plugins likewise.
  if [[ -d $ROOT/mpi ]]; then
    export OPAL_PREFIX=$ROOT/mpi OPAL_EXEC_PREFIX=$ROOT OPAL_BINDIR=$ROOT/bin OPAL_LIBDIR=$ROOT/lib
    export OPAL_PKGLIBDIR=$ROOT/mpi/lib/openmpi3 OPAL_DATAROOTDIR=$ROOT/mpi/share OPAL_DATADIR=$ROOT/mpi/share
    export OPAL_PKGDATADIR=$ROOT/mpi/share/openmpi OPAL_SYSCONFDIR=$ROOT/mpi/etc
    export OMPI_MCA_mca_base_component_path=$ROOT/mpi/lib/openmpi3
    export PMIX_MCA_mca_base_component_path=$ROOT/pmix/lib/pmix
    # Commands run as root there; no CMA between ranks in a VM (as the repo's MPI tests).
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
  fi
  if [[ -d $ROOT/fonts ]]; then
    cat >"$ROOT/fonts/fonts.conf" <<EOF
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir>$ROOT/fonts</dir>
  <cachedir>$WORK/fontconfig-cache</cachedir>
</fontconfig>
EOF
    export FONTCONFIG_FILE=$ROOT/fonts/fonts.conf
  fi
}

# Checks every packed ELF's resolution. Missing libraries fail; in strict mode (local) so
# does any non-glibc, non-CUDA library that resolves outside the pack.
check_libs() {
  local strict=$1 f name path bad=0 outside=0 n=0 plug_bad=0 out forbid
  local files=()
  mapfile -t files < <(find "$ROOT/bin" "$ROOT/libexec" -type f 2>/dev/null
    find "$ROOT/mpi" "$ROOT/pmix" -name '*.so' 2>/dev/null)
  for f in "${files[@]}"; do
    [[ $(head -c 4 "$f") == $'\x7fELF' ]] || continue  # the gnuplot wrapper is a script
    n=$((n + 1))
    # gnuplot sees lib-gnuplot (through its wrapper); nothing else may need it.
    forbid=$ROOT/lib-gnuplot
    if [[ $f == "$ROOT"/libexec/* ]]; then
      out=$(LD_LIBRARY_PATH=$ROOT/lib-gnuplot:$LD_LIBRARY_PATH ldd "$f" 2>&1 || true)
      forbid=/nonexistent
    else
      out=$(ldd "$f" 2>&1 || true)
    fi
    # 'not found' covers a missing library and a missing symbol version (too old a glibc).
    if grep -qE 'not found|too short|wrong ELF|error' <<<"$out"; then
      if [[ $f == "$ROOT"/bin/* || $f == "$ROOT"/libexec/* ]]; then
        say "FAIL ${f#"$ROOT"/}:"
        bad=1
      else
        say "warning: plugin ${f#"$ROOT"/} will not load:"
        plug_bad=$((plug_bad + 1))
      fi
      grep -E 'not found|too short|wrong ELF|error' <<<"$out" | sed 's/^/    /'
    fi
    while read -r name path; do
      [[ $path == not ]] && continue
      [[ $path == "$ROOT"/* && $path != "$forbid"/* ]] && continue
      is_glibc "$name" && continue
      is_cuda "$name" "$path" && continue
      is_cxx_runtime "$name" && continue  # the image's own by choice (setup_env)
      say "${f#"$ROOT"/}: $name from $path, not from the pack"
      outside=1
    done < <(awk '$2 == "=>" { print $1, $3 }' <<<"$out")
  done
  say "checked $n ELF files: $([[ $bad == 0 ]] && echo 'every binary resolves' || echo 'UNRESOLVED libraries above')," \
    "$plug_bad plugins with problems, $([[ $outside == 0 ]] && echo 'every non-glibc, non-CUDA library from the pack' || echo 'some libraries from outside the pack')"
  echo "--- ldd strata:"
  ldd "$ROOT/bin/strata" | sed 's/ (0x[0-9a-f]*)$//'
  local missing
  missing=$(ldd "$ROOT/bin/strata" | grep 'not found' || true)
  [[ -z $missing ]] || bad=1
  ((bad == 0)) || return 1
  if ((strict && outside)); then return 1; fi
  return 0
}

gtest_counts() {  # from a gtest run's output: "passed/failed/skipped"
  local p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\{0,1\}\..*/\1/p' "$1" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$1" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\{0,1\}, listed below.*/\1/p' "$1" | tail -1)
  echo "${p:-0}/${f:-0}/${s:-0}"
}

suite_counts() {  # from the suite's closing JSON line: "ok/failed/skipped (oom N)"
  local line k v=()
  line=$(grep '^{"bench":"suite"' "$1" | tail -1 || true)
  [[ -n $line ]] || { echo -; return; }
  for k in ok failed skipped out_of_memory; do
    v+=("$({ grep -o "\"$k\":[0-9]*" <<<"$line" || true; } | cut -d: -f2)")
  done
  echo "${v[0]:-?}/${v[1]:-?}/${v[2]:-?} (oom ${v[3]:-?})"
}

run_steps() {
  local strict=$1 rc=0 secs=0 t counts
  echo "=== strata GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${BUDGET_S}s"
  if [[ ${GPU_CHECK_UNPACKED:-0} != 1 ]]; then
    local s=$SECONDS
    unpack
    say "unpacked $PACK_DIR/$TARBALL into $ROOT in $((SECONDS - s))s"
  fi
  sed -n '1,4p' "$ROOT/MANIFEST"
  if [[ -n ${GPU_CHECK_MASKED:-} ]]; then
    # local: the system's copies are hidden; strata must now fail without the pack's.
    say "local: hid $GPU_CHECK_MASKED system libraries and folders (in a private mount namespace)"
    local proof
    proof=$(env LD_LIBRARY_PATH= "$ROOT/bin/strata" --help 2>&1 | head -1 || true)
    echo "  strata without the pack: $proof"
    if [[ $proof == *"error while loading shared libraries"* ]]; then record hidden-libs ok - 0 0
    else record hidden-libs FAILED - - 0; fi
  fi
  setup_env
  echo "--- machine: $(uname -m), $(nproc) cores, $(ldd --version 2>/dev/null | head -1)"
  if command -v nvidia-smi >/dev/null; then
    timeout 30 nvidia-smi -L || say "nvidia-smi -L failed"
    timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  else
    say "no nvidia-smi on PATH (no GPU here: the GPU tests will skip)"
  fi

  echo "=== libraries"
  local s=$SECONDS
  if check_libs "$strict"; then
    record libraries ok - 0 $((SECONDS - s))
  else
    record libraries FAILED - 1 $((SECONDS - s))
    say "FAIL: library resolution (above); the runs below will show the loader's errors"
  fi

  # The GPU tests. Their XML goes straight to $OUT when there is room under the 8-file cap
  # (log, summary and 3 bench files take 5), so a kill at the outer limit keeps it.
  local tests=() name
  for name in $GPU_TESTS; do
    if [[ -x $ROOT/bin/$name ]]; then tests+=("$name"); else say "skip $name: not in the pack"; fi
  done
  local xml_dir=$OUT
  if ((${#tests[@]} > 3)); then
    xml_dir=$WORK/xml
    mkdir -p "$xml_dir"
  fi
  for name in "${tests[@]}"; do
    echo "=== $name"
    t=$(step_timeout 120 60)
    if ((t < 10)); then record "$name" "no time" - - 0; continue; fi
    timed "$t" "$ROOT/bin/$name" --gtest_output="xml:$xml_dir/$name.xml"
    counts=$(gtest_counts "$WORK/step.log")
    if ((rc == 0)); then record "$name" ok "$counts" "$rc" "$secs"
    elif ((rc == 124 || rc == 137)); then record "$name" "timed out" "$counts" "$rc" "$secs"
    else record "$name" FAILED "$counts" "$rc" "$secs"; fi
  done
  if [[ $xml_dir != "$OUT" ]] && compgen -G "$xml_dir/*.xml" >/dev/null; then
    tar -C "$xml_dir" -czf "$OUT/gtest-xml.tar.gz" .
  fi

  # The packed MPI runtime before the suite leans on it: two ranks through mpirun, and one
  # rank alone (a singleton MPI_Init, which forks the packed orted), as the suite runs them.
  if [[ -x $ROOT/bin/mpirun ]]; then
    local np launch
    for np in 2 1; do
      echo "=== mpi: strata bench comm on $np rank(s), small messages"
      launch=()
      ((np > 1)) && launch=("$ROOT/bin/mpirun" --oversubscribe --bind-to none -np "$np")
      t=$(step_timeout 60 40)
      if ((t < 10)); then record "mpi-np$np" "no time" - - 0; continue; fi
      timed "$t" "${launch[@]}" "$ROOT/bin/strata" bench comm --min-bytes 1024 --max-bytes 65536 --iters 2 --warmup 1
      record "mpi-np$np" "$([[ $rc == 0 ]] && echo ok || echo FAILED)" - "$rc" "$secs"
    done
  fi

    # The stage/offload equivalence runs, cuda against cpu, through the packed strata and mpirun.
  local pair
  for pair in $EQUIVALENCE; do
    echo "=== equivalence ${pair%%:*} ${pair##*:}"
    t=$(step_timeout 90 200)
    if ((t < 20)); then record "equiv-$(basename "${pair%%:*}" .json)" "no time" - - 0; continue; fi
    timed "$t" env PATH="$ROOT/bin:$PATH" bash tests/cuda_equivalence.sh "$ROOT/bin/strata" "${pair%%:*}" "${pair##*:}"
    local res=FAILED
    ((rc == 0)) && res=ok
    ((rc == 77)) && res=skipped
    record "equiv-$(basename "${pair%%:*}" .json)-${pair##*:}" "$res" - "$rc" "$secs"
  done

  echo "=== strata bench suite ${BENCH_ARGS[*]}"
  if [[ ${GPU_CHECK_SKIP_BENCH:-0} == 1 ]]; then
    record bench-suite skipped - - 0
  else
    t=$(step_timeout 330 20)
    if ((t < 30)); then
      record bench-suite "no time" - - 0
    else
      local bdir=$WORK/bench
      local mpi=()
      [[ -x $ROOT/bin/mpirun ]] && mpi=(--mpirun "$ROOT/bin/mpirun")
      timed "$t" "$ROOT/bin/strata" bench suite "${BENCH_ARGS[@]}" --out "$bdir" "${mpi[@]}"
      counts=$(suite_counts "$WORK/step.log")
      if ((rc == 0)); then record bench-suite ok "${counts:--}" "$rc" "$secs"
      elif ((rc == 124 || rc == 137)); then record bench-suite "timed out" "${counts:--}" "$rc" "$secs"
            elif grep -q "no GPU is visible" "$WORK/step.log"; then record bench-suite skipped - "$rc" "$secs"  # local
      else record bench-suite FAILED "${counts:--}" "$rc" "$secs"; fi
      # results.json is rewritten after every run, so a timed-out suite still returns its part.
      local res
      res=$({ find "$bdir" -mindepth 1 -maxdepth 1 -type d 2>/dev/null || true; } | sort | tail -1)
      if [[ -n $res ]]; then
        [[ -f $res/results.json ]] && cp "$res/results.json" "$OUT/bench-results.json"
        [[ -f $res/results.md ]] && cp "$res/results.md" "$OUT/bench-results.md"
        # Everything small (plots, logs, run summaries), not the runs' checkpoints or NVMe files.
        (cd "$res" && find . -maxdepth 2 -type f -size -2M \( -name '*.json' -o -name '*.md' -o -name '*.png' \
          -o -name '*.log' -o -name '*.dat' -o -name '*.gp' \) -print0 | tar --null -czf "$OUT/bench-suite.tar.gz" -T -) ||
          say "warning: could not pack the suite's files from $res"
      fi
    fi
  fi

  summary | tee "$OUT/summary.txt"
  local n
  n=$(find "$OUT" -type f | wc -l)
  ((n <= 8)) || say "warning: $n files under \$OUT; the device tool returns at most 8"
  ((failures == 0))
}

summary() {
  echo
  echo "=== summary (elapsed $((SECONDS - t0))s of ${BUDGET_S}s)"
  printf '%-20s %-10s %-22s %-5s %s\n' step result "passed/failed/skipped" rc seconds
  local i
  for i in "${!step_names[@]}"; do
    printf '%-20s %-10s %-22s %-5s %s\n' "${step_names[$i]}" "${step_results[$i]}" "${step_counts[$i]}" \
      "${step_rcs[$i]}" "${step_secs[$i]}"
  done
  echo "(bench-suite counts: runs ok/failed/skipped by the plan)"
  if ((failures)); then echo "RESULT: $failures step(s) failed"; else echo "RESULT: all steps passed"; fi
}

run_mode() {  # strict
  [[ -n ${OUT:-} ]] || die "OUT is not set: run mode writes its results under \$OUT (the device tool sets it)"
  mkdir -p "$OUT"
  ROOT=${GPU_CHECK_ROOT:-/tmp/strata-gpu-pack}
  WORK=$(mktemp -d /tmp/strata-gpu-check.XXXXXX)
  local rc=0
  set +e
  (run_steps "$1") 2>&1 | tee -a "$OUT/gpu-check.log"
  rc=${PIPESTATUS[0]}
  set -e
  rm -rf "$WORK"
  return "$rc"
}

