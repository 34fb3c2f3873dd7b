// Reductions against a float64 reference: sum, mean, amax, amin, var (correction 0 and
// 1) over one, several (negative included) and all dims, keepdim both ways, contiguous
// and transposed inputs, empty reductions, a 1,000,003-element float32 sum; max/min over a
// dim with indices, argmax/argmin; NaN propagation; dtypes of integer sums; errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ember.h"
#include "reference.h"

namespace ember::test {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// The input's values grouped by output element: group k holds, in row-major order of
// the reduced dims, the values that reduce into output element k. Empty dims = all.
struct Groups {
  Shape shape;  // the output shape (keepdim applied)
  std::vector<std::vector<double>> groups;
};
Groups group_by(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const int64_t n = x.dim();
  std::vector<bool> reduced(n, dims.empty());
  for (int64_t d : dims) reduced[d < 0 ? d + n : d] = true;
  Shape full, out;  // full: keepdim-style shape, used for indexing
  for (int64_t d = 0; d < n; ++d) {
    full.push_back(reduced[d] ? 1 : x.size(d));
    if (!reduced[d] || keepdim) out.push_back(full.back());
  }
  Groups g{out, std::vector<std::vector<double>>(shape_numel(full))};
  std::vector<double> v = values(x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape idx = unravel(i, x.shape());
    for (int64_t d = 0; d < n; ++d) {
      if (reduced[d]) idx[d] = 0;
    }
    g.groups[ravel(idx, full)].push_back(v[i]);
  }
  return g;
}

double ref_sum(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return s;
}
double ref_mean(const std::vector<double>& v) { return v.empty() ? kNaN : ref_sum(v) / double(v.size()); }
double ref_var(const std::vector<double>& v, int64_t correction) {
  double m = ref_mean(v), s = 0;
  for (double e : v) s += (e - m) * (e - m);
  return s / double(static_cast<int64_t>(v.size()) - correction);
}
// Index of the first maximum (or minimum); a NaN counts as the maximum (and minimum).
int64_t ref_arg(const std::vector<double>& v, bool want_max) {
  int64_t best = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) {
    if (std::isnan(v[i])) return i;
    if (want_max ? v[i] > v[best] : v[i] < v[best]) best = i;
  }
  return best;
}

std::vector<double> per_group(const Groups& g, const std::function<double(const std::vector<double>&)>& f) {
  std::vector<double> out;
  for (const auto& grp : g.groups) out.push_back(f(grp));
  return out;
}

// Rounding bounds, with gamma_n = n*u/(1-n*u). Float sums accumulate in double
// (kernels/cpu/reduce.cpp) and are rounded once to the dtype, so a sum S of n values
// is off by at most u*|S| + gamma_n(2^-53) * sum|x|, whatever the vector width or the
// lanes' order; u is the dtype's unit roundoff.
double gamma(double n, double u) { return n * u / (1 - n * u); }
constexpr double kUnitDouble = 0x1p-53;
double abs_sum(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += std::fabs(e);
  return s;
}
double sum_bound(const std::vector<double>& v, double u) {
  return u * std::fabs(ref_sum(v)) + gamma(static_cast<double>(v.size()), kUnitDouble) * abs_sum(v);
}
// The mean: the sum's bound over n, and one more rounding of the quotient.
double mean_bound(const std::vector<double>& v, double u) {
  return sum_bound(v, u) / static_cast<double>(v.size()) + u * std::fabs(ref_mean(v));
}
// var = sum((x - m')^2) / (n - c) in the dtype (core/ops_reduce.cpp), m' the rounded mean.
// Since sum(x - m) = 0, an error e in m' adds only n*e^2 to the sum of squares; each
// square carries the roundings of x - m', of the square and (relative to the nonnegative
// sum) of the double accumulation; then the sum's and the quotient's: 5u + gamma_n.
double var_bound(const std::vector<double>& v, double u, int correction) {
  const double n = static_cast<double>(v.size()), e = mean_bound(v, u);
  return (5 * u + gamma(n, kUnitDouble)) * ref_var(v, correction) * (1 + 6 * u) + n * e * e / (n - correction);
}

