#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#  1. the default build (CUDA backend compiled when the toolkit is present), all tests;
#  2. a CPU-only build (-DEMBER_CUDA=OFF) with AddressSanitizer and UBSan, all tests.
# Tests that need a GPU skip themselves here; scripts/gpu-check.sh runs them on one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$root/scripts/bootstrap.sh"

echo "== default build (CUDA compiled if available) =="
"$root/scripts/build.sh" "$root/build"
ctest --test-dir "$root/build" --output-on-failure -j "$jobs"

echo "== CPU-only build with AddressSanitizer + UndefinedBehaviorSanitizer =="
"$root/scripts/build.sh" "$root/build-asan" -DEMBER_CUDA=OFF -DEMBER_SANITIZE=address,undefined \
  -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs"

# Fuzz smoke test: every libFuzzer target of tests/fuzz for a few seconds on its seed
# corpus (clang build in build-fuzz; docs/fuzzing.md has the long runs).
echo "== fuzz targets, ${EMBER_FUZZ_SECONDS:-5}s each =="
"$root/scripts/fuzz.sh" "${EMBER_FUZZ_SECONDS:-5}"
