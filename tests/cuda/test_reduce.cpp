// The reduction kernels (kernels/cuda/reduce.cuh) against the CPU backend: sum, mean,
// amax, amin, argmax/argmin and var over the last dim, a middle dim, all elements, and
// the outer and inner dims around a kept one (no argmax there), on awkward sizes that take
// each launch path (warp per row, block per row, split in two passes), misaligned views,
// float32/float64/bfloat16/float16, NaN, and bad arguments.
//
// Two kinds of inputs:
// - small integers (in [-8, 8]): every sum is exact in float, so sum/max/min/argmax must
//   match the CPU bit for bit (a dropped or repeated element cannot hide in a tolerance),
//   and the many ties check "first index wins";
// - uniform reals: sums and variances within a rounding bound stated where it is used.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using test::all_close;
using test::DeviceArray;
using test::from_doubles;
using test::to_double;

template <class T>
DType dtype_for() {
  if constexpr (std::is_same_v<T, float>) return kFloat32;
  else if constexpr (std::is_same_v<T, double>) return kFloat64;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return kBFloat16;
  else return kFloat16;
}

// A reduction's shape: last dim of [outer, n], middle dim of [outer, n, inner], all n, or
// outer and inner dims of [outer, n, inner] (n outputs).
enum class Layout { kLast, kMiddle, kAll, kOuterInner };
struct Case {
  Layout layout;
  int64_t outer, n, inner;
  std::string str() const {
    const char* names[] = {"last dim of", "middle dim of", "all of", "outer and inner dims of"};
    std::string s = std::string(names[int(layout)]) + " [";
    if (layout != Layout::kAll) s += std::to_string(outer) + ", ";
    s += std::to_string(n);
    if (layout == Layout::kMiddle || layout == Layout::kOuterInner) s += ", " + std::to_string(inner);
    return s + "]";
  }
  int64_t numel() const { return outer * n * inner; }
  int64_t outputs() const { return layout == Layout::kOuterInner ? n : outer * inner; }
  int64_t count() const { return layout == Layout::kOuterInner ? outer * inner : n; }  // elements per output
  Shape shape() const {
    if (layout == Layout::kLast) return {outer, n};
    if (layout == Layout::kMiddle || layout == Layout::kOuterInner) return {outer, n, inner};
    return {n};
  }
  std::vector<int64_t> dims() const {
    if (layout == Layout::kLast) return {1};
    if (layout == Layout::kMiddle) return {1};
    if (layout == Layout::kOuterInner) return {0, 2};
    return {};  // all
  }
};
Case last(int64_t rows, int64_t cols) { return {Layout::kLast, rows, cols, 1}; }
Case middle(int64_t outer, int64_t n, int64_t inner) { return {Layout::kMiddle, outer, n, inner}; }
Case all(int64_t n) { return {Layout::kAll, 1, n, 1}; }
Case outer_inner(int64_t outer, int64_t n, int64_t inner) { return {Layout::kOuterInner, outer, n, inner}; }

// Runs reducer r over x as `c` says, through the host launcher, with exactly the
// workspace it asks for (poisoned, like every DeviceArray).
template <class R>
void run(const R& r, const Case& c, const typename R::Elem* x, typename R::Out out) {
  size_t bytes = 0;
  if (c.layout == Layout::kLast) bytes = reduce_last_dim_workspace<R>(c.outer, c.n);
  if (c.layout == Layout::kMiddle) bytes = reduce_middle_dim_workspace<R>(c.outer, c.n, c.inner);
  if (c.layout == Layout::kAll) bytes = reduce_all_workspace<R>(c.n);
  if (c.layout == Layout::kOuterInner) bytes = reduce_outer_inner_workspace<R>(c.outer, c.n, c.inner);
  DeviceArray<unsigned char> ws(bytes);
  if (c.layout == Layout::kLast) reduce_last_dim(r, x, out, c.outer, c.n, ws.data(), bytes, nullptr);
  if (c.layout == Layout::kMiddle) reduce_middle_dim(r, x, out, c.outer, c.n, c.inner, ws.data(), bytes, nullptr);
  if (c.layout == Layout::kAll) reduce_all(r, x, out, c.n, ws.data(), bytes, nullptr);
  if constexpr (!std::is_same_v<typename R::Out, IndexedOut<typename R::Elem>>)
    if (c.layout == Layout::kOuterInner)
      reduce_outer_inner(r, x, out, c.outer, c.n, c.inner, ws.data(), bytes, nullptr);
  test::synchronize();
}

