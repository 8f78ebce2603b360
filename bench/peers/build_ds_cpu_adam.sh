#!/usr/bin/env bash
# Builds DeepSpeed's CPU Adam into a timing harness for `strata bench adam`, outside this
# repository, with the flags DeepSpeed's op builder uses (-O3 -march=native -fopenmp
# -D__AVX512__ or -D__AVX256__). DeepSpeed's header includes torch/extension.h: the torch of
# $PYTHON (tools/setup-peers.sh passes its venv's) or else Debian's libtorch-dev, with
# python3-dev. tools/setup-peers.sh runs this; by hand:
#   [PYTHON=/opt/strata-peers/venv/bin/python] bench/peers/build_ds_cpu_adam.sh DEEPSPEED_DIR [OUT]
set -euo pipefail
ds=${1:?usage: build_ds_cpu_adam.sh DEEPSPEED_DIR [OUT]}
out=${2:-/opt/strata-peers/ds_cpu_adam_bench}
here=$(cd "$(dirname "$0")" && pwd)
impl=$ds/csrc/adam/cpu_adam_impl.cpp
[[ -f $impl ]] || { echo "build_ds_cpu_adam.sh: $impl missing: is $ds a DeepSpeed source tree?" >&2; exit 1; }
simd=-D__AVX256__
grep -q avx512f /proc/cpuinfo && simd=-D__AVX512__
[[ -f /usr/include/python3.11/Python.h ]] ||
  { echo "build_ds_cpu_adam.sh: Python.h missing: apt-get install python3-dev" >&2; exit 1; }
if [[ -n ${PYTHON:-} ]]; then
  tdir=$("$PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  torch_inc=(-I "$tdir/include" -I "$tdir/include/torch/csrc/api/include")
  torch_lib=(-L "$tdir/lib" -Wl,-rpath,"$tdir/lib")
  abi=$("$PYTHON" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
  torch_inc+=(-D_GLIBCXX_USE_CXX11_ABI="$abi")
  std=-std=c++20  # PyTorch 2.10 and later need it
else
  for need in /usr/include/torch:libtorch-dev /usr/include/pybind11/pybind11.h:pybind11-dev; do
    [[ -e ${need%%:*} ]] || { echo "build_ds_cpu_adam.sh: ${need%%:*} missing: apt-get install ${need##*:}" >&2; exit 1; }
  done
  torch_inc=(-I /usr/include/torch/csrc/api/include)
  torch_lib=()
  std=-std=c++17
fi
# DeepSpeed's 16-bit-state CPU step: its dispatcher registers a (bf16 parameters, bf16 states)
# instantiation of the same templated kernel. Older sources have only f32 states.
version=$(cat "$ds/version.txt" 2>/dev/null || echo unknown)
commit=$(git -C "$ds" rev-parse HEAD 2>/dev/null || echo "release $version")
bf16=-DDS_HAS_BF16_STATE=0
grep -q 'create_invoker<c10::BFloat16, c10::BFloat16>' "$impl" && bf16=-DDS_HAS_BF16_STATE=1
templated=-DDS_TEMPLATED_STEP=0
grep -q 'typename ds_state_precision_t' "$ds/csrc/includes/cpu_adam.h" && templated=-DDS_TEMPLATED_STEP=1
mkdir -p "$(dirname "$out")"
g++ -O3 $std -march=native -fopenmp $simd $bf16 $templated -DDS_VERSION="\"$version\"" -DDS_COMMIT="\"$commit\"" \
  -Wno-reorder -w -I "$ds/csrc/includes" -I "$ds/csrc/adam" "${torch_inc[@]}" -I /usr/include/python3.11 \
  "$here/ds_cpu_adam_harness.cpp" -o "$out" "${torch_lib[@]}" -ltorch -ltorch_cpu -lc10 -lpython3.11
echo "built $out ($simd, DeepSpeed $version, 16-bit states: ${bf16##*=})"
