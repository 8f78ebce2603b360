# Sourced by tools/setup.sh and tools/setup-peers.sh (as root):
#   apt_install_missing WHO PACKAGE...
# installs the Debian packages among PACKAGE... that are not installed yet, quietly, saying which.
apt_install_missing() {
  local who=$1 p
  shift
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  echo "$who: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