// One input on the device (at `offset` elements past a 256-byte boundary) and on the CPU.
template <class T>
struct Input {
  Case c;
  std::vector<double> values;  // exactly representable in T
  DeviceArray<T> device;
  Tensor cpu;
  Input(const Case& c_, std::vector<double> v, size_t offset)
      : c(c_), values(quantize(std::move(v))), device(from_doubles<T>(values), offset),
        cpu(ember::tensor(values, c.shape(), dtype_for<T>())) {}
  static std::vector<double> quantize(std::vector<double> v) {
    for (double& x : v) x = to_double(test::from_double<T>(x));
    return v;
  }
};

std::vector<double> small_integers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

std::vector<double> cpu_values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

// |got - want| <= tol[i] for each output (NaN only where want is NaN); on failure, the
// worst element, its index and the tolerance.
template <class T>
::testing::AssertionResult within(const std::vector<T>& got, const std::vector<double>& want,
                                  const std::vector<double>& tol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = to_double(got[i]), w = want[i];
    double ratio = std::isnan(w) ? (std::isnan(g) ? 0 : INFINITY) : std::abs(g - w) / tol[i];
    if (std::isnan(ratio)) ratio = (g == w) ? 0 : INFINITY;  // inf - inf, or 0/0
    if (ratio > 1 && !(std::isinf(w) && g == w)) ++bad;
    if (ratio > worst_ratio && !(std::isinf(w) && g == w)) worst_ratio = ratio, worst = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " outputs differ; worst [" << worst
                                       << "]: got " << to_double(got[worst]) << ", want " << want[worst]
                                       << ", tolerance " << tol[worst];
}

// Checks sum, max, min, argmax, argmin (exact) and mean (a few roundings) of integer inputs.
template <class T>
void check_exact(const Case& c, size_t offset, uint32_t seed) {
  SCOPED_TRACE(c.str() + " at offset " + std::to_string(offset) + ", " + std::string(dtype_name(dtype_for<T>())));
  Input<T> in(c, small_integers(size_t(c.numel()), seed), offset);
  const int64_t m = c.outputs();
  const auto dims = c.dims();
  {
    DeviceArray<T> out(m);
    run(SumReduce<T>{}, c, in.device.data(), out.data());
    EXPECT_TRUE(all_close(out.host(), cpu_values(ember::sum(in.cpu, dims)), 0.0)) << "sum";
  }
  {
    // CPU: the exact sum rounded to T, divided by n in T; here: one rounding. So within
    // three roundings of T, 4u relative.
    DeviceArray<T> out(m);
    run(MeanReduce<T>{}, c, in.device.data(), out.data());
    EXPECT_TRUE(all_close(out.host(), cpu_values(ember::mean(in.cpu, dims)), 4 * test::unit_roundoff<T>())) << "mean";
  }
  if (c.count() == 0 || m == 0) return;  // max/min/argmax of nothing: BadArgumentsRaise
  {
    DeviceArray<T> hi(m), lo(m);
    run(MaxReduce<T>{}, c, in.device.data(), hi.data());
    run(MinReduce<T>{}, c, in.device.data(), lo.data());
    EXPECT_TRUE(all_close(hi.host(), cpu_values(ember::amax(in.cpu, dims)), 0.0)) << "amax";
    EXPECT_TRUE(all_close(lo.host(), cpu_values(ember::amin(in.cpu, dims)), 0.0)) << "amin";
  }
  if (c.layout == Layout::kOuterInner) return;  // no argmax over two dims
  for (bool is_max : {true, false}) {
    DeviceArray<T> values(m);
    DeviceArray<int64_t> indices(m);
    const IndexedOut<T> out{values.data(), indices.data()};
    if (is_max) run(ArgMaxReduce<T>{}, c, in.device.data(), out);
    else run(ArgMinReduce<T>{}, c, in.device.data(), out);
    Tensor want_idx, want_val;
    if (c.layout == Layout::kAll) {
      want_idx = is_max ? ember::argmax(in.cpu) : ember::argmin(in.cpu);
      want_val = is_max ? ember::max(in.cpu) : ember::min(in.cpu);
    } else {
      auto [v, i] = is_max ? ember::max(in.cpu, 1) : ember::min(in.cpu, 1);
      want_idx = i, want_val = v;
    }
    EXPECT_TRUE(all_close(indices.host(), cpu_values(want_idx), 0.0)) << (is_max ? "argmax" : "argmin");
    EXPECT_TRUE(all_close(values.host(), cpu_values(want_val), 0.0)) << (is_max ? "max values" : "min values");
  }
}

