// The harness of the reduction kernels' tests (test_reduce.cpp: exact results on small
// integers and the launch plans; test_reduce_reals.cpp: rounding bounds on reals, NaN,
// determinism, bad arguments): the reduction cases, a run through the host launcher, inputs
// on the device and the CPU, and the exact checks.
#pragma once

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

namespace ember::kernels::cuda::reduce_test {

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
inline Case last(int64_t rows, int64_t cols) { return {Layout::kLast, rows, cols, 1}; }
inline Case middle(int64_t outer, int64_t n, int64_t inner) { return {Layout::kMiddle, outer, n, inner}; }
inline Case all(int64_t n) { return {Layout::kAll, 1, n, 1}; }
inline Case outer_inner(int64_t outer, int64_t n, int64_t inner) { return {Layout::kOuterInner, outer, n, inner}; }

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

inline std::vector<double> small_integers(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> cpu_values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

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
inline const std::vector<Case>& last_dim_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v = {last(0, 0), last(0, 5), last(3, 0), last(2, 1024), last(3, 1025), last(33, 2000)};
    for (int64_t rows : test::kAwkwardSizes)
      for (int64_t cols : test::kAwkwardSizes)
        if (rows > 0 && cols > 0 && rows * cols <= kMaxElements) v.push_back(last(rows, cols));
    return v;
  }();
  return cases;
}
inline const std::vector<Case>& middle_dim_cases() {
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
inline const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> v = {all(1025), all(40001), all(131073)};
    for (int64_t n : test::kAwkwardSizes) v.push_back(all(n));
    return v;
  }();
  return cases;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}


}  // namespace ember::kernels::cuda::reduce_test
