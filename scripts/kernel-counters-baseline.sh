#!/usr/bin/env bash
# Regenerates the counter baseline the test kernel_counters_baseline holds the kernels to
# (bench/calibration/counters_baseline.tsv), after a change that improves a kernel's
# counters on purpose, or one that changes them for a stated reason:
#
#   scripts/kernel-counters-baseline.sh BUILD_EMU
#
# BUILD_EMU is an emulated build (-DEMBER_CUDA=EMULATED) with ember_bench_cuda_kernels
# built. The arguments match the test's (bench/CMakeLists.txt).
set -euo pipefail
build=${1:?usage: $0 BUILD_EMU}
root=$(git rev-parse --show-toplevel)
"$build/bench/ember_bench_cuda_kernels" --emulated --mib 16 \
  --write-baseline "$root/bench/calibration/counters_baseline.tsv" > /dev/null
echo "wrote $root/bench/calibration/counters_baseline.tsv"
