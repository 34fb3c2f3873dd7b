#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what is missing, build what the
# job runs (the library and the MLP example, nothing else), and train the Fashion-MNIST
# MLP for one epoch, printing its test accuracy. Extra arguments go to the trainer
# (e.g. --epochs 5, --threads 2, --device cpu, --json).
#
# CUDA code is compiled only where a GPU is present, and then for that GPU alone: on a
# machine without one, nvcc would spend minutes on code that cannot run there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
build=$root/build-main
cuda=(-DEMBER_CUDA=OFF)
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  cuda=(-DEMBER_CUDA=AUTO -DCMAKE_CUDA_ARCHITECTURES=native)
fi
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" \
  -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$build" --target ember_mlp --parallel "$(nproc)"
"$build/examples/ember_mlp" --epochs 1 "$@"
