// scaled_dot_product_attention on the CPU: the fused path (kernels/cpu/attention.cpp)
// against the math path (matmul, softmax, matmul), forward and forward + backward, float32,
// B = 4, H = 4, D = 64, T = 256 ... 2048, causal and not, at ember's thread count
// (EMBER_NUM_THREADS; the figures in docs/attention.md use 2).
//
// Names: BM_attention/<path>/<pass>/<mask>/T, path fused or math, pass fwd or fwd_bwd,
// mask full or causal.
//
// FLOPs counted: the forward's two products, 4 B H T^2 D (half that where causal), and
// the backward's 2.5 times that (its five products; the fused backward computes the
// scores twice more, which is not counted: the figure is useful work per second).
// Napkin math (2 cores with AVX-512, 2 FMA units each, ~1.5 GHz under AVX-512): the
// peak is ~195 GFLOP/s, and ember_bench_matmul's GEMM reaches about 130 to 150 of it;
// the fused kernel's tiles also pay the softmax's exps (one per score: at D = 64 about
// one exp per 128 multiply-adds) and its packing, so 40 to 60 % of the GEMM's rate is
// what to expect. The math path runs the GEMM at full speed but moves the B H T^2 scores
// through memory 5 to 6 times (T = 2048: 256 MiB each way).
//
// Run: EMBER_NUM_THREADS=2 ember_bench_attention --benchmark_min_time=1s
//
// On a CUDA device (skipped with a message where there is none): the CUDA flash path,
// BM_attention_cuda/<pass>/<mask>/T, pass fwd_tc (the tensor-core forward of
// kernels/cuda/attention_tc.cuh), fwd_simt (attention.cuh's), fwd_cudnn (cuDNN's fused
// forward, EMBER_ATTENTION=cudnn; non-causal only, attention_cudnn.h) or bwd (the backward alone,
// from a saved forward; attention.cuh's SIMT kernels), bf16,
// D = 128, B = 4, H = 16 (B T = 16K tokens at T = 4096, FlashAttention-2's benchmark
// shape; at T = 4096, 64 x 64 = 4096 blocks of 64 query rows, 31 per SM of 132), T = 1024 ... 4096.
// Timed with CUDA events (manual time). FLOPs as above: 4 B H T^2 D forward, 2.5 times
// that backward, halved where causal. Ceiling: mma.sync's dense bf16 rate, about two thirds
// of wgmma's ~990 TFLOP/s on an H100 SXM or H200; FlashAttention-2 reaches 335-366
// forward on an H100 (issue 31 asks for 290 on an H200).
//   ember_bench_attention --benchmark_filter=cuda
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/stream.h"
#include "ember.h"
#include "kernels/cuda/variants.h"

