#!/usr/bin/env bash
# Times compiling a small model file (bench/compile_time_model.cpp) that includes ember's
# umbrella header, as a user's file would: the umbrella header is kept light so that this
# takes about 2 s at -O2 (PyTorch's torch/torch.h costs ~25 s). Prints one line,
#   compile_time_seconds: 1.23 (umbrella ember.h, -O2)
# and exits non-zero only when the file fails to compile: the time is reported, not asserted.
#
# Usage: bench/compile_time.sh [REPO_ROOT] [COMPILER]
#   REPO_ROOT  the ember checkout (default: this script's parent folder)
#   COMPILER   the C++ compiler (default: c++)
set -euo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cxx=${2:-c++}
model="$root/bench/compile_time_model.cpp"

[ -f "$root/ember.h" ] || { echo "compile_time: no ember.h in '$root'" >&2; exit 2; }
[ -f "$model" ] || { echo "compile_time: no model file '$model'" >&2; exit 2; }
command -v "$cxx" >/dev/null 2>&1 || { echo "compile_time: compiler '$cxx' not found" >&2; exit 2; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# Bash's `time` keyword with TIMEFORMAT gives wall seconds without needing /usr/bin/time.
TIMEFORMAT=%R
status=0
{ time "$cxx" -std=c++20 -O2 -I"$root" -c "$model" -o "$scratch/model.o" 2>"$scratch/errors"; } \
  2>"$scratch/time" || status=$?

if [ "$status" -ne 0 ]; then
  echo "compile_time: compiling $model failed (exit $status):" >&2
  cat "$scratch/errors" >&2
  exit "$status"
fi
echo "compile_time_seconds: $(tail -n 1 "$scratch/time") (umbrella ember.h, -O2)"