// Sizes from {0, 1, 31, 32, 33, 1023, 4097} (harness kAwkwardSizes), in every combination
// up to kMaxElements (emulator time), and the path boundaries (PlansCoverEveryPath checks
// which path each takes).
constexpr int64_t kMaxElements = 140000;
const std::vector<Case>& last_dim_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v = {last(0, 0), last(0, 5), last(3, 0), last(2, 1024), last(3, 1025), last(33, 2000)};
    for (int64_t rows : test::kAwkwardSizes)
      for (int64_t cols : test::kAwkwardSizes)
        if (rows > 0 && cols > 0 && rows * cols <= kMaxElements) v.push_back(last(rows, cols));
    return v;
  }();
  return cases;
}
const std::vector<Case>& middle_dim_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v = {middle(0, 3, 2), middle(2, 0, 3), middle(3, 5, 0), middle(2, 65, 33), middle(2, 100, 5),
                           middle(33, 31, 4)};
    for (int64_t outer : {1, 3, 33})
      for (int64_t n : test::kAwkwardSizes)
        for (int64_t inner : {1, 3, 31, 32, 33, 1023})
          if (n > 0 && outer * n * inner <= kMaxElements) v.push_back(middle(outer, n, inner));
    return v;
  }();
  return cases;
}
const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v = {all(1025), all(40001), all(131073)};
    for (int64_t n : test::kAwkwardSizes) v.push_back(all(n));
    return v;
  }();
  return cases;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(CudaReduce, PlansCoverEveryPath) {
  EMBER_NEED_DEVICE();
  // The test sizes reach each path whatever the SM count (the emulator's 4, an H200's 132).
  auto plan = [](const Case& c) {
    return c.layout == Layout::kMiddle ? middle_dim_plan(c.outer, c.n, c.inner, 4, 16)
                                       : last_dim_plan(c.outer, c.n, 4, 16);
  };
  EXPECT_EQ(plan(last(4097, 1)).lanes_per_row, 1);  // 32 rows per warp
  EXPECT_EQ(plan(last(31, 32)).lanes_per_row, 8);
  EXPECT_EQ(plan(last(33, 33)).lanes_per_row, 16);
  EXPECT_EQ(plan(last(2, 1024)).lanes_per_row, 32);
  EXPECT_EQ(plan(last(3, 1025)).lanes_per_row, 0);  // a block per row
  EXPECT_EQ(plan(last(33, 2000)).splits, 1);  // a block per row, written directly
  EXPECT_GT(plan(last(3, 4097)).splits, 1);   // split rows: two passes
  EXPECT_GT(plan(all(4097)).splits, 1);
  EXPECT_GT(plan(all(40001)).splits, 4);
  EXPECT_GT(plan(middle(1, 4097, 3)).splits, 1);
  EXPECT_TRUE(plan(middle(5, 7, 31)).thread_per_output);
  EXPECT_TRUE(plan(middle(33, 31, 4)).thread_per_output);
  EXPECT_FALSE(plan(middle(1, 1023, 32)).thread_per_output);
  EXPECT_EQ(plan(middle(2, 100, 5)).splits, 1);  // under kMinSegmentBytes a column tile
  EXPECT_EQ(plan(middle(3, 1023, 1)).lanes_per_row, 32);  // inner 1: the last dim
  EXPECT_EQ(plan(middle(2, 65, 33)).width, 32);  // two column tiles, the second one narrow
  EXPECT_EQ(plan(middle(2, 100, 5)).width, 5);
  // Every plan covers its reduced dim once, and asks for workspace only when it splits.
  for (const auto* cases : {&last_dim_cases(), &middle_dim_cases(), &all_cases()})
    for (const Case& c : *cases) {
      const ReducePlan p = plan(c);
      if (c.outputs() == 0 || p.thread_per_output || p.lanes_per_row > 0) continue;
      EXPECT_GE(p.splits * p.segment, c.n) << c.str();
      EXPECT_LT((p.splits - 1) * p.segment, std::max<int64_t>(c.n, 1)) << c.str();
      EXPECT_EQ(p.workspace_bytes > 0, p.splits > 1) << c.str();
      EXPECT_GT(p.main.grid.x, 0u) << c.str();
    }
  // A billion floats on an H200-sized device split into few enough blocks to merge fast.
  const ReducePlan big = last_dim_plan(1, int64_t(1) << 30, 4, 4);
  EXPECT_LE(big.splits, int64_t(sm_count()) * 16);
}

