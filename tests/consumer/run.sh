#!/usr/bin/env bash
# Installs a built ember into a scratch prefix, then builds and runs the consumer
# (tests/consumer/main.cpp, a model file under -Wall -Wextra -Wpedantic -Werror) twice
# against it: as a CMake project with find_package(ember), and with the plain compiler
# line the README shows (-I<prefix>/include, -lember).
#
# Usage: tests/consumer/run.sh BUILD_DIR SCRATCH_DIR
#   BUILD_DIR    an ember build tree (already built)
#   SCRATCH_DIR  a folder for the install prefix and the consumer's builds (created)
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
rm -rf "$prefix"
run cmake --install "$build_dir" --prefix "$prefix"

generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
rm -rf "$consumer_build"

echo "== configuring the consumer against the installed ember"
run cmake -S "$here" -B "$consumer_build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix"

echo "== building the consumer with CMake"
run cmake --build "$consumer_build"

echo "== running the consumer"
# The installed library is found through the RPATH CMake gives build-tree binaries; the
# library path covers an install without one.
export LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
run "$consumer_build/ember_consumer"

echo "== building the consumer with a plain compiler line"
lib=$(find "$prefix" -name 'libember.so' | head -n 1)
if [ -z "$lib" ]; then
  # A static libember.a needs its own dependencies on the line too: find_package covers that.
  echo "== (skipped: ember was built as a static library)"
else
  libdir=$(dirname "$lib")
  run "${CXX:-c++}" -std=c++20 -O2 -Wall -Wextra -Wpedantic -Werror -I"$prefix/include" "$here/main.cpp" \
    -L"$libdir" -lember -Wl,-rpath,"$libdir" -o "$scratch/ember_consumer_plain"
  run "$scratch/ember_consumer_plain"
fi
echo "== consumer: passed"
