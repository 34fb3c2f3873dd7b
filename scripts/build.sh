#!/usr/bin/env bash
# Configures and builds ember into BUILD_DIR (default: build), passing extra CMake
# arguments through. Uses Ninja and ccache when present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# ccache keys on paths relative to the checkout, so a fresh clone reuses an earlier build's objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
build=${1:-$root/build}
shift || true
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
else
  cmake -S "$root" -B "$build" "$@" >/dev/null
fi
cmake --build "$build" --parallel "$(nproc)"
