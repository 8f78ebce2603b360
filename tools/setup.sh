#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine (as root) and builds Strata (Release) into build/.
# Idempotent: installs only missing packages, reconfigures and rebuilds incrementally.
#   STRATA_BUILD_DIR (default build), STRATA_CUDA (AUTO|ON|OFF, default AUTO),
#   STRATA_JOBS (default: number of cores)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libdnnl-dev ocl-icd-opencl-dev liburing-dev libcxxopts-dev libgtest-dev
          libopenmpi-dev openmpi-bin nlohmann-json3-dev libxxhash-dev libsentencepiece-dev gnuplot-nox
          iproute2 procps python3 python3-venv)
source tools/apt-missing.sh
apt_install_missing setup "${packages[@]}"

# tools/prepare_data.py: the model's Hugging Face tokenizer and chat template, in a project
# virtualenv (transformers without torch), from PyPI here, never at build or run time.
# Without PyPI the rest still builds and trains: the tests that need the tool say they skip.
if ! .venv/bin/python -c "import transformers, jinja2" 2>/dev/null; then
  echo "setup: installing tools/prepare_data.py's Python packages into .venv"
  if ! { /usr/bin/python3 -m venv .venv &&
         .venv/bin/pip install -q --disable-pip-version-check -r tools/requirements-prepare.txt; }; then
    echo "setup: warning: could not install tools/requirements-prepare.txt from PyPI; tools/prepare_data.py" \
         "and its tests (cli.prepare_data, cli.finetune_hf) are unavailable until setup.sh runs with PyPI reachable" >&2
    rm -rf .venv
  fi
fi

# The tensorboard package, for the test that reads Strata's TensorBoard event files back
# (cli.monitors); without PyPI that test says it skips its read-back.
if [[ -x .venv/bin/python ]] && ! .venv/bin/python -c "import tensorboard" 2>/dev/null; then
  echo "setup: installing tensorboard into .venv (cli.monitors reads the event files back with it)"
  .venv/bin/pip install -q --disable-pip-version-check -r tools/requirements-monitors.txt ||
    echo "setup: warning: could not install tools/requirements-monitors.txt from PyPI; cli.monitors skips" \
         "its event-file read-back until setup.sh runs with PyPI reachable" >&2
fi

build=${STRATA_BUILD_DIR:-build}
# nvcc is not on PATH by default where the CUDA toolkit lives in /usr/local/cuda.
[[ -x /usr/local/cuda/bin/nvcc ]] && export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA="${STRATA_CUDA:-AUTO}" >/dev/null
cmake --build "$build" -j "${STRATA_JOBS:-$(nproc)}"
echo "setup: built $build/strata"
