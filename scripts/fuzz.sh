#!/usr/bin/env bash
# A short fuzz run of every libFuzzer target in tests/fuzz (docs/fuzzing.md): builds them
# with clang in build-fuzz (the library and the targets, nothing else) and runs each for
# SECONDS (default 5) on a scratch copy of its seed corpus, so the repository is never
# written to. Any crash, sanitizer report, leak or timeout fails the script; the input
# that caused it is left in build-fuzz/fuzz-artifacts/. EMBER_FUZZ_SEED fixes libFuzzer's
# seed (0, the default, draws a new one each run).
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-5}
build=$root/build-fuzz
targets=(idx safetensors alloc_conf memory_size memviz flags)
# Longest input per target: room for several IDX/safetensors headers with data, a long
# config string or snapshot; longer inputs only slow the fuzzer down.
declare -A max_len=([idx]=65536 [safetensors]=65536 [alloc_conf]=512 [memory_size]=64 [memviz]=16384 [flags]=512)

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/bootstrap.sh installs it)" >&2; exit 1; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DEMBER_CUDA=OFF -DEMBER_FUZZ=ON -DBUILD_SHARED_LIBS=OFF \
  -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCH=OFF >/dev/null
ninja -C "$build" "${targets[@]/#/fuzz_}"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build/fuzz-artifacts"
for t in "${targets[@]}"; do
  echo "== fuzz_$t: ${secs}s =="
  cp -r "$root/tests/fuzz/corpus/$t" "$scratch/$t"
  log=$build/fuzz-artifacts/$t.log
  if ! "$build/tests/fuzz/fuzz_$t" "$scratch/$t" -max_total_time="$secs" -max_len="${max_len[$t]}" -timeout=5 \
      -seed="${EMBER_FUZZ_SEED:-0}" -rss_limit_mb=2048 -artifact_prefix="$build/fuzz-artifacts/$t-" -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "fuzz_$t failed; the input that did it is in $build/fuzz-artifacts/" >&2
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' "$log"
done
