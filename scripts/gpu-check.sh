#!/usr/bin/env bash
# Everything that needs a real GPU, in one run that fits a lent machine's few minutes
# (one GPU, many cores, CUDA's compiler, no network, maybe not Debian's packages):
#   1. build, for this GPU alone, only what the steps below run (or take the programs
#      built elsewhere: EMBER_GPU_PREBUILT);
#   2. the tests that need a GPU, and the core, layer and training tests on cuda
#      (EMBER_TEST_DEVICE=cuda), each compared with its float64 reference;
#   3. the MLP and the CNN example, two epochs each on the GPU, data on the device, again
#      with --cuda-graph (the whole step captured and replayed), and one epoch with
#      --profile (where the time goes);
#   4. the PyTorch peer of the same two models (bench/peers/gpu_peer.py), eager and with
#      a CUDA graph, when python3 has torch; ember_gpt --preset gpu beside its PyTorch peer;
#   5. the kernel and allocator benchmarks, and bench_ddp's per-bucket backward timeline on
#      the GPU (it replaces the H200 estimate in docs/ddp-scaling.md with measurements);
#   6. the hand-written kernels' tests under compute-sanitizer (memcheck by default), last
#      since it takes longest.
# Each step reports and the next still runs; the table at the end gives every result and
# the examples' figures beside PyTorch's. Logs stay in BUILD_DIR.
#
# Usage: scripts/gpu-check.sh [BUILD_DIR]
#   EMBER_DATA=DIR            Fashion-MNIST (default /usr/share/datasets/fashion-mnist)
#   EMBER_DEPS_DIR=DIR        Debian packages to unpack first, on a machine that lacks
#                             ember's build dependencies (scripts/gpu-bundle.sh makes it)
#   EMBER_GPU_PREBUILT=DIR    run the programs built elsewhere and unpacked in DIR
#                             (scripts/gpu-prebuilt.sh packs them), instead of building
#   EMBER_SANITIZER_TOOLS="memcheck racecheck synccheck"   the compute-sanitizer tools
#   EMBER_GPU_CHECK_QUICK=1   skip the sanitizer and the benchmarks
#   EMBER_GPU_CHECK_ONLY=RE   run only the steps whose name matches RE (a rerun of some)
#   EMBER_GPU_CHECK_BUDGET=S  seconds for the whole run (default 480): each step's limit is
#                             cut to what is left, and a step with nothing left is skipped
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${EMBER_GPU_PREBUILT:-${1:-$root/build-gpu}}
data=${EMBER_DATA:-/usr/share/datasets/fashion-mnist}
[ -n "${EMBER_GPU_PREBUILT:-}" ] && [ -z "${EMBER_DATA:-}" ] && [ -d "$build/data" ] && data=$build/data
mkdir -p "$build"
rows=()
status=0
budget=${EMBER_GPU_CHECK_BUDGET:-480}  # a lent machine's command runs at most 10 minutes

# step NAME TIMEOUT_S CMD...: runs CMD with its output in BUILD_DIR/NAME.log; a row says
# how it went and how long it took.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS result left=$((budget - SECONDS))
  [[ $name =~ ${EMBER_GPU_CHECK_ONLY:-.} ]] || return 0
  echo "== $name"
  if [ "$left" -le 0 ]; then
    rows+=("| $name | skipped: the ${budget}s budget is spent | 0 s |")
    status=1
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  if timeout "$limit" "$@" > "$build/$name.log" 2>&1; then
    result="ok"
  else
    local rc=$?
    result="FAILED (exit $rc$([ $rc -eq 124 ] && echo ", over ${limit}s"); $build/$name.log)"
    status=1
  fi
  rows+=("| $name | $result | $((SECONDS - t0)) s |")
  tail -n 3 "$build/$name.log"
}

