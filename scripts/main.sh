#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what is missing, build, and train
# the Fashion-MNIST MLP for one epoch, printing its test accuracy. Extra arguments go to
# the trainer (e.g. --epochs 5, --threads 2, --json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh" "$root/build"
"$root/build/examples/ember_mlp" --epochs 1 "$@"
