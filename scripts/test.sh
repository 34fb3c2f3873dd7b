#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#  1. the default build (CUDA backend compiled when the toolkit is present), all tests;
#  2. a CPU-only build (-DEMBER_CUDA=OFF) with AddressSanitizer and UBSan, all tests;
#  3. the CUDA backend on the emulated device (-DEMBER_CUDA=EMULATED): the core, layer
#     and training tests on cuda (NAME.cuda), the tests that use a CUDA device when there
#     is one, and both examples trained on --device cuda against the CPU's losses;
#  4. where this CPU has AVX-512: the CPU kernels, training, layer and PyTorch-port tests once more,
#     compiled for AVX2 (-march=x86-64-v3), as they run on an AVX2-only machine;
#  5. every libFuzzer target of tests/fuzz for a few seconds (scripts/fuzz.sh, clang).
# Tests that need a GPU skip themselves here; scripts/gpu-check.sh runs them on one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
export CCACHE_BASEDIR=$root  # as in build.sh: a fresh clone reuses a warm ccache
# The sanitizer build has debug info, and ccache hashes the working folder into such
# objects unless told not to: every fresh clone then recompiled it whole (about 20 of CI's
# 37 minutes, measured). Its debug info may name another clone's paths; CI does not mind.
export CCACHE_NOHASHDIR=1
# Each stage says when it started, so a slow CI run shows where its time went.
stage() { echo "== $* (at ${SECONDS}s) =="; }
"$root/scripts/bootstrap.sh"

stage "default build (CUDA compiled if available)"
# Without a GPU the CUDA code is only compiled, never run: one architecture checks it.
cuda_arch=-DCMAKE_CUDA_ARCHITECTURES=90
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && cuda_arch=-DCMAKE_CUDA_ARCHITECTURES=native
"$root/scripts/build.sh" "$root/build" "$cuda_arch"
ctest --test-dir "$root/build" --output-on-failure -j "$jobs"

stage "CPU-only build with AddressSanitizer + UndefinedBehaviorSanitizer"
"$root/scripts/build.sh" "$root/build-asan" -DEMBER_CUDA=OFF -DEMBER_SANITIZE=address,undefined \
  -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$root/build-asan" --output-on-failure -j "$jobs"

# The CUDA backend's own sources, compiled by the host compiler against the emulated
# device, in a release build: under the sanitizers each of its files took 2 minutes and
# 2.4 GiB to compile (measured), too much for CI on 2 cores. Only what differs from the
# default build is built and run: the suites on cuda, the tests that use a CUDA device
# when there is one (core, data, comm, tools, gpu, examples), the emulator's NCCL and
# graphs (emu) and the attention kernels' op tests with the emulator's checks (emu:
# attention_kernels_checked). The CPU kernel, allocator and kernel-emulator tests ran in
# stage 1 (the kernel tests with the checks, label emu).
stage "the CUDA backend on the emulated device (-DEMBER_CUDA=EMULATED)"
build_emu=$root/build-emu
# The bench folder is configured for one target: the kernel table on the emulator, whose
# test (kernel_counters_baseline, label emu) holds each kernel's counters to their baseline.
[ -f "$build_emu/CMakeCache.txt" ] || cmake -S "$root" -B "$build_emu" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DEMBER_CUDA=EMULATED -DEMBER_BUILD_BENCH=ON
cmake --build "$build_emu" --parallel "$jobs" --target ember_tests_core ember_tests_layers ember_tests_optim \
  ember_tests_pytorch ember_tests_data ember_tests_comm ember_tests_tools ember_tests_gpu ember_tests_emu ember_tests_examples \
  ember_bench_cuda_kernels
ctest --test-dir "$build_emu" --output-on-failure -j "$jobs" \
  -L '^(core|core_cuda|layers_cuda|optim_cuda|pytorch_cuda|data|comm|tools|gpu|emu|examples|examples_cuda)$'

# The CPU kernels choose their vector paths at compile time, and machines of this kind come
# with AVX-512 or with AVX2 only: an AVX-512 machine also runs the AVX2 build's tests.
# OpenBLAS picks its kernels at run time; OPENBLAS_CORETYPE=Haswell gives it the AVX2 ones
# too, unless the environment already chose (some CPUs need a preset value).
if grep -qw avx512f /proc/cpuinfo; then
  stage "AVX2 build (-march=x86-64-v3): CPU kernel, core, layer and training tests"
  build_avx2=$root/build-avx2
  [ -f "$build_avx2/CMakeCache.txt" ] || cmake -S "$root" -B "$build_avx2" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DEMBER_CPU_ARCH=x86-64-v3 -DEMBER_CUDA=OFF -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=OFF
  cmake --build "$build_avx2" --parallel "$jobs" \
    --target ember_tests_core ember_tests_kernels ember_tests_layers ember_tests_optim ember_tests_pytorch
  OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell} \
    ctest --test-dir "$build_avx2" --output-on-failure -j "$jobs" -L '^(core|kernels|layers|optim|pytorch)$'
fi

# Fuzz smoke test: every libFuzzer target of tests/fuzz for a few seconds on its seed
# corpus (clang build in build-fuzz; docs/fuzzing.md has the long runs). A fixed seed:
# a regression check that fails the same way each run; the long runs find new inputs.
stage "fuzz targets, ${EMBER_FUZZ_SECONDS:-5}s each"
EMBER_FUZZ_SEED=${EMBER_FUZZ_SEED:-1} "$root/scripts/fuzz.sh" "${EMBER_FUZZ_SECONDS:-5}"
stage "all stages passed"
