#!/usr/bin/env bash
# Runs a build made on a Debian 12 machine on a remote GPU machine (its own Ubuntu-like
# image) that has CUDA's libraries only as Python wheels and none of Debian's
# (oneDNN, liburing, OpenMPI, sentencepiece, xxHash, gnuplot, ...).
#
#   tools/gpu-check.sh pack [BUILD_DIR]   here: binaries + the libraries they need -> .gpu-pack/
#   tools/gpu-check.sh run                there (repo root, $OUT set): unpack, check, test, bench
#   tools/gpu-check.sh local [BUILD_DIR]  here: `run` against the pack (packs first if there is
#                                         none), with the system's copies of the packed
#                                         libraries hidden, to prove the pack is complete
#
# The device tool sends the working tree plus the carried, ignored .gpu-pack/ (64 MiB in all)
# and returns at most 8 files written under $OUT, so `run` writes exactly these there:
#   gpu-check.log  everything printed        summary.txt   the table at the end
#   <test>.xml     each GPU test's results   bench-results.json / .md, bench-suite.tar.gz
# `run` stays inside BUDGET_S (default 450 s, under the device tool's limit per command),
# gives each step its own timeout, goes on after a failed step and exits non-zero if any
# step failed. Environment knobs: GPU_TESTS, GPU_CHECK_BUDGET_S, GPU_CHECK_ROOT,
# GPU_CHECK_BENCH_ARGS, GPU_CHECK_SKIP_BENCH=1, GPU_CHECK_NO_MASK=1 (local: do not hide the
# system libraries).
set -euo pipefail

# --- What travels ------------------------------------------------------------------------
# GPU test binaries (under BUILD_DIR/tests); a name the build lacks is skipped with a note,
# so the list may name binaries this build does not make.
GPU_TESTS=${GPU_TESTS:-"test_cuda_parity test_backend test_kernel_math test_kernel_math_attention"}
# Ignored files (repo-relative) the GPU runs read. Tracked and untracked-not-ignored files
# travel with the working tree anyway; only ignored ones need packing. None by default:
# test_cuda_parity makes its data, and the bench suite reads the tracked configs/bench.
PACK_DATA=${PACK_DATA:-""}
# OpenMPI (mpirun, orted, the MCA plugins, PMIx): the suite runs `strata train` under mpirun
# for more than one rank, and strata itself starts MPI in every run.
PACK_MPI=${PACK_MPI:-1}
# gnuplot with pngcairo: `strata bench suite` refuses to start without it (its PNG plots).
PACK_GNUPLOT=${PACK_GNUPLOT:-1}
# The suite's quick section on the GPU (GPU_CHECK_BENCH_ARGS replaces these). --run-timeout
# keeps one stuck run from eating the suite's share of the budget.
read -r -a BENCH_ARGS <<<"${GPU_CHECK_BENCH_ARGS:---quick --device cuda --run-timeout 120}"
# The ZeRO and offload equivalence with --device cuda (tests/cuda_equivalence.sh): "model precision" pairs.
EQUIVALENCE=${GPU_CHECK_EQUIVALENCE:-"configs/gpt2-tiny-bytes.json:bf16 configs/llama-tiny-bytes.json:f32"}

BUDGET_S=${GPU_CHECK_BUDGET_S:-450}
PACK_DIR=.gpu-pack
TARBALL=strata-gpu-pack.tar.xz
TOP=strata-gpu-pack  # the tarball's one top-level directory
# An over-size pack fails the device call as a whole; leave room for the working tree.
MAX_PACK_MIB=56

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
script=tools/gpu-check.sh

say() { printf 'gpu-check: %s\n' "$*"; }
die() { printf 'gpu-check: error: %s\n' "$*" >&2; exit 1; }