struct ReduceCase {
  const char* name;
  Tensor (*op)(const Tensor&, const std::vector<int64_t>&, bool);
  double (*ref)(const std::vector<double>&);
  double (*bound)(const std::vector<double>&, double u);  // |result - ref| at most
};
const ReduceCase kReductions[] = {
    {"sum", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return sum(x, d, k); }, ref_sum, sum_bound},
    {"mean", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return mean(x, d, k); }, ref_mean, mean_bound},
    {"amax", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return amax(x, d, k); },
     [](const std::vector<double>& v) { return v[ref_arg(v, true)]; }, [](const std::vector<double>&, double) { return 0.0; }},
    {"amin", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return amin(x, d, k); },
     [](const std::vector<double>& v) { return v[ref_arg(v, false)]; }, [](const std::vector<double>&, double) { return 0.0; }},
    {"var0", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return var(x, d, 0, k); },
     [](const std::vector<double>& v) { return ref_var(v, 0); },
     [](const std::vector<double>& v, double u) { return var_bound(v, u, 0); }},
    {"var1", [](const Tensor& x, const std::vector<int64_t>& d, bool k) { return var(x, d, 1, k); },
     [](const std::vector<double>& v) { return ref_var(v, 1); },
     [](const std::vector<double>& v, double u) { return var_bound(v, u, 1); }},
};

struct DimsCase {
  Shape shape;
  std::vector<int64_t> dims;
};
const DimsCase kDims[] = {
    {{3, 4, 5}, {}},     {{3, 4, 5}, {0}},     {{3, 4, 5}, {1}},      {{3, 4, 5}, {2}},
    {{3, 4, 5}, {-1}},   {{3, 4, 5}, {0, 2}},  {{3, 4, 5}, {-1, 0}},  {{3, 4, 5}, {1, -1}},
    {{3, 4, 5}, {0, 1, 2}}, {{17, 1, 9}, {1}}, {{17, 1, 9}, {0, 2}},  {{31}, {0}},
    {{31}, {}},          {{1}, {0}},           {{2, 33}, {-2}},       {{6, 7}, {1}},
};

std::string dims_str(const std::vector<int64_t>& d) { return d.empty() ? "all" : shape_str(d); }

TEST(Reduce, MatchesFloat64Reference) {
  uint64_t seed = 1;
  for (const ReduceCase& c : kReductions) {
    for (DType dt : {kFloat32, kFloat64}) {
      for (const DimsCase& dc : kDims) {
        for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
          for (bool keepdim : {false, true}) {
            SCOPED_TRACE(std::string(c.name) + " " + std::string(dtype_name(dt)) + " " + shape_str(dc.shape) +
                         " dims " + dims_str(dc.dims) + (keepdim ? " keepdim " : " ") + layout_name(layout));
            Tensor x = random_tensor(dc.shape, dt, layout, ++seed);
            Groups g = group_by(x, dc.dims, keepdim);
            // n - correction <= 0 is its own test (VarWithTooFewElementsIsNaN).
            if (std::string(c.name) == "var1" && g.groups[0].size() <= 1) continue;
            Tensor y = c.op(x, dc.dims, keepdim);
            EXPECT_DTYPE(y, dt);
            std::vector<double> bound;
            for (const auto& grp : g.groups) bound.push_back(c.bound(grp, dtype_unit_roundoff(dt)));
            EXPECT_TRUE(all_close_tol(y, per_group(g, c.ref), g.shape, bound));
          }
        }
      }
    }
  }
}

