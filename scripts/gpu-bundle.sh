#!/usr/bin/env bash
# Downloads, here where apt works, the Debian packages that scripts/gpu-check.sh needs on
# a GPU machine that has CUDA's compiler but not ember's other build dependencies (nor
# network), into DIR (default: .gpu-deps, which git ignores). Carry DIR there and run
#   EMBER_DEPS_DIR=.gpu-deps scripts/gpu-check.sh
# gpu-check unpacks them into a prefix with dpkg-deb (no root, no apt there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.gpu-deps}
packages=(
  libeigen3-dev libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5
  libgtest-dev libgmock-dev libbenchmark-dev libbenchmark1debian
  nlohmann-json3-dev libcli11-dev libfmt-dev libfmt9 zlib1g-dev
  libboost-context-dev libboost-context1.74-dev libboost-context1.74.0 libboost1.74-dev
  dataset-fashion-mnist
)
mkdir -p "$dir"
cd "$dir"
apt-get download "${packages[@]}"
du -sh "$dir"
