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
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "ember.h"

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
  return true;
}();

}  // namespace
