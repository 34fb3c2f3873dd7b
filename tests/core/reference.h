// Test helpers for core ops: a float64 reference style, and a closeness check that
// prints the worst element and its index, so a failure says where and by how much.
//
// Policy: a test reads an op's inputs back as float64 (values(t)), computes what the op
// should give with a plain loop in double, and compares with expect_close / EXPECT_CLOSE.
// The tolerance for element i is atol + rtol * |want_i| (or a per-element vector when the
// error bound depends on the data, as for matmul). NaN must meet NaN, and an infinity
// must meet the same infinity.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iomanip>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ember.h"

namespace ember::test {

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// The values 0, 1, 2, ... in row-major order: an element's value is its linear index.
inline Tensor iota(const Shape& shape, DType dtype = kFloat32) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return tensor(v, shape, dtype);
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// gradcheck as a gtest assertion: the failure message names the input, element and values.
inline ::testing::AssertionResult grad_ok(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                          const std::vector<Tensor>& inputs, double eps = 1e-6, double atol = 1e-5,
                                          double rtol = 1e-3) {
  try {
    gradcheck(fn, inputs, eps, atol, rtol);
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  return ::testing::AssertionSuccess();
}

// The message of the ember::Error `fn` throws; fails the test when it throws nothing.
template <class Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected ember::Error";
  return {};
}

// ----- indices -----
// Row-major multi-index of a flat index.
inline Shape unravel(int64_t flat, const Shape& shape) {
  Shape idx(shape.size(), 0);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] > 0) {
      idx[d] = flat % shape[d];
      flat /= shape[d];
    }
  }
  return idx;
}
inline int64_t ravel(const Shape& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}
// NumPy broadcasting of several shapes (independent of ember's broadcast_shapes).
inline Shape broadcast_all(const std::vector<Shape>& shapes) {
  size_t n = 0;
  for (const Shape& s : shapes) n = std::max(n, s.size());
  Shape out(n, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[n - s.size() + i];
      if (o == 1) o = s[i];
    }
  }
  return out;
}
// Flat index into an operand of shape `src` read at output index `out_idx` (broadcast).
inline int64_t broadcast_source(const Shape& out_idx, const Shape& src) {
  size_t lead = out_idx.size() - src.size();
  int64_t flat = 0;
  for (size_t i = 0; i < src.size(); ++i) flat = flat * src[i] + (src[i] == 1 ? 0 : out_idx[lead + i]);
  return flat;
}

// Reference of a broadcasting binary op on float64 values.
inline std::vector<double> ref_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f,
                                      Shape* out_shape = nullptr) {
  Shape shape = broadcast_all({a.shape(), b.shape()});
  std::vector<double> va = values(a), vb = values(b), out(static_cast<size_t>(shape_numel(shape)));
  if (a.shape() == b.shape()) {  // no broadcasting: skip the index arithmetic
    for (size_t i = 0; i < out.size(); ++i) out[i] = f(va[i], vb[i]);
    if (out_shape) *out_shape = shape;
    return out;
  }
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    Shape idx = unravel(i, shape);
    out[i] = f(va[broadcast_source(idx, a.shape())], vb[broadcast_source(idx, b.shape())]);
  }
  if (out_shape) *out_shape = shape;
  return out;
}
inline std::vector<double> ref_unary(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = values(x);
  for (double& e : v) e = f(e);
  return v;
}

// ----- making inputs -----
// Contiguous, a transposed view (last two dims; 1-D falls back to Strided), or every
// other element of a storage twice as wide in the last dim. The values are the same.
enum class Layout { Contiguous, Transposed, Strided };
inline const char* layout_name(Layout l) {
  return l == Layout::Contiguous ? "contiguous" : l == Layout::Transposed ? "transposed" : "strided";
}

inline Tensor make_tensor(const std::vector<double>& v, const Shape& shape, DType dtype,
                          Layout layout = Layout::Contiguous) {
  Tensor src = tensor(v, shape, dtype);
  const int64_t n = static_cast<int64_t>(shape.size());
  if (layout == Layout::Contiguous || n == 0) return src;
  if (layout == Layout::Transposed && n >= 2) {
    Shape swapped = shape;
    std::swap(swapped[n - 1], swapped[n - 2]);
    Tensor view = zeros(swapped, dtype).transpose(n - 2, n - 1);
    view.copy_(src);
    return view;
  }
  Shape wide = shape;
  wide[n - 1] *= 2;
  Tensor view = zeros(wide, dtype).slice(n - 1, 0, wide[n - 1], 2);
  view.copy_(src);
  return view;
}

// N(0, 1) values from ember::randn (seeded), optionally mapped in double, then rounded
// to `dtype` and laid out as asked. Read them back with values() for the reference.
inline Tensor random_tensor(const Shape& shape, DType dtype, Layout layout = Layout::Contiguous, uint64_t seed = 1,
                            const std::function<double(double)>& map = {}) {
  Generator gen(seed);
  // Drawn on the host: the values, not the device's generator, are what is tested here.
  std::vector<double> v = randn(shape, {kFloat64, Device::cpu()}, &gen).to_vector<double>();
  if (map) {
    for (double& e : v) e = map(e);
  }
  return make_tensor(v, shape, dtype, layout);
}