// How a backend maps a DimMask over a contiguous tensor onto [outer, n, inner].
TEST(CudaReduce, AdjacentReducedDimsMergeIntoOuterNInner) {
  EMBER_NEED_DEVICE();
  auto dims_of = [](const Shape& sizes, std::vector<int> reduced) {
    uint64_t mask = 0;
    for (int d : reduced) mask |= uint64_t(1) << d;
    ReduceDims d{-1, -1, -1};
    const bool ok = reduce_dims(sizes, mask, d);
    return ok ? std::vector<int64_t>{d.outer, d.n, d.inner} : std::vector<int64_t>{};
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(dims_of({2, 3, 4}, {1}), (V{2, 3, 4}));
  EXPECT_EQ(dims_of({2, 3, 4}, {2}), (V{6, 4, 1}));         // the last dim
  EXPECT_EQ(dims_of({2, 3, 4}, {0}), (V{1, 2, 12}));        // the first dim
  EXPECT_EQ(dims_of({2, 3, 4}, {1, 2}), (V{2, 12, 1}));
  EXPECT_EQ(dims_of({2, 3, 4}, {0, 1, 2}), (V{1, 24, 1}));  // all
  EXPECT_EQ(dims_of({2, 3, 4}, {0, 2}), V{});               // not adjacent
  EXPECT_EQ(dims_of({2, 1, 3, 4}, {0, 2}), (V{1, 6, 4}));   // adjacent past a size-1 dim
  EXPECT_EQ(dims_of({5, 1, 1}, {1, 2}), (V{5, 1, 1}));      // only size-1 dims reduced
  EXPECT_EQ(dims_of({2, 0, 4}, {1}), (V{2, 0, 4}));
  EXPECT_EQ(dims_of({}, {}), (V{1, 1, 1}));                 // a 0-dim tensor
}

TEST(CudaReduce, LastDimOfIntegersMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 1;
  for (const Case& c : last_dim_cases()) {
    check_exact<float>(c, seed % 2, seed);  // offset 1: rows start off 16-byte boundaries
    check_exact<__nv_bfloat16>(c, 3, seed++);
  }
  for (const Case& c : {last(33, 33), last(3, 1025), last(3, 4097)}) {
    check_exact<double>(c, 1, seed++);
    check_exact<__half>(c, 5, seed++);
  }
  std::printf("last dim: %.2f s\n", seconds_since(t0));
}

TEST(CudaReduce, MiddleDimOfIntegersMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 100;
  for (const Case& c : middle_dim_cases()) {
    check_exact<float>(c, seed % 2, seed);
    if (seed++ % 3 == 0) check_exact<__nv_bfloat16>(c, 1, seed);
  }
  for (const Case& c : {middle(2, 33, 5), middle(1, 4097, 3), middle(2, 32, 33)}) {
    check_exact<double>(c, 1, seed++);
    check_exact<__half>(c, 0, seed++);
  }
  std::printf("middle dim: %.2f s\n", seconds_since(t0));
}

TEST(CudaReduce, AllElementsOfIntegersMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 200;
  for (const Case& c : all_cases()) {
    check_exact<float>(c, 0, seed++);
    check_exact<float>(c, 1, seed++);
    check_exact<__nv_bfloat16>(c, 7, seed++);
  }
  for (const Case& c : {all(33), all(4097)}) {
    check_exact<double>(c, 1, seed++);
    check_exact<__half>(c, 1, seed++);
  }
  std::printf("all: %.2f s\n", seconds_since(t0));
}

// The outer and inner dims of [outer, n, inner] (a conv's bias gradient over N and H * W):
// the shortcuts (outer 1, inner 1, empty), warp-per-row, block-per-row and split rows in
// the first pass, conv-like shapes (7x7 and 14x14 maps), rows off 16-byte boundaries.
const std::vector<Case>& outer_inner_cases() {
  static const std::vector<Case> cases = {
      outer_inner(0, 3, 2),    outer_inner(2, 0, 3),   outer_inner(3, 5, 0),    outer_inner(1, 7, 33),
      outer_inner(5, 7, 1),    outer_inner(3, 4, 33),  outer_inner(33, 31, 4),  outer_inner(4, 3, 1025),
      outer_inner(2, 3, 4097), outer_inner(65, 33, 31), outer_inner(128, 8, 49), outer_inner(9, 16, 196)};
  return cases;
}

TEST(CudaReduce, OuterInnerOfIntegersMatchesCpuExactly) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 700;
  for (const Case& c : outer_inner_cases()) {
    check_exact<float>(c, seed % 2, seed);
    check_exact<__nv_bfloat16>(c, 3, seed++);
  }
  for (const Case& c : {outer_inner(3, 4, 33), outer_inner(2, 3, 4097), outer_inner(128, 8, 49)}) {
    check_exact<double>(c, 1, seed++);
    check_exact<__half>(c, 5, seed++);
  }
  // The first pass's plans: a warp per row, a block per row, split rows.
  EXPECT_EQ(last_dim_plan(128 * 8, 49, 4, 4).lanes_per_row, 16);
  EXPECT_EQ(last_dim_plan(4 * 3, 1025, 4, 4).lanes_per_row, 0);
  EXPECT_GT(last_dim_plan(2 * 3, 4097, 4, 4).splits, 1);
  std::printf("outer and inner: %.2f s\n", seconds_since(t0));
}