namespace {

using ember::Tensor;

constexpr int64_t kB = 4, kH = 4, kD = 64;

void bm_attention(benchmark::State& state, const char* path, bool backward, bool causal) {
  const int64_t T = state.range(0);
  ::setenv("EMBER_ATTENTION", path, 1);
  ember::Generator gen(1);
  Tensor q = ember::randn({kB, kH, T, kD}, {ember::kFloat32}, &gen);
  Tensor k = ember::randn({kB, kH, T, kD}, {ember::kFloat32}, &gen);
  Tensor v = ember::randn({kB, kH, T, kD}, {ember::kFloat32}, &gen);
  const Tensor dout = ember::randn({kB, kH, T, kD}, {ember::kFloat32}, &gen);
  if (backward)
    for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
  for (auto _ : state) {
    Tensor out = ember::scaled_dot_product_attention(q, k, v, {.is_causal = causal});
    if (backward) {
      out.backward(dout);
      for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    }
    benchmark::DoNotOptimize(out.data_ptr());
  }
  ::unsetenv("EMBER_ATTENTION");
  const double fwd = 4.0 * double(kB * kH) * double(T) * double(T) * double(kD) * (causal ? 0.5 : 1.0);
  state.counters["FLOP/s"] = benchmark::Counter(backward ? 3.5 * fwd : fwd,
                                                benchmark::Counter::kIsIterationInvariantRate,
                                                benchmark::Counter::kIs1000);
  state.counters["threads"] = ember::get_num_threads();
}

constexpr int64_t kCudaB = 4, kCudaH = 16, kCudaD = 128;

void bm_attention_cuda(benchmark::State& state, const char* kernel, bool backward, bool causal) {
  const int64_t T = state.range(0);
  const ember::Device dev = ember::Device::cuda(0);
  ::setenv("EMBER_ATTENTION", std::string(kernel) == "cudnn" ? "cudnn" : "flash", 1);
  ember::kernels::cuda::set_attention_variant(std::string(kernel) == "simt" ? "simt" : "auto");
  ember::Generator gen(1);
  auto input = [&] { return ember::randn({kCudaB, kCudaH, T, kCudaD}, {ember::kBFloat16}, &gen).to(dev); };
  Tensor q = input(), k = input(), v = input();
  const Tensor dout = input();
  if (backward)
    for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
  ember::Event start(dev, true), stop(dev, true);
  for (auto _ : state) {
    Tensor out;
    if (backward) {
      out = ember::scaled_dot_product_attention(q, k, v, {.is_causal = causal});
      ember::synchronize(dev);
    }
    start.record();
    if (backward) out.backward(dout);
    else out = ember::scaled_dot_product_attention(q, k, v, {.is_causal = causal});
    stop.record();
    stop.synchronize();
    state.SetIterationTime(double(start.elapsed_ms(stop)) / 1e3);
    if (backward)
      for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
  }
  ember::kernels::cuda::set_attention_variant("auto");
  ::unsetenv("EMBER_ATTENTION");
  const double fwd =
      4.0 * double(kCudaB * kCudaH) * double(T) * double(T) * double(kCudaD) * (causal ? 0.5 : 1.0);
  state.counters["TFLOP/s"] = benchmark::Counter((backward ? 2.5 : 1.0) * fwd / 1e12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

[[maybe_unused]] const bool registered = [] {
  for (const char* path : {"fused", "math"})
    for (bool backward : {false, true})
      for (bool causal : {false, true}) {
        const std::string name = std::string("BM_attention/") + path + (backward ? "/fwd_bwd/" : "/fwd/") +
                                 (causal ? "causal" : "full");
        benchmark::RegisterBenchmark(name.c_str(),
                                     [=](benchmark::State& s) {
                                       bm_attention(s, std::string(path) == "fused" ? "flash" : "math", backward,
                                                    causal);
                                     })
            ->RangeMultiplier(2)
            ->Range(256, 2048)
            ->UseRealTime()
            ->MinTime(0.5)
            ->Unit(benchmark::kMillisecond);
      }
  if (ember::cuda_device_count() == 0) {
    std::fprintf(stderr, "ember_bench_attention: no CUDA device; the BM_attention_cuda benchmarks are left out\n");
    return true;
  }
  // The backward is attention.cuh's SIMT kernel under both forward kernels: timed once.
  struct CudaCase {
    const char* kernel;
    bool backward;
  };
  // cuDNN's forward (EMBER_ATTENTION=cudnn) takes non-causal calls only (attention_cudnn.h).
  for (const CudaCase c : {CudaCase{"tc", false}, CudaCase{"simt", false}, CudaCase{"cudnn", false},
                           CudaCase{"tc", true}})
    for (bool causal : {false, true}) {
      if (std::string(c.kernel) == "cudnn" && causal) continue;
      const std::string pass = c.backward ? "bwd" : std::string("fwd_") + c.kernel;
      const std::string name = "BM_attention_cuda/" + pass + (causal ? "/causal" : "/full");
      benchmark::RegisterBenchmark(name.c_str(),
                                   [=](benchmark::State& s) { bm_attention_cuda(s, c.kernel, c.backward, causal); })
          ->RangeMultiplier(2)
          ->Range(1024, 4096)
          ->UseManualTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
  return true;
}();

}  // namespace
