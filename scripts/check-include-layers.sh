#!/usr/bin/env bash
# Keeps the folders' include graph pointing down, so no two folders lean on each other:
#
#   programs (examples, bench, tools, tests)       may include anything
#   comm/                                          core, layers/ and optim/ (below)
#   layers/  optim/  data/  kernels/               core and below (optim also layers/;
#                                                   kernels/ is the backends, plugged
#                                                   into core's op table)
#   core/                                          memory/ and base/
#   memory/                                        base/
#   base/                                          nothing else
#
# Each folder may also include its own files. Fails, naming each file, line and include,
# when a file includes from a folder above it or beside it (a circle in the making), or a
# quoted header that is not under a folder (such as the umbrella ember.h).
#
# Usage: scripts/check-include-layers.sh [REPO_ROOT]   (run by ctest as include_layers)
set -euo pipefail

root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
cd "$root"

allowed_for() {
  case $1 in
    base) echo "base" ;;
    memory) echo "base memory" ;;
    core) echo "base memory core" ;;
    kernels) echo "base memory core kernels" ;;
    layers) echo "base memory core layers" ;;
    optim) echo "base memory core layers optim" ;;
    # comm/ wraps nn::Module (DistributedDataParallel) and optim::Optimizer (ZeroOptimizer,
    # an optimizer over a process group, as torch.distributed.optim), so it stands above both.
    comm) echo "base memory core layers optim comm" ;;
    data) echo "base memory core data" ;;
  esac
}

status=0
checked=0
for folder in base memory core kernels layers optim comm data; do
  [ -d "$folder" ] || continue
  allowed=" $(allowed_for "$folder") "
  allowed_list=$(sed -E 's/ *([a-z]+) */\1\/, /g; s/, $//' <<<"$allowed")
  while IFS= read -r hit; do
    file=${hit%%:*}
    rest=${hit#*:}
    line=${rest%%:*}
    header=$(sed -E 's/^[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/' <<<"$rest")
    top=${header%%/*}
    [ "$top" = "$header" ] && top="(top level)"
    checked=$((checked + 1))
    if [[ $allowed != *" $top "* ]]; then
      echo "$file:$line: $folder/ includes \"$header\"; $folder/ may include only $allowed_list" >&2
      status=1
    fi
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' --include='*.h' --include='*.cpp' \
             --include='*.cu' --include='*.cuh' "$folder" || true)
done

if [ $status -ne 0 ]; then
  echo "include layers: FAILED (arrows must point down: see the top of $0)" >&2
  exit 1
fi
echo "include layers: OK ($checked project includes checked)"