// Rounding of sums and variances of reals. A sum whose longest chain of additions is d
// has |error| <= d u sum|x| (Higham, Accuracy and Stability, 4.3), u the compute type's
// unit roundoff. Here d <= n/8 + 64: a thread's run down a column (ny >= 8 rows) or along
// a row, plus the trees of warp, block and merge. The CPU sums in double and rounds once,
// and so does the kernel: 2 u_T |want| more. The same bound with sum x^2 (the size of the
// squared deviations, times 3 for the mean's own error) bounds m2, hence var.
template <class T>
void check_rounding(const Case& c, size_t offset, uint32_t seed) {
  SCOPED_TRACE(c.str() + " at offset " + std::to_string(offset) + ", " + std::string(dtype_name(dtype_for<T>())));
  Input<T> in(c, test::random_doubles(size_t(c.numel()), seed, -2.0, 3.0), offset);
  const auto dims = c.dims();
  const double u = test::compute_roundoff<T>(), uT = test::unit_roundoff<T>(), d = double(c.count()) / 8 + 64;
  const Tensor x64 = in.cpu.to(kFloat64);
  const std::vector<double> abs_sum = cpu_values(ember::sum(ember::abs(x64), dims));
  const std::vector<double> sq_sum = cpu_values(ember::sum(ember::mul(x64, x64), dims));
  {
    DeviceArray<T> out(c.outputs());
    run(SumReduce<T>{}, c, in.device.data(), out.data());
    const auto want = cpu_values(ember::sum(in.cpu, dims));
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < tol.size(); ++i) tol[i] = d * u * abs_sum[i] + 2 * uT * std::abs(want[i]) + 1e-300;
    EXPECT_TRUE(within(out.host(), want, tol)) << "sum";
  }
  {
    DeviceArray<T> out(c.outputs());
    run(MeanReduce<T>{}, c, in.device.data(), out.data());
    const auto want = cpu_values(ember::mean(in.cpu, dims));  // CPU: sum rounded, then divided: 3 u_T
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < tol.size(); ++i)
      tol[i] = d * u * abs_sum[i] / double(c.count()) + 4 * uT * std::abs(want[i]) + 1e-300;
    EXPECT_TRUE(within(out.host(), want, tol)) << "mean";
  }
  for (int64_t correction : {0, 1, 2}) {
    if (c.count() <= correction) continue;  // VarEdgeCases
    DeviceArray<T> out(c.outputs());
    run(VarReduce<T>{correction}, c, in.device.data(), out.data());
    const auto want = cpu_values(ember::var(in.cpu, dims, correction));
    std::vector<double> tol(want.size());
    for (size_t i = 0; i < tol.size(); ++i)
      tol[i] = 3 * d * u * sq_sum[i] / double(c.count() - correction) + 2 * uT * std::abs(want[i]) + 1e-300;
    EXPECT_TRUE(within(out.host(), want, tol)) << "var, correction " << correction;
  }
}

TEST(CudaReduce, SumMeanVarOfRealsWithinRoundingBounds) {
  EMBER_NEED_DEVICE();
  const auto t0 = std::chrono::steady_clock::now();
  uint32_t seed = 300;
  for (const Case& c : {last(1, 1), last(31, 32), last(33, 33), last(9, 1023), last(3, 1025), last(33, 2000),
                        last(3, 4097), middle(3, 31, 1), middle(2, 33, 5), middle(2, 32, 33), middle(1, 4097, 3),
                        all(2), all(1023), all(40001)}) {
    check_rounding<float>(c, 1, seed++);
    check_rounding<__nv_bfloat16>(c, 0, seed++);
  }
  for (const Case& c : {outer_inner(3, 4, 33), outer_inner(4, 3, 1025), outer_inner(2, 3, 4097), outer_inner(128, 8, 49)}) {
    check_rounding<float>(c, 1, seed++);
    check_rounding<__nv_bfloat16>(c, 0, seed++);
    check_rounding<__half>(c, 3, seed++);
  }
  for (const Case& c : {last(33, 33), last(3, 4097), middle(1, 4097, 3), all(40001), outer_inner(128, 8, 49)})
    check_rounding<double>(c, 1, seed++);
  std::printf("reals: %.2f s\n", seconds_since(t0));
}

