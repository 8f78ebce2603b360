#!/usr/bin/env bash
# Builds DeepSpeed's CPU Adam into a timing harness for `strata bench adam --peer`, outside
# this repository, with the flags DeepSpeed's op builder uses (-O3 -march=native -fopenmp
# -D__AVX512__ or -D__AVX256__). Needs Debian's libtorch-dev, python3-dev and pybind11-dev (DeepSpeed's
# header includes torch/extension.h) and a DeepSpeed checkout.
#   bench/peers/build_ds_cpu_adam.sh DEEPSPEED_DIR [OUT=/opt/strata-peers/ds_cpu_adam_bench]
set -euo pipefail
ds=${1:?usage: build_ds_cpu_adam.sh DEEPSPEED_DIR [OUT]}
out=${2:-/opt/strata-peers/ds_cpu_adam_bench}
here=$(cd "$(dirname "$0")" && pwd)
simd=-D__AVX256__
grep -q avx512f /proc/cpuinfo && simd=-D__AVX512__
for need in /usr/include/torch:libtorch-dev /usr/include/pybind11/pybind11.h:pybind11-dev \
            /usr/include/python3.11/Python.h:python3-dev; do
  [[ -e ${need%%:*} ]] || { echo "build_ds_cpu_adam.sh: ${need%%:*} missing: apt-get install ${need##*:}" >&2; exit 1; }
done
mkdir -p "$(dirname "$out")"
py=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || echo /usr/include/python3.11)
g++ -O3 -std=c++17 -march=native -fopenmp $simd -Wno-reorder -w \
  -I "$ds/csrc/includes" -I "$ds/csrc/adam" -I /usr/include/torch/csrc/api/include -I "$py" -I /usr/include/python3.11 \
  "$here/ds_cpu_adam_harness.cpp" -o "$out" -ltorch -ltorch_cpu -lc10 -lpython3.11
echo "built $out ($simd)"
