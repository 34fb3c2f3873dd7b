// Sparse (CSR) Linear against the dense one on the CPU, for the MLP example's layers at
// batch 128, and ember's CSR kernel against Eigen's sparse-dense product on the same data.
//
// Names: BM_sparse/<impl>/<layer>[/<sparsity>], layer one of 784x512, 512x256, 256x10
// (in x out), sparsity 50, 90 or 99 (percent of the weights pruned), impl one of
//   dense_fwd    ember::linear (the CPU GEMM)
//   csr_fwd      ember::csr_linear (kernels/cpu/sparse.cpp)
//   eigen_fwd    Eigen::SparseMatrix<float, RowMajor> times the batch, Eigen's own
//                threading (OpenMP when built with it: the threads counter says)
//   dense_train  linear forward + backward (dx, dW, db)
//   csr_train    csr_linear forward + backward (dx, dvalues, db)
// Napkin math: a dense forward is 2 * 128 * in * out flops (103 MFLOP for 784x512, about
// 1 ms at ~100 GFLOP/s on two cores); CSR does (1 - sparsity) of those flops, but as
// axpys over 64-row panels (memory-bound on the panel, no register blocking over the
// weight), so it wins only once the sparsity pays for its lower flop rate: the
// break-even sparsity is what docs/sparse.md reports from this bench.
//
// Run: ember_bench_sparse --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <Eigen/SparseCore>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ember.h"

namespace {

using ember::Tensor;

struct Layer {
  const char* name;
  int64_t in, out;
};
constexpr Layer kLayers[] = {{"784x512", 784, 512}, {"512x256", 512, 256}, {"256x10", 256, 10}};
constexpr int kSparsity[] = {50, 90, 99};
constexpr int64_t kBatch = 128;

struct Setup {
  std::shared_ptr<ember::nn::Linear> dense;
  std::shared_ptr<ember::nn::SparseLinear> sparse;
  Tensor x, dy;
};

Setup make(const Layer& l, int sparsity) {
  ember::manual_seed(7);
  Setup s;
  s.dense = std::make_shared<ember::nn::Linear>(l.in, l.out);
  if (sparsity > 0) ember::nn::Pruning(*s.dense, {.sparsity = sparsity / 100.0, .global = false});
  s.sparse = std::make_shared<ember::nn::SparseLinear>(*s.dense);
  s.x = ember::randn({kBatch, l.in});
  s.dy = ember::randn({kBatch, l.out});
  return s;
}

void set_flops(benchmark::State& state, const Layer& l, double density, int passes) {
  state.counters["dense_FLOP/s"] = benchmark::Counter(2.0 * kBatch * double(l.in) * double(l.out) * passes,
                                                      benchmark::Counter::kIsIterationInvariantRate);
  state.counters["density"] = density;
  state.counters["threads"] = ember::get_num_threads();
}

void dense_fwd(benchmark::State& state, Layer l) {
  Setup s = make(l, 0);
  ember::NoGradGuard g;
  for (auto _ : state) benchmark::DoNotOptimize(ember::linear(s.x, s.dense->weight, s.dense->bias));
  set_flops(state, l, 1.0, 1);
}

void csr_fwd(benchmark::State& state, Layer l, int sparsity) {
  Setup s = make(l, sparsity);
  ember::NoGradGuard g;
  for (auto _ : state) benchmark::DoNotOptimize((*s.sparse)(s.x));
  set_flops(state, l, 1.0 - sparsity / 100.0, 1);
}

void train(benchmark::State& state, Layer l, int sparsity, bool sparse) {
  Setup s = make(l, sparsity);
  Tensor x = s.x.clone().requires_grad_();
  ember::nn::Module& m = sparse ? static_cast<ember::nn::Module&>(*s.sparse) : *s.dense;
  for (auto _ : state) {
    m.zero_grad();
    x.set_grad({});
    Tensor y = m(x);
    y.backward(s.dy);
  }
  set_flops(state, l, sparse ? 1.0 - sparsity / 100.0 : 1.0, 3);
}

// y^T [out, B] = A [out, in] x^T [in, B]: the row-major x [B, in] and y [B, out] are the
// column-major x^T and y^T Eigen maps. Checked against csr_linear before timing.
void eigen_fwd(benchmark::State& state, Layer l, int sparsity) {
  Setup s = make(l, sparsity);
  const ember::CsrPattern& p = s.sparse->pattern();
  const std::vector<int32_t> rp = p.row_ptr().to_vector<int32_t>(), ci = p.col_idx().to_vector<int32_t>();
  const std::vector<float> v = s.sparse->values.detach().to_vector<float>();
  std::vector<Eigen::Triplet<float>> t;
  for (int64_t r = 0; r < p.rows(); ++r)
    for (int32_t j = rp[r]; j < rp[r + 1]; ++j) t.emplace_back(int(r), ci[j], v[j]);
  Eigen::SparseMatrix<float, Eigen::RowMajor> a(int(l.out), int(l.in));
  a.setFromTriplets(t.begin(), t.end());
  a.makeCompressed();
  const std::vector<float> xv = s.x.to_vector<float>();
  Eigen::Map<const Eigen::MatrixXf> xt(xv.data(), l.in, kBatch);
  Eigen::MatrixXf yt(l.out, kBatch);
  yt.noalias() = a * xt;
  {
    ember::NoGradGuard g;
    const std::vector<float> want = ember::csr_linear(s.x, s.sparse->values, p).to_vector<float>();
    for (int64_t i = 0; i < kBatch * l.out; ++i)
      if (std::abs(yt.data()[i] - want[i]) > 1e-3f * (1 + std::abs(want[i]))) {
        state.SkipWithError("Eigen and csr_linear disagree");
        return;
      }
  }
  for (auto _ : state) {
    yt.noalias() = a * xt;
    benchmark::DoNotOptimize(yt.data());
  }
  set_flops(state, l, 1.0 - sparsity / 100.0, 1);
  state.counters["threads"] = Eigen::nbThreads();
}

int register_all() {
  for (const Layer& l : kLayers) {
    const std::string base = std::string("BM_sparse/");
    benchmark::RegisterBenchmark((base + "dense_fwd/" + l.name).c_str(), dense_fwd, l)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((base + "dense_train/" + l.name).c_str(), train, l, 0, false)
        ->Unit(benchmark::kMicrosecond);
    for (int sp : kSparsity) {
      const std::string tail = std::string(l.name) + "/" + std::to_string(sp);
      benchmark::RegisterBenchmark((base + "csr_fwd/" + tail).c_str(), csr_fwd, l, sp)->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark((base + "eigen_fwd/" + tail).c_str(), eigen_fwd, l, sp)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark((base + "csr_train/" + tail).c_str(), train, l, sp, true)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  return 0;
}
const int registered = register_all();

}  // namespace
