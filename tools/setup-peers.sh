#!/usr/bin/env bash
# Optional: installs the peers `strata bench` measures Strata against, as a user running them
# today would have them. Separate from setup.sh: nothing in the build or the tests needs it.
#   tools/setup-peers.sh [DIR]          DIR: $STRATA_PEERS, else /opt/strata-peers
# Installs, from PyPI:
#   DIR/venv                 PyTorch 2.x (the current release unless STRATA_PEERS_TORCH names one,
#                            e.g. "torch==2.15.0"); `strata bench model --peer torch` runs it
#   DIR/deepspeed-VERSION    DeepSpeed's source (its sdist, DeepSpeed's latest release unless
#                            STRATA_PEERS_DEEPSPEED names one, e.g. "0.19.8")
#   DIR/ds_cpu_adam_bench    DeepSpeed's CPU Adam built into a timing harness (bench/peers/),
#                            which `strata bench adam` runs
# and records what it installed in DIR/peers.json. Needs root for apt-get (python3-venv,
# python3-dev and g++, which torch.compile's CPU code generation also needs) and PyPI.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-${STRATA_PEERS:-/opt/strata-peers}}

source "$here/tools/apt-missing.sh"
apt_install_missing setup-peers python3-venv python3-dev g++

mkdir -p "$dir"
py=$dir/venv/bin/python
if ! "$py" -c "import torch, numpy" 2>/dev/null; then
  echo "setup-peers: installing ${STRATA_PEERS_TORCH:-torch} into $dir/venv (from PyPI)"
  /usr/bin/python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --disable-pip-version-check "${STRATA_PEERS_TORCH:-torch}" numpy
fi
torch_version=$("$py" -c 'import torch; print(torch.__version__)')
case $torch_version in
  2.*) ;;
  *) echo "setup-peers: $dir/venv has torch $torch_version; the peer is PyTorch 2.x" >&2; exit 1 ;;
esac

ds_version=${STRATA_PEERS_DEEPSPEED:-$("$py" - <<'PY'
import json, urllib.request
print(json.load(urllib.request.urlopen("https://pypi.org/pypi/deepspeed/json", timeout=60))["info"]["version"])
PY
)}
src=$dir/deepspeed-$ds_version
if [[ ! -f $src/csrc/adam/cpu_adam_impl.cpp ]]; then
  echo "setup-peers: downloading DeepSpeed $ds_version's source (PyPI sdist)"
  rm -rf "$dir/sdist" "$src"
  "$dir/venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
    "deepspeed==$ds_version" -d "$dir/sdist"
  tar -xzf "$dir/sdist/deepspeed-$ds_version.tar.gz" -C "$dir"
fi
PYTHON=$py "$here/bench/peers/build_ds_cpu_adam.sh" "$src" "$dir/ds_cpu_adam_bench"

"$py" - "$dir" "$ds_version" <<'PY'
import json, sys, torch
d, ds = sys.argv[1], sys.argv[2]
json.dump({"torch": torch.__version__, "python": f"{d}/venv/bin/python", "deepspeed": ds,
           "deepspeed_source": f"{d}/deepspeed-{ds} (PyPI sdist)", "ds_cpu_adam_bench": f"{d}/ds_cpu_adam_bench"},
          open(f"{d}/peers.json", "w"), indent=1)
PY
echo "setup-peers: torch $torch_version in $dir/venv, DeepSpeed $ds_version's CPU Adam in $dir/ds_cpu_adam_bench"