// Variance is shift-invariant; Welford with Chan's merge keeps that: data with a large
// mean (1e4 + U(-1, 1): E[x^2] - E[x]^2 would lose every digit in float) still gives
// the variance to float accuracy, relative to the variance itself.
TEST(CudaReduce, VarOfDataFarFromZeroKeepsItsDigits) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 400;
  for (const Case& c : {last(3, 1025), last(5, 100), middle(2, 4097, 3), all(40001)}) {
    SCOPED_TRACE(c.str());
    Input<float> in(c, test::random_doubles(size_t(c.numel()), seed++, 1e4 - 1, 1e4 + 1), 1);
    DeviceArray<float> out(c.outputs());
    run(VarReduce<float>{1}, c, in.device.data(), out.data());
    // Reference in float64 from the same float values. Each value carries its own
    // rounding (fine: the reference uses the rounded values); the kernel's error is a few
    // hundred float ulps of the *mean* spread over n: about 1e-3 relative here at worst,
    // where E[x^2] - E[x]^2 in float would be off by 100% or more.
    const auto want = cpu_values(ember::var(in.cpu.to(kFloat64), c.dims(), 1));
    EXPECT_TRUE(all_close(out.host(), want, 2e-3));
  }
}

TEST(CudaReduce, VarEdgeCasesFollowPyTorch) {
  EMBER_NEED_DEVICE();
  // torch.var divides by max(n - correction, 0): n <= correction gives inf (or NaN when
  // every value is equal, 0/0); n == 0 gives NaN. ember's CPU var follows the same rule.
  const std::vector<float> x = {1.0f, 3.0f, 3.0f, 3.0f};
  DeviceArray<float> dx(x, 1);
  DeviceArray<float> out(1);
  auto var_of = [&](int64_t n, int64_t correction) {
    run(VarReduce<float>{correction}, all(n), dx.data(), out.data());
    return out.host()[0];
  };
  EXPECT_FLOAT_EQ(var_of(2, 0), 1.0f);
  EXPECT_FLOAT_EQ(var_of(2, 1), 2.0f);
  EXPECT_EQ(var_of(2, 2), INFINITY);
  EXPECT_EQ(var_of(2, 5), INFINITY);
  EXPECT_TRUE(std::isnan(var_of(1, 1)));  // one element: m2 = 0, 0/0
  EXPECT_EQ(var_of(1, 0), 0.0f);
  EXPECT_TRUE(std::isnan(var_of(0, 1)));
  EXPECT_TRUE(std::isnan(var_of(0, 0)));
  EXPECT_FLOAT_EQ(var_of(4, 1), 1.0f);  // mean 2.5, m2 = 2.25 + 3 * 0.25 = 3, over 3
  // An empty reduction per output: sum 0, mean NaN, var NaN.
  DeviceArray<float> rows(3);
  run(VarReduce<float>{1}, last(3, 0), dx.data(), rows.data());
  for (float v : rows.host()) EXPECT_TRUE(std::isnan(v));
}

