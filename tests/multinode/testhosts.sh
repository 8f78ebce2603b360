#!/usr/bin/env bash
# The multinode tests' hosts: network namespaces joined by veth pairs to a bridge, each host
# with its own address and host name, and an rsh agent for mpirun that enters them.
#   testhosts.sh up N       create hosts strata-h0..h(N-1) at 10.91.0.11.. (idempotent)
#   testhosts.sh down       remove them
#   testhosts.sh mpirun ... mpirun across the hosts (the arguments after are mpirun's)
#   testhosts.sh link-down H / link-up H   cut / restore host H's link
# Needs root and iproute2; only the hosts' own addresses (10.91.0.0/24) carry MPI traffic.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=${STRATA_TESTHOSTS_PREFIX:-strata-h}
bridge=${STRATA_TESTHOSTS_BRIDGE:-strata-br0}
net=10.91.0
addr() { echo "$net.$((11 + $1))"; }

up() {
  local n=$1
  ip link show "$bridge" >/dev/null 2>&1 || {
    ip link add "$bridge" type bridge
    ip addr add "$net.1/24" dev "$bridge"
    ip link set "$bridge" up
  }
  for ((i = 0; i < n; i++)); do
    local ns=$prefix$i
    [[ -e /var/run/netns/$ns ]] && continue
    ip netns add "$ns"
    ip link add "v-$ns" type veth peer name eth0 netns "$ns"
    ip link set "v-$ns" master "$bridge" up
    ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
}

down() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^$prefix" || true); do
    ip link del "v-$ns" 2>/dev/null || true
    ip netns del "$ns"
  done
  ip link del "$bridge" 2>/dev/null || true
}

# Restores host H's link and waits until it forwards again: neighbour entries that failed
# while it was down are flushed (else the first connections after it fail).
link_up() {
  local ns=$prefix$1
  ip link set "v-$ns" up
  ip -n "$ns" neigh flush all 2>/dev/null || true
  ip neigh flush dev "$bridge" 2>/dev/null || true
  for _ in $(seq 1 100); do
    ip -n "$ns" link show eth0 | grep -q "state UP" && ip link show "v-$ns" | grep -q "state UP" && break
    sleep 0.1
  done
  sleep 1
}

case ${1:-} in
  up) up "${2:?how many hosts}" ;;
  down) down ;;
  link-down) ip link set "v-$prefix$2" down ;;
  link-up) link_up "$2" ;;
  mpirun)
    shift
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    # Keepalives on mpirun's own connections: a host that vanishes is noticed in ~11 s, not
    # the default 8 min, so mpirun ends once the ranks' peer watch has stopped the survivors.
    exec mpirun --mca plm_rsh_agent "$here/ns-rsh" --mca btl tcp,self,vader \
      --mca btl_tcp_if_include "$net.0/24" --mca oob_tcp_if_include "$net.0/24" \
      --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 "$@" ;;
  *) echo "usage: $0 up N | down | mpirun ARGS... | link-down H | link-up H" >&2; exit 2 ;;
esac
