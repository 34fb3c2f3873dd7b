#!/usr/bin/env bash
# barrier-mutants.sh: does the emulated kernel suite notice a missing barrier?
#
# Each __syncthreads() and __syncwarp() line of kernels/cuda/*.cuh is a mutant: the tests
# that run that header's kernels are run with the barrier removed, through the emulator's
# EMBER_EMU_SKIP_BARRIER=FILE:LINE (kernels/emu/README.md, "Checks": that one call site
# returns at once; a mutation-testing aid, nothing is rebuilt). They run as ctest runs them
# (label emu): with the checks (EMBER_EMU_CHECK=all), a racecheck warning failing them too;
# and, with --no-checks-too, once more without the checks, to show what the checks add.
# Prints a markdown table: caught (by which test, and how) or missed.
#
#   scripts/barrier-mutants.sh BUILD_DIR [--no-checks-too] [FILE:LINE ...]
#
# BUILD_DIR is an emulated build (-DEMBER_CUDA=EMULATED) with ember_tests_cuda_emu and
# ember_tests_core built. A header's tests: the suites of the kernel tests (tests/cuda)
# whose objects include it (ninja's recorded dependencies), or for the headers only the
# backend includes (the attention kernels), the core tests on the emulated device that the
# ctest entry attention_kernels_checked (label emu) runs.
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR [--no-checks-too] [FILE:LINE ...]}
shift
both=0
if [ "${1:-}" = --no-checks-too ]; then
  both=1
  shift
fi
root=$(git rev-parse --show-toplevel)
build=$(cd "$build" && pwd)
kernel_tests="$build/tests/ember_tests_cuda_emu"
core_tests="$build/tests/ember_tests_core"
objdir="tests/CMakeFiles/ember_tests_cuda_emu.dir/cuda"
# As tests/CMakeLists.txt's attention_kernels_checked.
attention_filter='FusedAttention.*:TensorCoreAttention.*:Attention.*-FusedAttention.PeakMemoryGrowsLinearly'

sites=("$@")
if [ ${#sites[@]} -eq 0 ]; then
  while IFS=: read -r file line _; do sites+=("$file:$line"); done \
    < <(cd "$root" && grep -nE "__syncthreads\(\)|__syncwarp\(" kernels/cuda/*.cuh)
fi

# The kernel tests' objects whose recorded dependencies include $1.
dependents() {
  local header="$root/$1" obj
  for obj in $(ninja -C "$build" -t targets all 2>/dev/null | grep -o "^$objdir/test_[a-z_0-9]*\.cpp\.o"); do
    # grep reads all (no -q): ninja killed by SIGPIPE would fail the pipeline.
    if ninja -C "$build" -t deps "$obj" | grep -E "^    (\.\./)?${1//./\\.}$|^    ${header//./\\.}$" >/dev/null; then
      echo "$obj"
    fi
  done
}

# The test suites (a gtest filter) defined in the test sources of these objects.
suites() {
  local obj src
  for obj in "$@"; do
    src="$root/tests/cuda/$(basename "$obj" .cpp.o).cpp"
    grep -ohE "^(TEST|TEST_F|TEST_P|TYPED_TEST)\(([A-Za-z0-9_]+)" "$src" | sed -E 's/.*\(//'
  done | sort -u | sed 's/$/.*/' | paste -sd: -
}

# Runs the mutant's tests ($1: checks or none) and prints "caught: TEST (how)" or "missed".
run() {
  local checks=$1 log status test how
  log=$(mktemp)
  set +e
  if [ "$checks" = checks ]; then export EMBER_EMU_CHECK=all; else unset EMBER_EMU_CHECK; fi
  if [ "$binary" = core ]; then
    EMBER_TEST_DEVICE=cuda EMBER_EMU_CHECK_HOST_ACCESS=1 timeout 900 "$core_tests" --gtest_filter="$filter" \
      --gtest_fail_fast >"$log" 2>&1
  else
    timeout 900 "$kernel_tests" --gtest_filter="$filter" --gtest_fail_fast >"$log" 2>&1
  fi
  status=$?
  set -e
  unset EMBER_EMU_CHECK
  test=$(grep -m1 -oE "^\[  FAILED  \] [A-Za-z0-9_./]+" "$log" | sed 's/^\[  FAILED  \] //' || true)
  how=$(grep -m1 -oE "racecheck: [a-z-]+ hazard on [a-z]+ [a-z]+ memory|initcheck|synccheck|deadlock" "$log" || true)
  if [ -z "$how" ] && [ "$checks" = checks ] && grep -q "warning: racecheck" "$log"; then
    how="racecheck warning (inside a warp)"
    [ -z "$test" ] && test="(passes, but ctest fails it on the warning)"
  fi
  if [ "$status" -ne 0 ] || [ -n "$how" ]; then
    [ -z "$how" ] && how=$([ "$status" -ge 124 ] && echo "crash or timeout ($status)" || echo "wrong result")
    echo "caught: ${test:-exit $status} ($how)"
  else
    echo "missed"
  fi
  rm -f "$log"
}

if [ $both -eq 1 ]; then
  printf '| mutant | barrier removed | tests run | with EMBER_EMU_CHECK=all | without checks |\n|---|---|---|---|---|\n'
else
  printf '| mutant | barrier removed | tests run | with EMBER_EMU_CHECK=all |\n|---|---|---|---|\n'
fi
caught=0
missed=0
declare -A filters binaries
for site in "${sites[@]}"; do
  file=${site%%:*}
  line=${site##*:}
  text=$(sed -n "${line}p" "$root/$file")
  case "$text" in
    *__syncthreads\(\)*) call="__syncthreads()" ;;
    *__syncwarp\(*) call=$(grep -o "__syncwarp([^)]*)" <<<"$text" | head -1) ;;
    *) echo "| $site | (no barrier on this line) | | skipped |"; continue ;;
  esac
  if [ -z "${filters[$file]:-}" ]; then
    objs=$(dependents "$file")
    if [ -n "$objs" ]; then
      # shellcheck disable=SC2086
      filters[$file]=$(suites $objs)
      binaries[$file]=kernels
    else
      filters[$file]=$attention_filter
      binaries[$file]=core
    fi
  fi
  filter=${filters[$file]}
  binary=${binaries[$file]}
  export EMBER_EMU_SKIP_BARRIER=$site
  with=$(run checks)
  tests=${filter//:/ }
  if [ "$binary" = core ]; then tests="ember_tests_core on cuda: $tests"; fi
  row="| $site | \`$call\` | $tests | $with |"
  if [ $both -eq 1 ]; then row="$row $(run none) |"; fi
  unset EMBER_EMU_SKIP_BARRIER
  [ "$with" = missed ] && missed=$((missed + 1)) || caught=$((caught + 1))
  echo "$row"
done
echo
echo "with the checks: caught $caught, missed $missed"