// NaN anywhere makes sum, mean, var, max and min NaN, and argmax/argmin point at the first
// NaN, as on the CPU. Infinities: the max of -inf values is at index 0.
TEST(CudaReduce, NanPropagatesAndArgmaxFindsTheFirstNan) {
  EMBER_NEED_DEVICE();
  uint32_t seed = 500;
  for (const Case& c : {last(4, 33), last(3, 1025), last(2, 4097), middle(2, 37, 3), middle(1, 4097, 2), all(40001)}) {
    for (int64_t where : {int64_t(0), c.n / 2, c.n - 1}) {
      SCOPED_TRACE(c.str() + ", NaN at " + std::to_string(where));
      std::vector<double> v = small_integers(size_t(c.numel()), seed++);
      // Output 0 gets a NaN at `where` and a second one later; the last output, if any
      // other, has none.
      auto at = [&](int64_t k) { return size_t(k * c.inner); };  // output 0 (outer 0, column 0)
      v[at(where)] = NAN;
      if (where + 3 < c.n) v[at(where + 3)] = NAN;
      Input<float> in(c, v, 1);
      const auto dims = c.dims();
      const int64_t m = c.outputs();
      DeviceArray<float> s(m), mean(m), var(m), hi(m), lo(m), vals(m);
      DeviceArray<int64_t> idx(m), idx_min(m);
      run(SumReduce<float>{}, c, in.device.data(), s.data());
      run(MeanReduce<float>{}, c, in.device.data(), mean.data());
      run(VarReduce<float>{1}, c, in.device.data(), var.data());
      run(MaxReduce<float>{}, c, in.device.data(), hi.data());
      run(MinReduce<float>{}, c, in.device.data(), lo.data());
      run(ArgMaxReduce<float>{}, c, in.device.data(), IndexedOut<float>{vals.data(), idx.data()});
      run(ArgMinReduce<float>{}, c, in.device.data(), IndexedOut<float>{nullptr, idx_min.data()});
      EXPECT_TRUE(std::isnan(s.host()[0]) && std::isnan(mean.host()[0]) && std::isnan(var.host()[0]));
      EXPECT_TRUE(all_close(s.host(), cpu_values(ember::sum(in.cpu, dims)), 0.0));
      EXPECT_TRUE(all_close(hi.host(), cpu_values(ember::amax(in.cpu, dims)), 0.0));
      EXPECT_TRUE(all_close(lo.host(), cpu_values(ember::amin(in.cpu, dims)), 0.0));
      EXPECT_EQ(idx.host()[0], where);
      EXPECT_EQ(idx_min.host()[0], where);
      EXPECT_TRUE(std::isnan(vals.host()[0]));
      const Tensor want = c.layout == Layout::kAll ? ember::argmax(in.cpu) : ember::argmax(in.cpu, 1);
      EXPECT_TRUE(all_close(idx.host(), cpu_values(want), 0.0));
    }
  }
  // All -inf: the first one; +inf beats every number.
  const std::vector<float> ninf(70, -INFINITY);
  DeviceArray<float> dn(ninf, 1);
  DeviceArray<int64_t> i1(2);
  run(ArgMaxReduce<float>{}, last(2, 35), dn.data(), IndexedOut<float>{nullptr, i1.data()});
  EXPECT_EQ(i1.host(), (std::vector<int64_t>{0, 0}));
  std::vector<float> pinf(2000, 1.0f);
  pinf[1500] = INFINITY;
  pinf[1700] = INFINITY;
  DeviceArray<float> dp(pinf);
  DeviceArray<int64_t> i2(1);
  run(ArgMaxReduce<float>{}, all(2000), dp.data(), IndexedOut<float>{nullptr, i2.data()});
  EXPECT_EQ(i2.host()[0], 1500);
}

// The same input gives the same bits on every run (no atomics; fixed merge order).
TEST(CudaReduce, SplitReductionsAreDeterministic) {
  EMBER_NEED_DEVICE();
  const Case c = all(40001);
  Input<float> in(c, test::random_doubles(size_t(c.n), 600), 1);
  DeviceArray<float> a(1), b(1);
  run(SumReduce<float>{}, c, in.device.data(), a.data());
  run(SumReduce<float>{}, c, in.device.data(), b.data());
  const float x = a.host()[0], y = b.host()[0];
  EXPECT_EQ(std::memcmp(&x, &y, sizeof(float)), 0);
}

// The block-per-row and middle-dim kernels stride over their work by the grid, but the
// host launcher gives every row (tile) a block of its own; with a grid of two blocks each
// block reduces several, reusing block_merge's and the column tree's shared memory: the
// barriers before that reuse are exercised here (and by the emulator's racecheck).
template <class R>
void check_several_turns(const R& r, uint32_t seed) {
  using Out = typename R::Out;
  constexpr bool kIndexed = std::is_same_v<Out, IndexedOut<float>>;
  const LaunchConfig two_blocks{dim3(2), dim3(kBlockThreads), 0};
  for (const Case& c : {last(7, 1500), middle(3, 300, 40)}) {
    SCOPED_TRACE(c.str());
    Input<float> in(c, small_integers(size_t(c.numel()), seed++), 1);
    const int64_t m = c.outputs();
    DeviceArray<float> want(m), got(m);
    DeviceArray<int64_t> want_idx(m), got_idx(m);
    auto out = [&](DeviceArray<float>& v, DeviceArray<int64_t>& i) {
      if constexpr (kIndexed) return Out{v.data(), i.data()};
      else return v.data();
    };
    run(r, c, in.device.data(), out(want, want_idx));
    if (c.layout == Layout::kLast)
      launch<reduce_last_dim_kernel<R, false>>(two_blocks, nullptr, r, in.device.data(), out(got, got_idx), nullptr,
                                               c.outer, c.n, int64_t(1), c.n, 0);
    else
      launch<reduce_middle_dim_kernel<R, false>>(two_blocks, nullptr, r, in.device.data(), out(got, got_idx), nullptr,
                                                 c.outer, c.n, c.inner, 32, int64_t(1), c.n, c.n);
    test::synchronize();
    if constexpr (std::is_same_v<R, VarReduce<float>>) {
      // The launcher splits the middle-dim columns: its Welford states merge in another
      // order, a few roundings of a variance near 27 apart.
      const std::vector<float> w = want.host();
      EXPECT_TRUE(all_close(got.host(), std::vector<double>(w.begin(), w.end()), 1e-5));
    } else {
      EXPECT_EQ(got.host(), want.host());  // integers: exact in any order
    }
    if constexpr (kIndexed) {
      EXPECT_EQ(got_idx.host(), want_idx.host());
    }
  }
}