// ----- rounding-error bounds -----
// The unit roundoff u of a floating dtype (half an ulp at 1): 2^-24 float32, 2^-53
// float64, 2^-8 bfloat16, 2^-11 float16.
inline double dtype_unit_roundoff(DType d) {
  if (d == kFloat64) return 0x1p-53;
  if (d == kFloat32) return 0x1p-24;
  if (d == kBFloat16) return 0x1p-8;
  return 0x1p-11;
}
// Half the smallest subnormal of a floating dtype: where results underflow, rounding to
// nearest is off by up to this much absolutely, not by u of the result (2^-25 float16,
// 2^-134 bfloat16, 2^-150 float32; float64's 2^-1075 is taken as 2^-1074).
inline double dtype_underflow(DType d) {
  if (d == kFloat64) return 0x1p-1074;
  if (d == kFloat32) return 0x1p-150;
  if (d == kBFloat16) return 0x1p-134;
  return 0x1p-25;
}
// gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability, 3.1): a value computed with
// at most n roundings on any path from the operands (sums in any order or blocking, with
// or without FMA, which only removes roundings) is off by at most gamma_n times the same
// computation on the operands' absolute values.
inline double gamma_n(double n, double u) { return n * u / (1 - n * u); }

// ----- closeness -----
inline ::testing::AssertionResult all_close_tol(const Tensor& got, const std::vector<double>& want,
                                                const Shape& want_shape, const std::vector<double>& tol) {
  if (!got.defined()) return ::testing::AssertionFailure() << "result tensor is undefined";
  if (got.shape() != want_shape) {
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " != expected "
                                         << shape_str(want_shape);
  }
  const int64_t n = static_cast<int64_t>(want.size());
  if (n != shape_numel(want_shape) || tol.size() != want.size()) {
    return ::testing::AssertionFailure() << "test bug: " << n << " reference values for shape "
                                         << shape_str(want_shape);
  }
  std::vector<double> g = values(got);
  int64_t bad = 0, worst = -1;
  double worst_score = -1;
  for (int64_t i = 0; i < n; ++i) {
    double w = want[i], x = g[i], score;
    bool ok;
    if (std::isnan(w) || std::isnan(x)) {
      ok = std::isnan(w) && std::isnan(x);
      score = ok ? 0 : std::numeric_limits<double>::infinity();
    } else if (std::isinf(w) || std::isinf(x)) {
      ok = w == x;
      score = ok ? 0 : std::numeric_limits<double>::infinity();
    } else {
      double err = std::fabs(x - w);
      ok = err <= tol[i];
      score = tol[i] > 0 ? err / tol[i] : (err > 0 ? std::numeric_limits<double>::infinity() : 0);
    }
    if (!ok) ++bad;
    if (!ok && score > worst_score) {
      worst_score = score;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os << std::setprecision(17) << bad << " of " << n << " elements differ; worst at flat index " << worst
     << " (index " << shape_str(unravel(worst, want_shape)) << "): got " << g[worst] << ", want " << want[worst]
     << ", |diff| " << std::fabs(g[worst] - want[worst]) << " > tol " << tol[worst] << " [dtype "
     << dtype_name(got.dtype()) << ", shape " << shape_str(want_shape) << "]";
  return ::testing::AssertionFailure() << os.str();
}

inline ::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, const Shape& want_shape,
                                            double rtol, double atol) {
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < want.size(); ++i) tol[i] = atol + rtol * std::fabs(want[i]);
  return all_close_tol(got, want, want_shape, tol);
}
inline ::testing::AssertionResult all_close(const Tensor& got, const Tensor& want, double rtol, double atol) {
  return all_close(got, values(want), want.shape(), rtol, atol);
}

// Non-fatal check; prefer EXPECT_CLOSE, which reports the caller's line.
inline void expect_close(const Tensor& got, const std::vector<double>& want, const Shape& want_shape, double rtol,
                         double atol) {
  EXPECT_TRUE(all_close(got, want, want_shape, rtol, atol));
}

// ----- errors -----
// The what() of the ember::Error that f throws, or a marker when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no ember::Error was thrown>";
}

}  // namespace ember::test

#define EXPECT_CLOSE(got, want, shape, rtol, atol) EXPECT_TRUE(::ember::test::all_close((got), (want), (shape), (rtol), (atol)))
#define EXPECT_DTYPE(t, d) EXPECT_EQ(::ember::dtype_name((t).dtype()), ::ember::dtype_name(d))
// Expects `statement` to throw ember::Error whose message contains every given substring.
#define EXPECT_EMBER_ERROR(statement, ...)                                                          \
  do {                                                                                              \
    const std::string msg_ = ::ember::test::error_of([&] { (void)(statement); });                  \
    for (const char* sub_ : {__VA_ARGS__})                                                          \
      EXPECT_NE(msg_.find(sub_), std::string::npos) << "expected \"" << sub_ << "\" in: " << msg_; \
  } while (0)
