#!/usr/bin/env bash
# Installs a built ember into a scratch prefix, then configures, builds and runs the
# consumer project (tests/consumer) against it with find_package(ember).
#
# Usage: tests/consumer/run.sh BUILD_DIR SCRATCH_DIR
#   BUILD_DIR    an ember build tree (already built)
#   SCRATCH_DIR  a folder for the install prefix and the consumer's build (created)
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SCRATCH_DIR" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
mkdir -p "$2"
scratch=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prefix="$scratch/prefix"
consumer_build="$scratch/consumer-build"

run() {
  echo "+ $*"
  "$@"
}

echo "== installing ember from $build_dir into $prefix"
run cmake --install "$build_dir" --prefix "$prefix"

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
rm -rf "$consumer_build"

echo "== configuring the consumer against the installed ember"
run cmake -S "$here" -B "$consumer_build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix"

echo "== building the consumer"
run cmake --build "$consumer_build"

echo "== running the consumer"
# The installed library is found through the RPATH CMake gives build-tree binaries; the
# library path covers an install without one.
export LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
run "$consumer_build/ember_consumer"
echo "== consumer: passed"
