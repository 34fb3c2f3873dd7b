#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install what is missing, build, and run
# the hello program (creates tensors, multiplies them, prints the backend in use).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
"$root/scripts/build.sh" "$root/build"
"$root/build/examples/ember_hello" "$@"