# --- Which libraries the GPU machine has ----------------------------------------------------
# glibc's own libraries come with every image; copying them would mix two glibcs. An image
# whose glibc is older than Debian 12's 2.36 shows in `run`'s library check as "version
# `GLIBC_2.xx' not found".
is_glibc() {
  [[ $1 =~ ^(linux-vdso\.so|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libnsl\.so|libBrokenLocale\.so|libthread_db\.so|libnss_) ]]
}
# CUDA's libraries come there from the driver (/usr/local/nvidia) and the nvidia-* wheels;
# the toolkit's copies here would not match that driver.
is_cuda() {
  [[ $1 =~ ^lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|nccl|nvJitLink|nvrtc[a-z_-]*|cufft|cufftw|curand|cusolver|cusparse|cusparseLt|cupti|nvToolsExt|nvidia-ml|nvshmem[a-z_]*|cufile[a-z_]*)\.so ]] ||
    [[ ${2:-} == /usr/local/cuda* || ${2:-} == /usr/local/nvidia/* || ${2:-} == */site-packages/nvidia/* ]]
}
# OpenMPI plugins for fabrics a single VM has none of (UCX, libfabric, verbs, PSM, netlink):
# their libraries would double the pack, and OpenMPI skips a plugin that is absent.
is_fabric_lib() {
  [[ $1 =~ ^lib(ucp|uct|ucs|ucm|fabric|efa|ibverbs|rdmacm|psm_infinipath|psm2|infinipath|nl-3|nl-route-3)\.so ]]
}
# libstdc++ and libgcc_s travel in lib-cxx/: `run` uses them only where the image's own are
# older (a newer libstdc++ serves old binaries, the reverse fails), so the CUDA wheels'
# libraries keep the image's libstdc++ whenever it is new enough.
is_cxx_runtime() { [[ $1 =~ ^(libstdc\+\+\.so|libgcc_s\.so) ]]; }

# An OpenMPI plugin that needs no fabric library (is_fabric_lib).
plugin_wanted() {
  local name path
  while read -r name path; do
    if is_fabric_lib "$name"; then return 1; fi
  done < <(ldd_pairs "$1")
  return 0
}

# "name path" for each library ldd resolves for ELF file $1 ("name not" when not found).
ldd_pairs() { ldd "$1" 2>/dev/null | awk '$2 == "=>" { print $1, $3 }'; }

# ======================================== pack ============================================
pack_mode() {
  local build=${1:-build}
  [[ -x $build/strata ]] || die "$build/strata not found: build first (tools/setup.sh), or name the build dir"
  command -v xz >/dev/null || die "xz not found (apt-get install xz-utils)"
  local stage
  PACK_TMP=$(mktemp -d /tmp/strata-gpu-pack.XXXXXX)
  trap 'rm -rf "$PACK_TMP"' EXIT
  local tmp=$PACK_TMP
  stage=$tmp/$TOP
  mkdir -p "$stage"/{bin,lib,lib-cxx,data}
  local manifest=$stage/MANIFEST
  {
    echo "# strata GPU pack: made by $script pack"
    echo "created $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release))"
    echo "git $(git rev-parse HEAD 2>/dev/null || echo none), $(git status --porcelain 2>/dev/null | wc -l) changed or untracked paths"
    echo "build $(cd "$build" && pwd)"
  } >"$manifest"

  # Binaries: strata and the GPU tests.
  local elves=() gp_elves=() t
  cp -p "$build/strata" "$stage/bin/"
  echo "bin strata $(cd "$build" && pwd)/strata" >>"$manifest"
  elves+=("$stage/bin/strata")
  local tests_found=0
  for t in $GPU_TESTS; do
    if [[ -x $build/tests/$t ]]; then
      cp -p "$build/tests/$t" "$stage/bin/"
      echo "bin $t $(cd "$build/tests" && pwd)/$t" >>"$manifest"
      elves+=("$stage/bin/$t")
      tests_found=$((tests_found + 1))
    else
      say "skip $t: $build/tests/$t is not built"
    fi
  done
  ((tests_found)) || say "warning: none of the GPU tests ($GPU_TESTS) is built (configure with CUDA)"

  if ((PACK_MPI)); then
    local ompi=/usr/lib/x86_64-linux-gnu/openmpi pmix=/usr/lib/x86_64-linux-gnu/pmix2
    [[ -d $ompi/lib/openmpi3 ]] || die "OpenMPI's plugins not found in $ompi/lib/openmpi3 (PACK_MPI=0 to leave MPI out)"
    # mpirun is orterun; orted is what a singleton MPI_Init (one-rank runs) forks.
    cp -pL /usr/bin/orterun /usr/bin/orted "$stage/bin/"
    ln -s orterun "$stage/bin/mpirun"
    elves+=("$stage/bin/orterun" "$stage/bin/orted")
    mkdir -p "$stage/mpi/lib/openmpi3" "$stage/mpi/share" "$stage/mpi/etc" "$stage/pmix/lib/pmix"
    local so skipped=()
    for so in "$ompi"/lib/openmpi3/*.so; do
      if plugin_wanted "$so"; then
        cp -p "$so" "$stage/mpi/lib/openmpi3/"
        elves+=("$stage/mpi/lib/openmpi3/${so##*/}")
      else
        skipped+=("${so##*/}")
      fi
    done
    say "OpenMPI: $(find "$stage/mpi/lib/openmpi3" -name '*.so' | wc -l) plugins packed, ${#skipped[@]} fabric plugins left out (${skipped[*]})"
    cp -rpL /usr/share/openmpi "$stage/mpi/share/"  # help texts, amca parameter sets
    cp -pL /etc/openmpi/* "$stage/mpi/etc/"         # Debian's defaults (no UCX/OFI)
    for so in "$pmix"/lib/pmix/*.so; do
      cp -p "$so" "$stage/pmix/lib/pmix/"
      elves+=("$stage/pmix/lib/pmix/${so##*/}")
    done
    {
      echo "mask $ompi/lib/openmpi3"
      echo "mask $pmix/lib/pmix"
      echo "mask /usr/share/openmpi"
      echo "mask /etc/openmpi"
      echo "mask $(readlink -f /usr/bin/orterun)"
      echo "mask $(readlink -f /usr/bin/orted)"
    } >>"$manifest"
  fi

  if ((PACK_GNUPLOT)); then
    local gp
    gp=$(readlink -f "$(command -v gnuplot)") || die "gnuplot not found (apt-get install gnuplot-nox, or PACK_GNUPLOT=0)"
    # gnuplot's own libraries (cairo, pango, glib, image codecs, libselinux, pcre2...) go in
    # lib-gnuplot/, on the path of gnuplot alone: on the global LD_LIBRARY_PATH, these older
    # Debian copies would shadow the image's own for its tools (sed, grep, tar).
    mkdir -p "$stage/libexec" "$stage/lib-gnuplot"
    cp -p "$gp" "$stage/libexec/gnuplot"
    gp_elves+=("$stage/libexec/gnuplot")
    cat >"$stage/bin/gnuplot" <<'EOF'