TEST(Reduce, ZeroDimInput) {
  Tensor x = scalar_tensor(2.5, kFloat64);
  EXPECT_CLOSE(sum(x), std::vector<double>{2.5}, Shape{}, 0, 0);
  EXPECT_CLOSE(mean(x), std::vector<double>{2.5}, Shape{}, 0, 0);
  EXPECT_CLOSE(amax(x), std::vector<double>{2.5}, Shape{}, 0, 0);
  EXPECT_CLOSE(max(x), std::vector<double>{2.5}, Shape{}, 0, 0);
}

TEST(Reduce, EmptyReductions) {
  EXPECT_CLOSE(sum(zeros({0})), std::vector<double>{0}, Shape{}, 0, 0);
  EXPECT_CLOSE(mean(zeros({0})), std::vector<double>{kNaN}, Shape{}, 0, 0);
  EXPECT_CLOSE(sum(zeros({3, 0}), {1}), std::vector<double>(3, 0.0), Shape{3}, 0, 0);
  EXPECT_CLOSE(sum(zeros({3, 0}), {1}, true), std::vector<double>(3, 0.0), (Shape{3, 1}), 0, 0);
  EXPECT_CLOSE(mean(zeros({3, 0}, kFloat64), {1}), std::vector<double>(3, kNaN), Shape{3}, 0, 0);
  EXPECT_CLOSE(sum(zeros({3, 0}), {0}), std::vector<double>{}, Shape{0}, 0, 0);
  Tensor s = sum(zeros({0}, kInt32));
  EXPECT_DTYPE(s, kInt64);
  EXPECT_EQ(s.item<int64_t>(), 0);
}

TEST(Reduce, LargeFloat32SumIsAccurate) {
  // A float accumulator over 1e6 terms may drift by gamma_1e6(2^-24) ~ 6e-2 of sum|x|
  // (~1e-4 in practice); accumulated in double the bound is one float32 rounding of the
  // result plus gamma_1e6(2^-53) ~ 1e-10 of sum|x| (sum_bound above).
  const double u = dtype_unit_roundoff(kFloat32);
  const int64_t n = 1000003;
  Tensor x = random_tensor({n}, kFloat32, Layout::Contiguous, 42, [](double v) { return std::fabs(v) + 0.5; });
  std::vector<double> v = values(x);
  EXPECT_TRUE(all_close_tol(sum(x), {ref_sum(v)}, Shape{}, {sum_bound(v, u)}));
  EXPECT_TRUE(all_close_tol(mean(x), {ref_mean(v)}, Shape{}, {mean_bound(v, u)}));
  // Mixed signs, strided: the bound scales with sum |x|.
  Tensor y = random_tensor({n}, kFloat32, Layout::Strided, 43);
  std::vector<double> w = values(y);
  EXPECT_TRUE(all_close_tol(sum(y), {ref_sum(w)}, Shape{}, {sum_bound(w, u)}));
  // Many outputs, each a long row.
  Tensor z = random_tensor({3, 333334}, kFloat32, Layout::Contiguous, 44, [](double v) { return v + 2; });
  Groups g = group_by(z, {1}, false);
  std::vector<double> bound;
  for (const auto& grp : g.groups) bound.push_back(sum_bound(grp, u));
  EXPECT_TRUE(all_close_tol(sum(z, {1}), per_group(g, ref_sum), g.shape, bound));
}

TEST(Reduce, VarIsStableForLargeMean) {
  // E[x^2] - E[x]^2 in float32 loses everything at mean 1000, std 1 (an error of
  // u * 1000^2 ~ 6e-2 per term); from the deviations, the bound is var_bound's: a few
  // roundings of var, and the mean's error enters squared.
  Tensor x = random_tensor({4, 5000}, kFloat32, Layout::Contiguous, 7, [](double v) { return 1000 + v; });
  Groups g = group_by(x, {1}, false);
  std::vector<double> bound;
  for (const auto& grp : g.groups) bound.push_back(var_bound(grp, dtype_unit_roundoff(kFloat32), 1));
  EXPECT_TRUE(all_close_tol(var(x, {1}), per_group(g, [](const std::vector<double>& v) { return ref_var(v, 1); }),
                            g.shape, bound));
}

