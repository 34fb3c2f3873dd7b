#!/usr/bin/env bash
# barrier-mutants.sh: does the emulated kernel suite notice a missing barrier?
#
# Removes one __syncthreads() (or __syncwarp()) of kernels/cuda/*.cuh at a time, rebuilds
# the kernel tests that include the header (tests/cuda, binary ember_tests_cuda_emu of an
# emulated or emulator-enabled build with EMBER_EMU_INSTRUMENT), runs their test suites
# with the emulator's checks (EMBER_EMU_CHECK=all), and prints a table: caught when a test
# fails or a racecheck warning is printed, missed otherwise. The header is restored after
# each mutant (also on interruption).
#
#   scripts/barrier-mutants.sh BUILD_DIR [SITE ...]
#
# A SITE is FILE:LINE (kernels/cuda/norm.cuh:244); with none, every __syncthreads() line of
# every kernels/cuda/*.cuh is a mutant. Only the test objects are rebuilt and the test
# binary relinked, not the library: the tests call the kernels they include, so the mutated
# kernel is the one that runs. Headers no kernel test includes are reported as "untested
# here" (their kernels run in the NAME.cuda tests of the emulated build instead).
set -euo pipefail

build=${1:?usage: $0 BUILD_DIR [FILE:LINE ...]}
# The whole run holds ember-build's lock (its builds use 2 jobs, as ember-build's do), so
# that the mutants do not each wait their turn behind other builds.
lock=/tmp/ember-build.lock
if [ -z "${EMBER_MUTANTS_LOCKED:-}" ]; then
  EMBER_MUTANTS_LOCKED=1 exec flock "$lock" "$0" "$@"
fi
shift
root=$(git rev-parse --show-toplevel)
build=$(cd "$build" && pwd)
exe="$build/tests/ember_tests_cuda_emu"
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
objdir="tests/CMakeFiles/ember_tests_cuda_emu.dir/cuda"

sites=("$@")
if [ ${#sites[@]} -eq 0 ]; then
  while IFS=: read -r file line _; do sites+=("$file:$line"); done \
    < <(cd "$root" && grep -n "__syncthreads()" kernels/cuda/*.cuh)
fi

mutated=""
backup=$(mktemp)
restore() {
  if [ -n "$mutated" ]; then
    cp "$backup" "$root/$mutated"
    mutated=""
  fi
}
trap restore EXIT INT TERM

# The kernel tests' objects whose recorded dependencies include $1.
dependents() {
  local header="$root/$1" obj
  for obj in $(ninja -C "$build" -t targets all 2>/dev/null | grep -o "^$objdir/test_[a-z_0-9]*\.cpp\.o"); do
    if ninja -C "$build" -t deps "$obj" | grep -qxF "    $header"; then echo "$obj"; fi
  done
}

# The test suites (gtest filter) defined in the test sources of these objects.
suites() {
  local obj src
  for obj in "$@"; do
    src="$root/tests/cuda/$(basename "$obj" .cpp.o).cpp"
    grep -ohE "^(TEST|TEST_F|TEST_P|TYPED_TEST)\(([A-Za-z0-9_]+)" "$src" | sed -E 's/.*\(//'
  done | sort -u | sed 's/$/.*/' | paste -sd: -
}

# Compiles the objects and relinks the test binary, without rebuilding the library.
rebuild() {
  local link
  link=$(ninja -C "$build" -t commands tests/ember_tests_cuda_emu | tail -1)
  cmake --build "$build" --parallel 2 --target "$@" >/dev/null
  (cd "$build" && eval "$link")
}

printf '| mutant | barrier removed | tests run | result |\n|---|---|---|---|\n'
caught=0
missed=0
for site in "${sites[@]}"; do
  file=${site%%:*}
  line=${site##*:}
  text=$(sed -n "${line}p" "$root/$file")
  case "$text" in
    *__syncthreads\(\)*) call="__syncthreads()" ;;
    *__syncwarp\(*) call=$(grep -o "__syncwarp([^)]*)" <<<"$text" | head -1) ;;
    *) echo "| $site | (no barrier on this line) | | skipped |"; continue ;;
  esac
  objs=$(dependents "$file")
  if [ -z "$objs" ]; then
    echo "| $site | \`$call\` | none in tests/cuda | untested here |"
    continue
  fi
  cp "$root/$file" "$backup"
  mutated=$file
  # Remove the call on that line only: `if (c) __syncthreads();` becomes `if (c) (void)0;`.
  CALL=$call LINE=$line perl -pi -e 's/\Q$ENV{CALL}\E/(void)0/ if $. == $ENV{LINE}' "$root/$file"
  # shellcheck disable=SC2086
  rebuild $objs
  filter=$(suites $objs)
  status=missed
  log=$(mktemp)
  if ! EMBER_EMU_CHECK=all "$exe" --gtest_filter="$filter" >"$log" 2>&1; then
    status="caught: $(grep -m1 -oE "racecheck: [a-z-]+ hazard|initcheck|synccheck|deadlock|Failure" "$log" || echo failed)"
  elif grep -q "warning: racecheck" "$log"; then
    status="caught: racecheck warning"
  fi
  rm -f "$log"
  restore
  [ "$status" = missed ] && missed=$((missed + 1)) || caught=$((caught + 1))
  echo "| $site | \`$call\` | $(tr '\n' ' ' <<<"$objs" | sed "s|$objdir/||g; s|\.cpp\.o||g; s| $||") | $status |"
done
echo
echo "caught $caught, missed $missed"
# Put the unmutated objects back (ccache hits).
cmake --build "$build" --parallel 2 --target ember_tests_cuda_emu >/dev/null
