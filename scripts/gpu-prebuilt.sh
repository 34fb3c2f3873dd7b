#!/usr/bin/env bash
# Packs, here, what scripts/gpu-check.sh runs, already built, for a GPU machine where
# building would spend its few minutes (or where ember's build dependencies are missing):
# the binaries of BUILD_DIR (configure it with -DEMBER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=<the
# GPU's> -DEMBER_CPU_ARCH=x86-64-v3, so that the host code runs on any x86-64 CPU of that
# machine), the shared libraries they need that are neither glibc's nor CUDA's (the GPU
# machine brings its own CUDA, cuBLAS, cuDNN and NCCL of the same major versions), and
# Fashion-MNIST, into one archive, OUT (default .gpu-bundle/ember-gpu.tar.xz, ignored by
# git). On the GPU machine:
#   tar xf .gpu-bundle/ember-gpu.tar.xz -C /tmp && EMBER_GPU_PREBUILT=/tmp/ember-gpu scripts/gpu-check.sh
#
# Usage: scripts/gpu-prebuilt.sh BUILD_DIR [OUT]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: gpu-prebuilt.sh BUILD_DIR [OUT]}" && pwd)
out=${2:-$root/.gpu-bundle/ember-gpu.tar.xz}
data=${EMBER_DATA:-/usr/share/datasets/fashion-mnist}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
dest=$stage/ember-gpu
mkdir -p "$dest/lib" "$dest/data" "$(dirname "$out")"

# The same layout as the build folder, so gpu-check.sh finds each program where it looks.
cp "$build"/libember.so* "$dest/"
for bin in "$build"/tests/ember_tests_* "$build"/examples/ember_* "$build"/bench/ember_bench_* "$build"/tools/ember-*; do
  [ -f "$bin" ] && [ -x "$bin" ] || continue
  rel=${bin#"$build"/}
  mkdir -p "$dest/$(dirname "$rel")"
  cp "$bin" "$dest/$rel"
done
# Where the binaries look for libember.so and ember-run, and the tests for tests/refcases.
echo "$build" > "$dest/build-dir"
sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" > "$dest/source-dir"
# The commit built (with -dirty for uncommitted changes), which gpu-check.sh prints.
src=$(cat "$dest/source-dir")
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit-dirty"
echo "$commit" > "$dest/commit"
find "$dest" -type f -perm -u+x -exec strip --strip-unneeded {} + 2>/dev/null || true

# Dependencies: everything ldd resolves outside glibc and CUDA's libraries.
system='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux-x86-64)\.so'
cuda='^(libcuda|libcudart|libcublas|libcublasLt|libcudnn.*|libcusparse|libnccl|libnvJitLink|libnvrtc)\.so'
find "$dest" -type f -perm -u+x -print0 | xargs -0 ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
  sort -u | while read -r name path; do
    if [[ ! $name =~ $system && ! $name =~ $cuda && ! $name =~ ^libember ]]; then
      cp -L "$path" "$dest/lib/$name"
    fi
  done

# Fashion-MNIST uncompressed: xz packs the raw files smaller than their gzip files.
for f in "$data"/*-ubyte*; do
  name=$(basename "$f" .gz)
  if [[ $f == *.gz ]]; then zcat "$f" > "$dest/data/$name"; else cp "$f" "$dest/data/$name"; fi
done

# The King James Version for ember_gpt (bible-kjv's bible program, as the example reads it).
command -v bible >/dev/null 2>&1 && bible -l80 gen1:1-rev22:21 > "$dest/data/kjv.txt"

tar -C "$stage" -cf - ember-gpu | xz -6 -T0 > "$out"
ls -la "$out"
echo "built from commit $commit"
echo "libraries packed: $(ls "$dest/lib" | tr '\n' ' ')"
