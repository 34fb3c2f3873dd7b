// index_select's forward and backward on the CPU at the shape [4, 32, 128, 128],
// along each dim, with an index that pads by one on each side (reflection: 130 rows from
// 128, the way padding is written with it).
//
// Names: BM_index_select/pass:P/dim:D/real_time, P one of
//   0  forward       index_select (row memcpys, parallel over output rows)
//   1  backward      index_add into zeros: index_select's backward since issue 30
//                    (Note [Deterministic index_add] in kernels/cpu/indexing.cpp)
//   2  backward_old  scatter_add into zeros with the index expanded to the gradient's shape:
//                    the backward before issue 30 (serial, element by element; the expanded
//                    index is made contiguous once, outside the timed loop)
// Napkin math: the gradient is 4*32*128*130 floats = 8.5 MB read, 8.4 MB zeroed and
// read-modify-written: ~25 MB of traffic, a few ms at the ~10 GB/s two cores sustain, about
// the forward's cost.
//
// Run: ember_bench_indexing --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "ember.h"

namespace {

using ember::Tensor;

const ember::Shape kShape{4, 32, 128, 128};

Tensor pad_index(int64_t n) {  // reflect: 1, 0, 1, ..., n-1, n-2
  std::vector<double> v{1};
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<double>(i));
  v.push_back(static_cast<double>(n - 2));
  return ember::tensor(v, ember::kInt64);
}

void BM_index_select(benchmark::State& state) {
  const int pass = static_cast<int>(state.range(0));
  const int64_t dim = state.range(1);
  ember::Generator gen(1);
  const Tensor x = ember::randn(kShape, ember::kFloat32, &gen);
  const Tensor idx = pad_index(kShape[dim]);
  ember::Shape gshape = kShape;
  gshape[dim] = idx.numel();
  const Tensor g = ember::randn(gshape, ember::kFloat32, &gen);
  ember::Shape ishape(4, 1);
  ishape[dim] = idx.numel();
  const Tensor expanded = idx.view(ishape).expand(gshape).contiguous();
  for (auto _ : state) {
    Tensor out;
    if (pass == 0) out = ember::index_select(x, dim, idx);
    else if (pass == 1) out = ember::index_add(ember::zeros(kShape), dim, idx, g);
    else out = ember::scatter_add(ember::zeros(kShape), dim, expanded, g);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.SetBytesProcessed(state.iterations() * g.numel() * 4 * 2);
}
BENCHMARK(BM_index_select)
    ->ArgNames({"pass", "dim"})
    ->ArgsProduct({{0, 1, 2}, {0, 1, 2, 3}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