TEST(Reduce, VarWithTooFewElementsIsNaN) {  // PyTorch: 0 / 0 with a warning, not an error
  EXPECT_CLOSE(var(tensor({3.0}, kFloat64)), std::vector<double>{kNaN}, Shape{}, 0, 0);
  EXPECT_CLOSE(var(tensor({3.0}, kFloat64), {}, 0), std::vector<double>{0}, Shape{}, 0, 0);
  EXPECT_CLOSE(var(zeros({2, 1}), {1}), std::vector<double>(2, kNaN), Shape{2}, 0, 0);
  // A correction above n divides by 0, not by a negative count (torch.var gives inf).
  EXPECT_CLOSE(var(tensor({1.0, 3.0}, kFloat64), {}, 5), std::vector<double>{INFINITY}, Shape{}, 0, 0);
  EXPECT_CLOSE(var(zeros({0}, kFloat64)), std::vector<double>{kNaN}, Shape{}, 0, 0);
}

TEST(Reduce, IntegerSumsAreInt64) {
  Tensor x = random_tensor({5, 7}, kInt32, Layout::Transposed, 3, [](double v) { return std::round(50 * v); });
  Tensor s = sum(x), s1 = sum(x, {1});
  EXPECT_DTYPE(s, kInt64);
  EXPECT_DTYPE(s1, kInt64);
  EXPECT_CLOSE(s, std::vector<double>{ref_sum(values(x))}, Shape{}, 0, 0);
  Groups g = group_by(x, {1}, false);
  EXPECT_CLOSE(s1, per_group(g, ref_sum), g.shape, 0, 0);
  // No int32 overflow: 2e9 + 2e9.
  EXPECT_EQ(sum(tensor({2e9, 2e9}, kInt32)).item<int64_t>(), 4000000000LL);
  Tensor b = sum(tensor({1, 0, 1, 1}, kBool));
  EXPECT_DTYPE(b, kInt64);
  EXPECT_EQ(b.item<int64_t>(), 3);
  EXPECT_DTYPE(sum(tensor({1.0}, kUInt8)), kInt64);
}

TEST(Reduce, MaxMinOverDimWithIndices) {
  uint64_t seed = 500;
  auto small_int = [](double v) { return std::round(2 * v); };  // ties: the first index wins
  for (DType dt : {kFloat32, kFloat64, kInt32}) {
    for (const Shape& shape : {Shape{3, 4, 5}, Shape{17, 1, 9}, Shape{31}}) {
      for (int64_t dim = -1; dim < static_cast<int64_t>(shape.size()); ++dim) {
        for (bool keepdim : {false, true}) {
          for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
            SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(shape) + " dim " + std::to_string(dim) +
                         (keepdim ? " keepdim " : " ") + layout_name(layout));
            Tensor x = random_tensor(shape, dt, layout, ++seed, small_int);
            Groups g = group_by(x, {dim}, keepdim);
            auto [vmax, imax] = max(x, dim, keepdim);
            auto [vmin, imin] = min(x, dim, keepdim);
            EXPECT_DTYPE(vmax, dt);
            EXPECT_DTYPE(imax, kInt64);
            EXPECT_DTYPE(imin, kInt64);
            std::vector<double> want_imax = per_group(g, [](const std::vector<double>& v) { return double(ref_arg(v, true)); });
            std::vector<double> want_imin = per_group(g, [](const std::vector<double>& v) { return double(ref_arg(v, false)); });
            EXPECT_CLOSE(vmax, per_group(g, [](const std::vector<double>& v) { return v[ref_arg(v, true)]; }), g.shape, 0, 0);
            EXPECT_CLOSE(vmin, per_group(g, [](const std::vector<double>& v) { return v[ref_arg(v, false)]; }), g.shape, 0, 0);
            EXPECT_CLOSE(imax, want_imax, g.shape, 0, 0);
            EXPECT_CLOSE(imin, want_imin, g.shape, 0, 0);
            Tensor am = argmax(x, dim, keepdim), an = argmin(x, dim, keepdim);
            EXPECT_DTYPE(am, kInt64);
            EXPECT_CLOSE(am, want_imax, g.shape, 0, 0);
            EXPECT_CLOSE(an, want_imin, g.shape, 0, 0);
          }
        }
      }
    }
  }
}