TEST(CudaReduce, BlocksThatTakeSeveralRowsReuseTheirSharedMemory) {
  EMBER_NEED_DEVICE();
  check_several_turns(SumReduce<float>{}, 700);      // block_reduce
  check_several_turns(ArgMaxReduce<float>{}, 710);   // block_merge of {value, index}
  check_several_turns(VarReduce<float>{1}, 720);     // block_merge of a Welford state
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CudaReduce, BadArgumentsRaise) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> x(8192), out(4);
  DeviceArray<int64_t> idx(4);
  auto has = [](const std::string& err, const char* what) {
    return err.find(what) != std::string::npos ? ::testing::AssertionSuccess()
                                               : ::testing::AssertionFailure() << "\"" << err << "\" lacks \"" << what << "\"";
  };
  EXPECT_TRUE(has(error_of([&] { reduce_last_dim(MaxReduce<float>{}, x.data(), out.data(), 2, 0, nullptr, 0, nullptr); }),
                  "amax): cannot reduce over 0 elements"));
  EXPECT_TRUE(has(error_of([&] {
                    reduce_middle_dim(ArgMaxReduce<float>{}, x.data(), IndexedOut<float>{nullptr, idx.data()}, 2, 0, 2,
                                      nullptr, 0, nullptr);
                  }),
                  "argmax): cannot reduce over 0 elements"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(ArgMinReduce<float>{}, x.data(), IndexedOut<float>{}, 5, nullptr, 0, nullptr); }),
                  "indices output is null"));
  EXPECT_TRUE(has(error_of([&] { reduce_last_dim(SumReduce<float>{}, x.data(), out.data(), -1, 5, nullptr, 0, nullptr); }),
                  "negative size"));
  EXPECT_TRUE(has(error_of([&] { reduce_middle_dim(SumReduce<float>{}, x.data(), out.data(), 2, 3, -2, nullptr, 0, nullptr); }),
                  "negative size"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(SumReduce<float>{}, x.data(), static_cast<float*>(nullptr), 5, nullptr, 0, nullptr); }),
                  "output is null"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(SumReduce<float>{}, static_cast<float*>(nullptr), out.data(), 5, nullptr, 0, nullptr); }),
                  "input is null"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(VarReduce<float>{-1}, x.data(), out.data(), 5, nullptr, 0, nullptr); }),
                  "correction must be >= 0, got -1"));
  // A split reduction without its workspace, or with too little.
  const size_t need = reduce_all_workspace<SumReduce<float>>(8192);
  ASSERT_GT(need, 0u);
  DeviceArray<unsigned char> ws(need);
  EXPECT_TRUE(has(error_of([&] { reduce_all(SumReduce<float>{}, x.data(), out.data(), 8192, nullptr, 0, nullptr); }),
                  "bytes of workspace"));
  EXPECT_TRUE(has(error_of([&] { reduce_all(SumReduce<float>{}, x.data(), out.data(), 8192, ws.data(), need - 1, nullptr); }),
                  "bytes of workspace"));
  const size_t need_oi = reduce_outer_inner_workspace<SumReduce<float>>(4, 2, 1024);
  ASSERT_GT(need_oi, 0u);
  DeviceArray<unsigned char> ws_oi(need_oi);
  EXPECT_TRUE(has(error_of([&] {
                    reduce_outer_inner(SumReduce<float>{}, x.data(), out.data(), 4, 2, 1024, ws_oi.data(), need_oi - 1,
                                       nullptr);
                  }),
                  "bytes of workspace"));
  // Nothing to compute: no outputs, whatever the reduced length.
  EXPECT_EQ(error_of([&] { reduce_last_dim(MaxReduce<float>{}, x.data(), out.data(), 0, 0, nullptr, 0, nullptr); }), "");
  EXPECT_EQ(error_of([&] { reduce_middle_dim(MaxReduce<float>{}, x.data(), out.data(), 3, 5, 0, nullptr, 0, nullptr); }), "");
}

}  // namespace
}  // namespace ember::kernels::cuda