if [ -n "${EMBER_DEPS_DIR:-}" ]; then
  # Debian's packages unpacked into a prefix CMake searches (no root, no apt needed).
  deps=/tmp/ember-deps
  mkdir -p "$deps"
  for deb in "$EMBER_DEPS_DIR"/*.deb; do dpkg-deb -x "$deb" "$deps"; done
  export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CPATH="$deps/usr/include${CPATH:+:$CPATH}"
  [ -d "$deps/usr/share/datasets/fashion-mnist" ] && [ -z "${EMBER_DATA:-}" ] && data=$deps/usr/share/datasets/fashion-mnist
fi
# cuDNN and NCCL may come only inside Python wheels' folders (nvidia-cudnn-cu13, nvidia-nccl-cu13).
if python3 -c 'import nvidia' >/dev/null 2>&1; then
  wheels=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]) + "/nvidia")' 2>/dev/null)
  for lib in cudnn nccl; do
    [ -d "$wheels/$lib" ] && export "$(echo "$lib" | tr a-z A-Z)_ROOT=$wheels/$lib" &&
      export LD_LIBRARY_PATH="$wheels/$lib/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
fi

if [ -n "${EMBER_GPU_PREBUILT:-}" ]; then
  # The binaries look for libember.so and ember-run where they were built, and the tests
  # for tests/refcases in the source folder they were built from: put this checkout and the
  # unpacked folder there, and the libraries packed beside them on the search path.
  for link in "source-dir:$root" "build-dir:$build"; do
    orig=$(cat "$build/${link%%:*}" 2>/dev/null || true)
    if [ -n "$orig" ] && [ ! -e "$orig" ]; then mkdir -p "$(dirname "$orig")" && ln -s "${link#*:}" "$orig"; fi
  done
  export LD_LIBRARY_PATH="$build:$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # CUDA's libraries come from this machine, wherever it keeps them (the toolkit, or
  # Python wheels' folders): add the folder of each one the loader cannot find yet.
  sites=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null || true)
  for lib in $(ldd "$build/libember.so" | awk '/not found/ {print $1}'); do
    found=$(find /usr/local/cuda*/ $sites /usr/lib /opt -name "$lib" 2>/dev/null | head -n 1)
    [ -n "$found" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
  done
  missing=$(ldd "$build/libember.so" | awk '/not found/ {print $1}' | tr '\n' ' ')
  echo "libraries: $(ldd "$build/libember.so" | awk '/cudnn|nccl|cublasLt|cudart/ {print $3}' | xargs -r realpath | tr '\n' ' ')"
  [ -n "$missing" ] && echo "libember.so: not found on this machine: $missing"
  echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH" > "$build/env.sh"  # for runs by hand after this one
  here=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  echo "programs built from commit $(cat "$build/commit" 2>/dev/null || echo unknown); this checkout: $here"
fi

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available")
echo "GPU: $gpu"

# 1. Build for this GPU only, and only the targets the steps run.
export CCACHE_BASEDIR=$root
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
targets=(ember_tests_gpu ember_tests_cuda_gpu ember_tests_core ember_tests_layers ember_tests_optim ember_tests_comm
         ember_tests_data ember_mlp ember_cnn ember-run ember_bench_cuda_kernels ember_bench_allocator ember_bench_ddp
         ember_bench_attention ember_gpt)
[ -z "${EMBER_GPU_PREBUILT:-}" ] && step build 420 bash -c "cmake -S '$root' -B '$build' ${gen[*]} -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=native && cmake --build '$build' --parallel $(nproc) --target ${targets[*]}"

# 2. Tests on the GPU.
step tests_gpu 120 "$build/tests/ember_tests_gpu" --gtest_filter='-RnnVariantsOnGpu.*:CudnnAttention.*'
for suite in core layers optim; do
  step "tests_${suite}_on_cuda" 180 env EMBER_TEST_DEVICE=cuda "$build/tests/ember_tests_$suite"
done
# The data loader's batches from a dataset on the GPU (and its CPU tests).
step tests_data 60 "$build/tests/ember_tests_data"
step tests_cuda_kernels 180 "$build/tests/ember_tests_cuda_gpu"
# csr_linear under each SpMM variant (variants.h): cuSPARSE, which the emulator cannot run,
# and the hand-written kernel, against the dense Linear (tests/layers/test_sparse.cpp).
for spmm in cusparse handwritten; do
  step "tests_sparse_spmm_$spmm" 60 env EMBER_TEST_DEVICE=cuda EMBER_SPMM=$spmm "$build/tests/ember_tests_layers" \
    --gtest_filter='SparseLinear.*'
done
# The recurrent layers under each RNN variant (variants.h, EMBER_RNN): cuDNN's RNN API,
# which the emulator cannot run, and the hand-written loop, each against a float64 CPU
# reference and against each other (every cell, 2 layers, bidirectional, batch_first,
# outputs and all gradients; the log lists each max error and its tolerance), and the
# word_language_model LSTM's fwd + bwd time under each (tests/gpu/test_rnn_variants.cpp).
step tests_rnn_variants 60 "$build/tests/ember_tests_gpu" --gtest_filter='RnnVariantsOnGpu.*'
[ -f "$build/tests_rnn_variants.log" ] && grep -E 'FAILED|LSTM wlm' "$build/tests_rnn_variants.log" | head -n 12
# cuDNN's fused attention (EMBER_ATTENTION=cudnn: its graph API's SDPA forward, the flash
# backward from its statistics) against the float64 reference, and the calls it leaves to
# the flash kernels (causal, masks, dropout); the log says which kernel ran each case
# (tests/gpu/test_attention_cudnn.cpp).
step tests_attention_cudnn 120 "$build/tests/ember_tests_gpu" --gtest_filter='CudnnAttention.*'
[ -f "$build/tests_attention_cudnn.log" ] && grep -E 'FAILED|forward by' "$build/tests_attention_cudnn.log" | head -n 24
# NCCL on real GPUs: the collectives at every world size the GPUs allow (one H200: world
# size 1), the watchdog and DDP where there are two.
step tests_comm_nccl 120 "$build/tests/ember_tests_comm" --gtest_filter='*cuda*:*Nccl*'

# 3. The examples, one epoch each on the GPU (data on the device, as the peer's).
figure() {  # figure MODEL LOG: "epoch s, accuracy" from the --json line
  python3 -c 'import json,sys; j=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print("%.3f s, %.2f%%" % (j["epoch_seconds"][-1], 100*j["test_accuracy"]))' "$2" 2>/dev/null || echo "n/a"
}
figures=()
if [ -d "$data" ]; then
  for model in mlp cnn; do
    # cuDNN's algorithms timed, as the PyTorch peer's cudnn.benchmark=True
    step "example_$model" 180 env EMBER_CUDNN_BENCHMARK=1 "$build/examples/ember_$model" --device cuda --data "$data" \
      --data-on-device --epochs 2 --json
    figures+=("| ember $model, epoch 2 | $(figure "$model" "$build/example_$model.log") |")
  done
  # The whole step in one CUDA graph, as the peer's graph mode (README, --cuda-graph).
  for model in mlp cnn; do
    step "example_${model}_graph" 180 env EMBER_CUDNN_BENCHMARK=1 "$build/examples/ember_$model" --device cuda \
      --data "$data" --data-on-device --cuda-graph --epochs 2 --json
    figures+=("| ember $model --cuda-graph, epoch 2 | $(figure "$model" "$build/example_${model}_graph.log") |")
  done
  # Where an eager epoch's time goes: each op timed from the host, which is what a small
  # model's step is made of on a GPU (launches, not arithmetic).
  for model in mlp cnn; do
    step "example_${model}_profile" 60 env EMBER_CUDNN_BENCHMARK=1 "$build/examples/ember_$model" --device cuda \
      --data "$data" --data-on-device --epochs 1 --profile
  done
else
  rows+=("| examples | skipped: no Fashion-MNIST in $data (set EMBER_DATA) | |")
fi

# 4. The PyTorch peer, when there is one.
if [ -d "$data" ] && python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  step pytorch_peer 300 python3 "$root/bench/peers/gpu_peer.py" --data "$data" --epochs 1
  while read -r line; do
    figures+=("| $(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print("pytorch %s %s | %.3f s, %.2f%%" % (j["model"], j["mode"], j["epoch_seconds"][-1], 100*j["test_accuracy"]))' "$line" 2>/dev/null) |")
  done < <(grep '^{' "$build/pytorch_peer.log")
else
  rows+=("| pytorch_peer | skipped: no torch with CUDA, or no data | |")
fi

# 4b. ember_gpt --preset gpu beside its PyTorch peer (bench/peers/nanogpt_peer.py, nanoGPT's
# model and loop) on the same text: 300 iterations each (the time per iteration and tokens/s
# of the --json line; losses after 300 iterations are no target), eagerly, and ember also
# with --cuda-graph (which needs dropout off: the replayed masks would repeat).
kjv=${EMBER_GPT_DATA:-$data/kjv.txt}
if [ ! -f "$kjv" ] && command -v bible >/dev/null 2>&1; then bible -l80 gen1:1-rev22:21 > "$build/kjv.txt" && kjv=$build/kjv.txt; fi
if [ -f "$kjv" ]; then
  gpt=("$build/examples/ember_gpt" --preset gpu --device cuda --data "$kjv" --iters 300 --eval-interval 300 --eval-iters 20 --json)
  step gpt_eager 150 "${gpt[@]}"
  step gpt_graph 150 "${gpt[@]}" --dropout 0 --cuda-graph
  figures+=("| ember gpt --preset gpu, 300 iterations | $(grep '^{' "$build/gpt_eager.log" | tail -n 1) |")
  figures+=("| ember gpt --preset gpu --dropout 0 --cuda-graph | $(grep '^{' "$build/gpt_graph.log" | tail -n 1) |")
  if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
    step gpt_pytorch 200 python3 "$root/bench/peers/nanogpt_peer.py" --preset gpu --device cuda --data "$kjv" \
      --iters 300 --eval-interval 300 --eval-iters 20
    figures+=("| pytorch nanoGPT --preset gpu, 300 iterations | $(grep '^{' "$build/gpt_pytorch.log" | tail -n 1) |")
  fi
else
  rows+=("| gpt | skipped: no text (EMBER_GPT_DATA, the bundle's data/kjv.txt, or bible-kjv's bible) | |")
fi

# 5. Benchmarks: the caching allocator beside cudaMalloc, the kernels against the ceiling and cuBLAS.
if [ -z "${EMBER_GPU_CHECK_QUICK:-}" ]; then
  step bench_allocator 120 "$build/bench/ember_bench_allocator"
  step bench_cuda_kernels 240 "$build/bench/ember_bench_cuda_kernels"
  # Per-bucket ready times measured with CUDA events and the 8/64/512-GPU prediction from
  # them (docs/ddp-scaling.md); the Gloo scaling part runs on the CPU only.
  step bench_ddp 120 "$build/bench/ember_bench_ddp" --device cuda
  # The flash attention forward (tensor cores and SIMT) and backward at bf16, D = 128, T up to 4096.
  step bench_attention_cuda 180 "$build/bench/ember_bench_attention" --benchmark_filter=cuda
  # PyTorch's scaled_dot_product_attention at the same shapes, each backend it has (FlashAttention-2's among them).
  python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1 &&
    step attention_pytorch 120 python3 "$root/bench/peers/attention_peer.py"
fi

# 6. The kernel tests under compute-sanitizer: a memory error, a race on shared memory or
# a misused barrier fails the check.
if [ -z "${EMBER_GPU_CHECK_QUICK:-}" ]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for tool in ${EMBER_SANITIZER_TOOLS:-memcheck}; do
    step "sanitizer_$tool" 300 "$sanitizer" --tool "$tool" --error-exitcode 1 "$build/tests/ember_tests_cuda_gpu"
  done
fi

echo
echo "GPU: $gpu"
printf '\n| step | result | time |\n|---|---|---|\n'
printf '%s\n' "${rows[@]}"
if [ ${#figures[@]} -gt 0 ]; then
  printf '\n| run | last epoch, test accuracy |\n|---|---|\n'
  printf '%s\n' "${figures[@]}"
fi
exit $status