#!/bin/sh
# strata GPU pack: the packed gnuplot with its own libraries first (tools/gpu-check.sh).
here=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH=$here/lib-gnuplot${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$here/libexec/gnuplot" "$@"
EOF
    chmod +x "$stage/bin/gnuplot"
    # pngcairo draws text through fontconfig: one font and a config written at run time,
    # since the image may have neither.
    mkdir -p "$stage/fonts"
    cp -p /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf /usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf "$stage/fonts/"
    {
      echo "mask $gp"
      echo "mask /usr/share/fonts"
      echo "mask /etc/fonts"
    } >>"$manifest"
  fi

  # Every library any of them loads, but glibc's and CUDA's (ldd lists the whole closure):
  # strata's, the tests' and MPI's in lib/, then what gnuplot needs beyond those in
  # lib-gnuplot/, libstdc++ and libgcc_s in lib-cxx/.
  local f name path dest missing=0
  for f in "${elves[@]}" "${gp_elves[@]}"; do
    while read -r name path; do
      if [[ $path == not ]]; then
        say "error: ${f#"$stage"/} needs $name, which is not found here"
        missing=1
        continue
      fi
      is_glibc "$name" && continue
      is_cuda "$name" "$path" && continue
      compgen -G "$stage/lib*/$name" >/dev/null && continue
      dest=lib
      [[ $f == "$stage"/libexec/* ]] && dest=lib-gnuplot
      is_cxx_runtime "$name" && dest=lib-cxx
      cp -L "$path" "$stage/$dest/$name"
      echo "lib $name $path" >>"$manifest"
    done < <(ldd_pairs "$f")
  done
  ((missing == 0)) || die "the build's own library resolution is broken here; fix that first"

  # Ignored data the GPU runs need (PACK_DATA); the rest of the tree travels by itself.
  local d
  for d in $PACK_DATA; do
    if [[ ! -e $d ]]; then
      say "warning: PACK_DATA entry $d does not exist"
    elif git check-ignore -q "$d"; then
      mkdir -p "$stage/data/$(dirname "$d")"
      cp -rp "$d" "$stage/data/$d"
      echo "data $d" >>"$manifest"
    else
      say "$d is not ignored: it travels with the working tree, not packed"
    fi
  done

  say "$(find "$stage/bin" "$stage/libexec" -type f 2>/dev/null | wc -l) programs, $(find "$stage"/lib* -maxdepth 1 -type f | wc -l) libraries, $(du -sh "$stage" | cut -f1) unpacked"
  grep '^lib ' "$manifest" | awk '{print $2}' | tr '\n' ' ' | fold -s -w 100 | sed 's/^/  /'
  echo

  # The pack goes in the repo root (the device tool carries only paths inside it), kept out
  # of git through info/exclude so it can never be committed.
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qxF "/$PACK_DIR/" "$exclude" 2>/dev/null || echo "/$PACK_DIR/" >>"$exclude"
  rm -rf "$PACK_DIR"
  mkdir -p "$PACK_DIR"
  say "compressing (xz -T2 -6)..."
  tar -C "$tmp" -cf - "$TOP" | xz -T2 -6 >"$PACK_DIR/$TARBALL"
  cp "$manifest" "$PACK_DIR/MANIFEST"

  local bytes tree_bytes
  bytes=$(stat -c %s "$PACK_DIR/$TARBALL")
  # What else travels: tracked and untracked-not-ignored files.
  tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  say "$PACK_DIR/$TARBALL: $(awk -v b="$bytes" 'BEGIN {printf "%.1f MiB", b / 1048576}');" \
    "working tree $(awk -v b="$tree_bytes" 'BEGIN {printf "%.1f MiB", b / 1048576}'); device limit 64 MiB for both"
  ((bytes <= MAX_PACK_MIB * 1048576)) || die "the pack is over $MAX_PACK_MIB MiB: leave something out (PACK_GNUPLOT=0?)"
  ((bytes + tree_bytes <= 63 * 1048576)) || die "pack + working tree exceed what the device tool carries (64 MiB)"
  git check-ignore -q "$script" && say "warning: $script is ignored, so it will not travel"
  cat <<EOF

Next, the device tool's run (one call; the script stays under $BUDGET_S s of its own):
  run(command="bash $script run", carry=["$PACK_DIR"], timeout_s=560)
i.e. command: bash $script run
     carry:   ["$PACK_DIR"]
Results come back under the call's files: gpu-check.log, summary.txt, <test>.xml, bench-results.*
EOF
}

# ======================================== run =============================================
# In tools/gpu-check-run.sh (unpack, library check, tests, equivalence, bench, summary).
# shellcheck source=tools/gpu-check-run.sh
source "$repo/tools/gpu-check-run.sh"

# ======================================== local ===========================================
# Hides, in a private mount namespace, the system's copy of every packed library and
# OpenMPI's and gnuplot's own folders, so anything the pack lacks fails here as it would on
# the GPU machine. Everything run inside finds the pack through LD_LIBRARY_PATH.
mask_and_run() {
  local what n=0 kind path
  while read -r kind _ path; do
    [[ $kind == lib && -e $path ]] || continue
    mount --bind /dev/null "$(readlink -f "$path")" && n=$((n + 1))
  done <"$ROOT/MANIFEST"
  while read -r kind what; do
    [[ $kind == mask && -e $what ]] || continue
    if [[ -d $what ]]; then mount -t tmpfs none "$what"; else mount --bind /dev/null "$what"; fi
    n=$((n + 1))
  done <"$ROOT/MANIFEST"
  export GPU_CHECK_MASKED=$n
  GPU_CHECK_UNPACKED=1 run_mode 1
}

local_mode() {
  local build=${1:-build}
  [[ -f $PACK_DIR/$TARBALL ]] || pack_mode "$build"
  export OUT=${OUT:-/tmp/gpucheck-out}
  # $OUT starts empty on the device; do the same, but only for the default folder.
  [[ $OUT == /tmp/gpucheck-out ]] && rm -rf "$OUT"
  mkdir -p "$OUT"
  export GPU_CHECK_ROOT=${GPU_CHECK_ROOT:-/tmp/strata-gpu-pack-local}
  ROOT=$GPU_CHECK_ROOT
  unpack
  if [[ ${GPU_CHECK_NO_MASK:-0} != 1 && $(id -u) == 0 ]] && unshare -m --propagation private true 2>/dev/null; then
    # The packed libraries first from the start: hiding libselinux or libtinfo would
    # otherwise break mount, grep and bash themselves. Not lib-cxx: `run` picks that
    # itself. check_libs still fails any program but gnuplot that takes from lib-gnuplot.
    exec unshare -m --propagation private env LD_LIBRARY_PATH="$ROOT/lib:$ROOT/lib-gnuplot" \
      GPU_CHECK_ROOT="$ROOT" OUT="$OUT" bash "$repo/$script" _masked
  fi
  say "not hiding the system's libraries (needs root and unshare); checking the pack's contents only"
  GPU_CHECK_UNPACKED=1 run_mode 1
}

case ${1:-} in
  pack) pack_mode "${2:-build}" ;;
  run) run_mode 0 ;;
  local) local_mode "${2:-build}" ;;
  _masked) ROOT=$GPU_CHECK_ROOT; mask_and_run ;;
  -h | --help | "") sed -n '2,20p' "$0" ;;
  *) die "unknown mode '$1' (pack, run or local)" ;;
esac
