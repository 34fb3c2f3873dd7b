#!/usr/bin/env bash
# The emulator's counters of ember_bench_cuda_kernels's rows for the kernels of another
# commit (the code a GPU run measured), for the model's calibration (bench/calibration/):
#
#   scripts/kernel-counters-at.sh COMMIT BUILD_EMU OUT.tsv [bench arguments: --mib 256, --filter TEXT]
#
# Extracts COMMIT's kernels/cuda and kernels/common into BUILD_EMU/kernels-at-COMMIT,
# builds today's bench over them (ember_bench_cuda_kernels_at: those headers first on the
# include path, today's emulator and profile counters below them) and writes its
# --counters table, at the named operands (256 MiB; launches of larger grids sampled, as
# the bench runs them). The bench's calls must still match that commit's kernel API.
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 COMMIT BUILD_EMU OUT.tsv [bench arguments]" >&2; exit 2; }
commit=$1 build=$2 out=$3
shift 3
root=$(git rev-parse --show-toplevel)
short=$(git -C "$root" rev-parse --short "$commit")
dir=$(realpath "$build")/kernels-at-$short
rm -rf "$dir" && mkdir -p "$dir"
git -C "$root" archive "$commit" kernels/cuda kernels/common | tar -x -C "$dir"
cmake -S "$root" -B "$build" -DEMBER_BENCH_KERNELS_AT="$dir" > /dev/null
if command -v ember-build > /dev/null; then
  ember-build "$build" --target ember_bench_cuda_kernels_at
else
  cmake --build "$build" --target ember_bench_cuda_kernels_at
fi
"$build/bench/ember_bench_cuda_kernels_at" --emulated --counters "$out" "$@"
