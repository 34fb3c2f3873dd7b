#!/usr/bin/env bash
# Installs what ember needs from Debian's packages, and nothing that is already there.
# Idempotent: a second run installs nothing. Run as root (or with sudo available).
# Usage: scripts/bootstrap.sh [--with-peers]
set -euo pipefail

packages=(
  cmake g++ make ninja-build ccache pkg-config
  libeigen3-dev libopenblas-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev nlohmann-json3-dev libcli11-dev libfmt-dev libboost-context-dev
  libgloo-dev  # comm/: collectives on CPU tensors
  dataset-fashion-mnist
  bible-kjv  # examples/gpt: English text (the King James Version)
  clang libclang-rt-14-dev  # scripts/fuzz.sh: clang++ and libFuzzer's runtime
  python3-numpy  # scripts/kernel-model.py, and the test that checks the bench against it
)

# --with-peers: also libtorch (PyTorch's C++ frontend) for bench/peers, and Python's
# PyTorch for the peer scripts and the twins that write tests/refcases (/usr/bin/python3).
if [ "${1:-}" = "--with-peers" ]; then
  packages+=(libtorch-dev libopenblas0-openmp python3-torch)
fi

die() { printf 'bootstrap: %s\n' "$*" >&2; exit 1; }

command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 ||
  die "this script needs a Debian-like system with apt-get; install by hand: ${packages[*]}"

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all ${#packages[@]} packages present"
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 ||
    die "not root and no sudo: as root, run  apt-get install -y ${missing[*]}"
  sudo=(sudo)
fi

echo "bootstrap: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq || die "apt-get update failed (no network or no apt sources?)"
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
  die "apt-get install failed for: ${missing[*]}"
