#!/usr/bin/env bash
# Proves the README's two commands on a bare Debian 12, as a new user meets them:
#   1. debootstrap --variant=minbase bookworm into a directory that is a mount point of its
#      own (so `ip netns add` works inside, for the multinode tests);
#   2. copy the checkout in (tracked files plus untracked, non-ignored ones: what a clone of
#      the working tree would hold; no build/);
#   3. run each command of the README's first code block there, as root, in a chroot with a
#      clean environment, in order; the log of each goes to DIR/logs/;
#   4. fail if a command fails, or if a test was skipped that is not in the allowed list
#      (only tests that need a GPU may skip on a machine without one, those of kernels for
#      CPU features this machine lacks, and those of the optional benchmark peers).
# The bare system is built once and kept as a tarball (DIR/base.tar), so a rerun starts from
# the same bare system in about a minute; every run unpacks it afresh.
#
#   tools/fresh-machine-check.sh [--dir DIR] [--keep] [--only N] [--rebuild-base]
#     --dir DIR        where the bare system goes (default /var/tmp/strata-fresh)
#     --keep           keep the unpacked system afterwards (default: removed)
#     --only N         run only the README's N-th command (1: train, 2: tests)
#     --rebuild-base   debootstrap again instead of reusing DIR/base.tar
# Needs root and network access to the Debian mirror. A run takes tens of minutes.
# Do not run it while the host runs the multinode tests: both use the same test hosts.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=/var/tmp/strata-fresh keep=0 only=0 rebuild=0
while (($#)); do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --only) only=$2; shift 2 ;;
    --rebuild-base) rebuild=1; shift ;;
    -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "fresh-machine-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "fresh-machine-check: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }

# Mounts made below die with this private mount namespace, whatever way the script ends.
if [[ -z ${STRATA_FRESH_NS:-} ]]; then
  export STRATA_FRESH_NS=1
  exec unshare --mount --propagation private "$0" --dir "$dir" $( ((keep)) && echo --keep) --only "$only" \
    $( ((rebuild)) && echo --rebuild-base)
fi

say() { echo "fresh-machine-check: $*"; }
root=$dir/root logs=$dir/logs
mkdir -p "$dir" "$logs"

# The README's two commands: the first fenced sh block, one command a line.
mapfile -t commands < <(awk '/^```sh$/ {on = 1; next} on && /^```/ {exit} on && NF' "$repo/README.md")
((${#commands[@]} == 2)) || { say "README's first sh block has ${#commands[@]} commands, expected 2"; exit 1; }

if ((rebuild)) || [[ ! -s $dir/base.tar ]]; then
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  rm -rf "$dir/base"
  say "debootstrap --variant=minbase bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$dir/base" "$mirror" >"$logs/debootstrap.log" 2>&1 ||
    { say "debootstrap failed: see $logs/debootstrap.log"; tail -5 "$logs/debootstrap.log"; exit 1; }
  tar -C "$dir/base" -cf "$dir/base.tar" .
  rm -rf "$dir/base"
fi

rm -rf "$root"
mkdir -p "$root"
mount --bind "$root" "$root"  # its root a mount point: `ip netns` bind-mounts under it
tar -C "$root" -xf "$dir/base.tar"
# The network's settings, as an installed machine has them: the resolver, and the host's own
# name in /etc/hosts (debootstrap writes neither; without the name, every lookup of it, as
# OpenMPI makes at each mpirun, waits for the resolver's timeout).
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/hosts "$root/etc/hosts"
[[ -f /etc/hostname ]] && cp /etc/hostname "$root/etc/hostname"
# Where this host reaches PyPI through a TLS-inspecting egress proxy (its pip.conf names the
# CA bundle that trusts it), the bare system gets the same trust, as it gets resolv.conf: the
# network's setting, not an install step (a machine with direct access needs neither).
if [[ -f /etc/pip.conf ]] && grep -q '^cert' /etc/pip.conf; then
  cp "$(sed -n 's/^cert *= *//p' /etc/pip.conf | head -1)" "$root/etc/host-network-ca.crt"
  printf '[global]\ncert = /etc/host-network-ca.crt\n' >"$root/etc/pip.conf"
fi
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mkdir -p "$root/root/strata"
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
  tar --null -T - --ignore-failed-read -cf - | tar -C "$root/root/strata" -xf -)
say "bare Debian $(cat "$root/etc/debian_version") in $root; checkout copied to /root/strata"
say "/usr/bin/python3 $([[ -e $root/usr/bin/python3 ]] && echo present || echo absent), gcc $([[ -e $root/usr/bin/gcc ]] && echo present || echo absent)"

in_chroot() {  # a login-like root shell with nothing of this machine's environment
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "cd /root/strata && $1"
}

status=0
for i in "${!commands[@]}"; do
  n=$((i + 1))
  ((only == 0 || only == n)) || continue
  cmd=${commands[$i]}
  say "command $n: $cmd"
  start=$(date +%s)
  if in_chroot "$cmd" >"$logs/command-$n.log" 2>&1; then rc=0; else rc=$?; fi
  say "command $n exited $rc after $(($(date +%s) - start)) s (log: $logs/command-$n.log)"
  tail -4 "$logs/command-$n.log" | sed 's/^/    /'
  ((rc == 0)) || status=1
  if [[ $cmd == *ctest* ]]; then
    # Tests that may skip on a bare machine: those that need a GPU, and the kernels for CPU
    # features this machine lacks (AMX, AVX512-BF16, AVX-512: each says so in its log). Any
    # other skip means a prerequisite setup.sh does not install.
    cpu_features='GemmAmx\.|GemmBf16\.|CpuAdamIsa\.|RowKernels\..*/avx512|HostAllocations\.OneDnnMatmul'
    skipped=$(grep -E '\*\*\*Skipped|Not Run' "$logs/command-$n.log" | grep -v -E 'Cuda|cuda' || true)
    if [[ -n $skipped ]] && grep -q -E "$cpu_features" <<<"$skipped"; then
      say "tests skipped for CPU features this machine lacks (allowed):"
      grep -E "$cpu_features" <<<"$skipped" | sed 's/^/    /'
      skipped=$(grep -v -E "$cpu_features" <<<"$skipped" || true)
    fi
    # The benchmarks' peers come from the optional tools/setup-peers.sh, never from setup.sh.
    peers='cli\.bench_model_torch_peer|cli\.bench_adam_deepspeed'
    if [[ -n $skipped ]] && grep -q -E "$peers" <<<"$skipped"; then
      say "tests skipped for want of the optional benchmark peers, tools/setup-peers.sh (allowed):"
      grep -E "$peers" <<<"$skipped" | sed 's/^/    /'
      skipped=$(grep -v -E "$peers" <<<"$skipped" || true)
    fi
    if [[ -n $skipped ]]; then
      say "tests skipped on the bare machine (a missing prerequisite?):"
      echo "$skipped" | sed 's/^/    /'
      status=1
    fi
    grep -E 'tests passed|tests failed' "$logs/command-$n.log" | sed 's/^/    /' || true
  fi
done
# Leave no test hosts or mounts behind (the hosts are this machine's network namespaces).
in_chroot "bash tests/multinode/testhosts.sh down" >/dev/null 2>&1 || true
umount -R "$root" 2>/dev/null || true
((keep)) || rm -rf "$root"
say "$( ((status == 0)) && echo PASSED || echo FAILED): logs in $logs"
exit $status
