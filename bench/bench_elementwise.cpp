// Memory-bound throughput of ember's elementwise add and sum, next to plain memcpy of
// the same traffic, which is the ceiling they can approach.
//
// Names and the bytes each reports (SetBytesProcessed, so bytes_per_second is shown):
//   BM_add/ember/1M, /16M     out = a + b, float32, n elements: 3 x 4n bytes (2 reads, 1 write)
//   BM_add_broadcast/ember/4096x4096+4096
//                             [4096, 4096] + [4096] row: 2 x 4n + 4 x 4096 bytes (n = 16M)
//   BM_sum/ember/16M          sum of n float32: 4n bytes read
//   BM_memcpy/as_add/1M, /16M, BM_memcpy/as_sum/16M
//                             memcpy of half the bytes the named op moves: a copy of B
//                             bytes reads B and writes B, so it reports 2B, the same total.
//
// Napkin math (2 cores): 16M floats = 64 MiB per tensor, so add moves 192 MiB and cannot
// hide in cache (L2 is ~1-2 MiB a core, L3 tens of MiB shared); at a DRAM bandwidth of
// ~10-20 GB/s usable from two cores that is ~10-20 ms per add, and memcpy of 96 MiB shows
// the real figure on this machine. Caveats for the comparison: ember allocates its output
// each call (until the caching allocator lands, a 64 MiB output is a fresh mmap whose
// page faults cost more than the add itself) and a normal
// store first reads the line it writes (write-allocate: 4 x 4n real traffic for add),
// whereas glibc's large memcpy uses non-temporal stores, so add at ~75% of memcpy's
// bytes/s is at the ceiling. The 1M case (12 MiB moved) mostly fits in L3 and measures
// the loop and the thread pool's dispatch rather than DRAM. Sum reads only: its ceiling
// is the read bandwidth, somewhat above memcpy's bytes/s; the adds are ~0.25 flop/byte,
// so no elementwise op here comes near the ~195 GFLOP/s compute peak.
//
// Run: ember_bench_elementwise --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ember.h"

namespace {

using ember::Tensor;

constexpr int64_t kM = int64_t(1) << 20;  // "1M" means 2^20 elements

Tensor random_f32(const ember::Shape& shape, uint64_t seed) {
  ember::Generator gen(seed);
  return ember::rand(shape, ember::kFloat32, &gen);
}

void bm_add(benchmark::State& state, int64_t n) {
  Tensor a = random_f32({n}, 1), b = random_f32({n}, 2);
  for (auto _ : state) {
    Tensor out = ember::add(a, b);
    benchmark::DoNotOptimize(out.data_ptr());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 3 * 4 * n);
  state.counters["threads"] = ember::get_num_threads();
}

void bm_add_broadcast(benchmark::State& state) {
  constexpr int64_t rows = 4096, cols = 4096;
  Tensor a = random_f32({rows, cols}, 3), row = random_f32({cols}, 4);
  for (auto _ : state) {
    Tensor out = ember::add(a, row);
    benchmark::DoNotOptimize(out.data_ptr());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * (2 * 4 * rows * cols + 4 * cols));
  state.counters["threads"] = ember::get_num_threads();
}

void bm_sum(benchmark::State& state, int64_t n) {
  Tensor a = random_f32({n}, 5);
  for (auto _ : state) {
    Tensor s = ember::sum(a);
    benchmark::DoNotOptimize(s.data_ptr());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 4 * n);
  state.counters["threads"] = ember::get_num_threads();
}

// Copies `bytes` bytes per iteration and reports 2 x bytes moved (read + write).
void bm_memcpy(benchmark::State& state, int64_t bytes) {
  std::vector<char> src(size_t(bytes), 1), dst(size_t(bytes), 0);  // touched: no page faults inside
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), size_t(bytes));
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * bytes);
}

template <class Fn>
void register_bench(const std::string& name, Fn fn) {
  benchmark::RegisterBenchmark(name.c_str(), fn)
      ->UseRealTime()
      ->MinTime(0.5)
      ->MinWarmUpTime(0.1)
      ->Unit(benchmark::kMicrosecond);
}

// Registered during static initialisation, before benchmark_main's main() runs.
[[maybe_unused]] const bool registered = [] {
  for (int64_t millions : {1, 16}) {
    const int64_t n = millions * kM;
    const std::string tag = std::to_string(millions) + "M";
    register_bench("BM_add/ember/" + tag, [n](benchmark::State& s) { bm_add(s, n); });
    register_bench("BM_memcpy/as_add/" + tag, [n](benchmark::State& s) { bm_memcpy(s, 3 * 4 * n / 2); });
  }
  register_bench("BM_add_broadcast/ember/4096x4096+4096", [](benchmark::State& s) { bm_add_broadcast(s); });
  register_bench("BM_sum/ember/16M", [](benchmark::State& s) { bm_sum(s, 16 * kM); });
  register_bench("BM_memcpy/as_sum/16M", [](benchmark::State& s) { bm_memcpy(s, 4 * 16 * kM / 2); });
  return true;
}();

}  // namespace
