#!/usr/bin/env bash
# Everything that needs a real GPU, in one run: build with the CUDA backend for this
# machine's GPU, then run the tests labelled `gpu` (and the whole suite, whose CUDA
# instances skip themselves without a GPU elsewhere), the hand-written kernels' tests
# again under compute-sanitizer (memcheck; racecheck and synccheck for shared memory and
# barriers), and the kernel benchmark. Prints a summary table, then the benchmark's.
# Usage: scripts/gpu-check.sh [BUILD_DIR]   (needs nvcc and a CUDA driver)
#        EMBER_SANITIZER_TOOLS="memcheck" scripts/gpu-check.sh   (compute-sanitizer tools to run)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || echo "nvidia-smi: not available"
"$root/scripts/build.sh" "$build" -DCMAKE_CUDA_ARCHITECTURES=native || exit 1

"$build/examples/ember_hello" --device cpu | tail -n 1
status=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" > "$build/gpu-check.log" 2>&1 || status=1
summary=$(grep -E "tests passed|tests failed" "$build/gpu-check.log" | tail -n 1)
skipped=$(grep -c "Skipped" "$build/gpu-check.log" || true)
printf '\n| check | result |\n|---|---|\n'
printf '| CUDA devices seen by ember | %s |\n' "$("$build/examples/ember_hello" --device cpu | sed -n 's/.*CUDA backend built, \([0-9]*\) CUDA.*/\1/p')"
printf '| ctest (all labels) | %s |\n' "${summary:-see $build/gpu-check.log}"
printf '| ctest tests skipped | %s |\n' "$skipped"
gpu_summary=$(ctest --test-dir "$build" -L gpu 2>&1 | grep -E "tests passed|tests failed" | tail -n 1)
printf '| ctest label gpu | %s |\n' "${gpu_summary:-none}"
# The kernel tests built by nvcc, under compute-sanitizer: a memory error, a race on
# shared memory or a misused barrier fails the check.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# EMBER_SANITIZER_TOOLS narrows the tools when device time is short (racecheck is the slowest).
for tool in ${EMBER_SANITIZER_TOOLS:-memcheck racecheck synccheck}; do
  if [ -x "$sanitizer" ]; then
    if "$sanitizer" --tool "$tool" --error-exitcode 1 "$build/tests/ember_tests_cuda_gpu" \
        > "$build/sanitizer-$tool.log" 2>&1; then
      result="clean ($(grep -Eo '[0-9]+ tests? ran|\[  PASSED  \] [0-9]+ tests?' "$build/sanitizer-$tool.log" | tail -n 1))"
    else
      result="ERRORS: see $build/sanitizer-$tool.log"
      status=1
    fi
  else
    result="compute-sanitizer not found"
  fi
  printf '| compute-sanitizer %s, CUDA kernel tests | %s |\n' "$tool" "$result"
done
# The caching allocator on the GPU beside cudaMalloc (its table follows).
"$build/bench/ember_bench_allocator" | sed -n '/cuda:0/,$p'
# The hand-written kernels against the ceiling and cuBLAS.
echo
"$build/bench/ember_bench_cuda_kernels"
exit $status
