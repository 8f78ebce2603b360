#!/bin/sh
# Makes a virtualenv for the fixture makers in tests/tools: torch and one major version of
# Hugging Face transformers from PyPI. The fixtures they write are committed; neither the
# build nor the tests ever run this.
#   tests/tools/make_fixture_venv.sh 5 /opt/strata-fixtures/tf5   # transformers 5.x
#   tests/tools/make_fixture_venv.sh 4 /opt/strata-fixtures/tf4   # transformers 4.x
# Then: /opt/strata-fixtures/tf5/bin/python tests/tools/make_hf_family_fixtures.py
set -eu
major=${1:?usage: make_fixture_venv.sh MAJOR DIR}
dir=${2:?usage: make_fixture_venv.sh MAJOR DIR}
case "$major" in
  4) spec="transformers>=4.51,<5" ;;
  5) spec="transformers>=5,<6" ;;
  *) echo "make_fixture_venv.sh: transformers major version $major: use 4 or 5" >&2; exit 2 ;;
esac
command -v python3 >/dev/null || { echo "make_fixture_venv.sh: needs python3 (apt-get install python3-venv)" >&2; exit 2; }
python3 -m venv "$dir"
"$dir/bin/pip" install --quiet --upgrade pip
"$dir/bin/pip" install --quiet torch "$spec" safetensors numpy
"$dir/bin/python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