TEST(Reduce, ArgmaxFlattenedAndWholeTensorMax) {
  Tensor x = random_tensor({6, 7}, kFloat32, Layout::Transposed, 9);
  std::vector<double> v = values(x);
  Tensor am = argmax(x), an = argmin(x);
  EXPECT_EQ(am.shape(), Shape{});
  EXPECT_DTYPE(am, kInt64);
  EXPECT_EQ(am.item<int64_t>(), ref_arg(v, true));
  EXPECT_EQ(an.item<int64_t>(), ref_arg(v, false));
  EXPECT_CLOSE(max(x), std::vector<double>{v[ref_arg(v, true)]}, Shape{}, 0, 0);
  EXPECT_CLOSE(min(x), std::vector<double>{v[ref_arg(v, false)]}, Shape{}, 0, 0);
  EXPECT_EQ(argmax(tensor({3.0, 1.0, 3.0, 2.0})).item<int64_t>(), 0);  // first of a tie
}

TEST(Reduce, NaNPropagates) {
  Tensor x = tensor({1.0, 5.0, kNaN, 2.0, -1.0, 0.5, 7.0, 3.0}, {2, 4}, kFloat32);
  EXPECT_CLOSE(amax(x), std::vector<double>{kNaN}, Shape{}, 0, 0);
  EXPECT_CLOSE(amin(x), std::vector<double>{kNaN}, Shape{}, 0, 0);
  EXPECT_CLOSE(max(x), std::vector<double>{kNaN}, Shape{}, 0, 0);
  EXPECT_CLOSE(amax(x, {1}), std::vector<double>({kNaN, 7}), Shape{2}, 0, 0);
  EXPECT_CLOSE(amin(x, {0}), std::vector<double>({-1, 0.5, kNaN, 2}), Shape{4}, 0, 0);
  auto [v, i] = max(x, 1);
  EXPECT_CLOSE(v, std::vector<double>({kNaN, 7}), Shape{2}, 0, 0);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));  // the index points at the NaN
  auto [v0, i0] = max(x, 0);
  EXPECT_CLOSE(v0, std::vector<double>({1, 5, kNaN, 3}), Shape{4}, 0, 0);
  EXPECT_EQ(i0.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 2);
  EXPECT_CLOSE(sum(x, {1}), std::vector<double>({kNaN, 9.5}), Shape{2}, 0, 0);
}

TEST(Reduce, Errors) {
  Tensor x = zeros({2, 3, 4});
  EXPECT_EMBER_ERROR(sum(x, {3}), "dim 3", "out of range");
  EXPECT_EMBER_ERROR(mean(x, {0, 3}), "dim 3", "out of range");
  EXPECT_EMBER_ERROR(amax(x, {3}), "dim 3", "out of range");
  EXPECT_EMBER_ERROR(var(x, {3}), "dim 3", "out of range");
  EXPECT_EMBER_ERROR(max(x, 3), "dim 3", "out of range");
  EXPECT_EMBER_ERROR(argmax(x, 3), "dim 3", "out of range");
  EXPECT_EMBER_ERROR(max(zeros({3, 0}), 1), "max");
  EXPECT_EMBER_ERROR(min(zeros({3, 0}), 1), "min");
  EXPECT_THROW(argmax(zeros({0})), Error);
  EXPECT_THROW(max(zeros({0})), Error);
}

}  // namespace
}  // namespace ember::test
