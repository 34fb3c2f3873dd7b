// Matrix-multiply throughput of ember (each GEMM variant) against Eigen and OpenBLAS
// called directly, on the same float32 data, in one binary.
//
// Names: BM_matmul/<impl>/<case>, impl one of
//   ember           ember::matmul with the CPU backend's Auto choice
//   ember_eigen     ember::matmul with GemmVariant::Eigen forced (split over ember's pool)
//   ember_openblas  ember::matmul with GemmVariant::OpenBlas forced (OpenBLAS's threads)
//   ember_openblas_split  GemmVariant::OpenBlasSplit (one-thread OpenBLAS per block of ember's pool)
//   eigen           Eigen::Map of row-major matrices, noalias product, Eigen's own threading
//                   (single-threaded unless built with OpenMP: Eigen::nbThreads() is reported)
//   openblas        cblas_sgemm with openblas_set_num_threads(ember::get_num_threads())
// and case one of 256, 512, 1024, 2048 (square) or the MLP training shapes of the
// Fashion-MNIST example (batch 128, 784 -> 512 layer):
//   mlp_fwd      X [128, 784] @ W [784, 512]                  forward
//   mlp_dinput   dY [128, 512] @ W.t() [512, 784]              grad_input  (B transposed)
//   mlp_dweight  X.t() [784, 128] @ dY [128, 512]              grad_weight (A transposed)
// The transposed operands are .t() views (non-contiguous, not copied), as autograd passes them.
//
// Napkin math (this machine: 2 cores with AVX-512, 2 FMA units each):
//   peak fp32 = 2 cores x 2 FMA x 16 lanes x 2 flop x ~1.5 GHz (AVX-512 clock) ~ 195 GFLOP/s.
//   flops = 2 M N K: 1024^3 -> 2.15 GFLOP (OpenBLAS ~148 GFLOP/s on 2 threads: ~14.5 ms;
//   Eigen ~125), 2048^3 -> 17.2 GFLOP (~0.12 s), 256^3 -> 33.6 MFLOP (~0.3 ms, where call and
//   thread wake-up overhead start to show). mlp_* -> 2 x 128 x 784 x 512 = 103 MFLOP each
//   (~0.8 ms at 130 GFLOP/s); their K or M of 128 keeps the packed panels in L2, so they
//   should reach most of the square-matrix rate.
//   Bytes are not the limit: 1024^2 floats x 3 = 12 MiB per product against 2.15 GFLOP.
// Each ember benchmark first checks its result against cblas_sgemm and reports an error
// (SkipWithError) instead of a speed if they disagree.
//
// Run: ember_bench_matmul --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// (medians are stable with the 0.5 s minimum time set below).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ember.h"
#include "kernels/cpu/gemm.h"

namespace {

using ember::Tensor;
using ember::kernels::cpu::GemmVariant;

struct Case {
  const char* name;
  int64_t m, n, k;
  bool trans_a, trans_b;  // the operand is a .t() view of a [k, m] / [n, k] matrix
};

const Case kCases[] = {
    {"256", 256, 256, 256, false, false},
    {"512", 512, 512, 512, false, false},
    {"1024", 1024, 1024, 1024, false, false},
    {"2048", 2048, 2048, 2048, false, false},
    {"mlp_fwd", 128, 512, 784, false, false},
    {"mlp_dinput", 128, 784, 512, false, true},
    {"mlp_dweight", 784, 512, 128, true, false},
};

// The operands in their stored (row-major, contiguous) form, with the same values for
// every implementation: A is stored [k, m] when trans_a, B [n, k] when trans_b.
struct Operands {
  Tensor a_stored, b_stored;
  std::vector<float> a, b;
  int64_t lda, ldb;
};

Operands make_operands(const Case& c) {
  ember::Generator gen(1234);
  Operands o;
  o.a_stored = ember::randn(c.trans_a ? ember::Shape{c.k, c.m} : ember::Shape{c.m, c.k}, ember::kFloat32, &gen);
  o.b_stored = ember::randn(c.trans_b ? ember::Shape{c.n, c.k} : ember::Shape{c.k, c.n}, ember::kFloat32, &gen);
  o.a = o.a_stored.to_vector<float>();
  o.b = o.b_stored.to_vector<float>();
  o.lda = c.trans_a ? c.m : c.k;
  o.ldb = c.trans_b ? c.k : c.n;
  return o;
}

void set_flops(benchmark::State& state, const Case& c) {
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * double(c.m) * double(c.n) * double(c.k),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

void openblas_gemm(const Case& c, const Operands& o, float* out) {
  cblas_sgemm(CblasRowMajor, c.trans_a ? CblasTrans : CblasNoTrans, c.trans_b ? CblasTrans : CblasNoTrans,
              int(c.m), int(c.n), int(c.k), 1.0f, o.a.data(), int(o.lda), o.b.data(), int(o.ldb), 0.0f, out,
              int(c.n));
}

void bm_openblas(benchmark::State& state, const Case& c) {
  openblas_set_num_threads(ember::get_num_threads());
  Operands o = make_operands(c);
  std::vector<float> out(size_t(c.m * c.n));
  for (auto _ : state) {
    openblas_gemm(c, o, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, c);
  state.counters["threads"] = openblas_get_num_threads();
}

void bm_eigen(benchmark::State& state, const Case& c) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Operands o = make_operands(c);
  std::vector<float> out(size_t(c.m * c.n));
  Eigen::Map<const RowMat> A(o.a.data(), c.trans_a ? c.k : c.m, c.trans_a ? c.m : c.k);
  Eigen::Map<const RowMat> B(o.b.data(), c.trans_b ? c.n : c.k, c.trans_b ? c.k : c.n);
  Eigen::Map<RowMat> C(out.data(), c.m, c.n);
  for (auto _ : state) {
    if (!c.trans_a && !c.trans_b) C.noalias() = A * B;
    else if (c.trans_a && !c.trans_b) C.noalias() = A.transpose() * B;
    else if (!c.trans_a && c.trans_b) C.noalias() = A * B.transpose();
    else C.noalias() = A.transpose() * B.transpose();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, c);
  state.counters["threads"] = Eigen::nbThreads();
}

// Largest |ember - cblas| relative to the largest |cblas| entry.
double relative_error(const Tensor& got, const Case& c, const Operands& o) {
  std::vector<float> ref(size_t(c.m * c.n));
  openblas_gemm(c, o, ref.data());
  std::vector<float> g = got.to_vector<float>();
  double worst = 0, scale = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    worst = std::max(worst, double(std::abs(g[i] - ref[i])));
    scale = std::max(scale, double(std::abs(ref[i])));
  }
  return worst / std::max(scale, 1e-30);
}

void bm_ember(benchmark::State& state, const Case& c, GemmVariant variant) {
  namespace cpu = ember::kernels::cpu;
  openblas_set_num_threads(ember::get_num_threads());
  const GemmVariant saved = cpu::gemm_variant();
  cpu::set_gemm_variant(variant);
  Operands o = make_operands(c);
  Tensor a = c.trans_a ? o.a_stored.t() : o.a_stored;
  Tensor b = c.trans_b ? o.b_stored.t() : o.b_stored;
  Tensor check = ember::matmul(a, b);
  if (check.shape() != ember::Shape{c.m, c.n}) {
    state.SkipWithError(("wrong result shape " + ember::shape_str(check.shape())).c_str());
  } else if (double err = relative_error(check, c, o); !(err < 1e-4)) {
    state.SkipWithError(("result differs from cblas_sgemm: relative error " + std::to_string(err)).c_str());
  }
  for (auto _ : state) {
    Tensor out = ember::matmul(a, b);
    benchmark::DoNotOptimize(out.data_ptr());
    benchmark::ClobberMemory();
  }
  cpu::set_gemm_variant(saved);
  set_flops(state, c);
  state.counters["threads"] = ember::get_num_threads();
}

template <class Fn>
void register_bench(const std::string& impl, const Case& c, Fn fn) {
  benchmark::RegisterBenchmark(("BM_matmul/" + impl + "/" + c.name).c_str(), fn)
      ->UseRealTime()
      ->MinTime(0.5)
      ->MinWarmUpTime(0.1)
      ->Unit(benchmark::kMillisecond);
}

// Registered during static initialisation, before benchmark_main's main() runs.
[[maybe_unused]] const bool registered = [] {
  for (const Case& c : kCases) {
    register_bench("ember", c, [&c](benchmark::State& s) { bm_ember(s, c, GemmVariant::Auto); });
    register_bench("ember_eigen", c, [&c](benchmark::State& s) { bm_ember(s, c, GemmVariant::Eigen); });
    register_bench("ember_openblas", c, [&c](benchmark::State& s) { bm_ember(s, c, GemmVariant::OpenBlas); });
    register_bench("ember_openblas_split", c,
                   [&c](benchmark::State& s) { bm_ember(s, c, GemmVariant::OpenBlasSplit); });
    register_bench("eigen", c, [&c](benchmark::State& s) { bm_eigen(s, c); });
    register_bench("openblas", c, [&c](benchmark::State& s) { bm_openblas(s, c); });
  }
  return true;
}();

}  // namespace
