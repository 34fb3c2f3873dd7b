// Issue 30's tensor ops: sin, cos, tril / triu, norm, all / any, topk, split / chunk,
// unfold, index_add, rand_like / randn_like. Each against a float64 loop at awkward
// sizes (odd, empty, non-contiguous), with gradcheck and gradgradcheck where it is
// differentiable, and its bad arguments as ember::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "tests/core/grad_helpers.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

using Ins = std::vector<Tensor>;
constexpr double kU32 = 0x1p-24;


TEST(TensorErgonomics, SinCosMatchAFloat64Loop) {
  for (Layout layout : {Layout::Contiguous, Layout::Transposed, Layout::Strided}) {
    for (const Shape& shape : std::vector<Shape>{{0}, {7}, {3, 17}, {2, 5, 9}}) {
      const Tensor x = random_tensor(shape, kFloat32, layout, 3, [](double v) { return 4 * v; });
      std::vector<double> s, c;
      for (double v : values(x)) {
        s.push_back(std::sin(v));
        c.push_back(std::cos(v));
      }
      // float32 sin / cos are within a few ulp of 1 (the results' scale) on both backends.
      EXPECT_CLOSE(sin(x), s, shape, 0, 8 * kU32);
      EXPECT_CLOSE(x.cos(), c, shape, 0, 8 * kU32);
    }
  }
  EXPECT_EQ(sin(tensor({1, 2}, kInt64)).dtype(), kFloat32);  // integers compute in float32
  EXPECT_TRUE(grad_ok([](const Ins& v) { return mul(sin(v[0]), cos(v[0])); }, {leaf({3, 4}, 1)}));
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { return sin(v[0]); }, {leaf({3, 4}, 2)}));
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { return cos(v[0]); }, {leaf({3, 4}, 3)}));
}

TEST(TensorErgonomics, TrilTriuKeepTheirTriangle) {
  for (int64_t diag : {-2, -1, 0, 1, 3}) {
    for (const Shape& shape : std::vector<Shape>{{3, 5}, {2, 4, 3}, {0, 3}, {1, 1}}) {
      const Tensor x = random_tensor(shape, kFloat32, Layout::Transposed, 4);
      const std::vector<double> xv = values(x);
      const int64_t R = shape[shape.size() - 2], C = shape.back();
      std::vector<double> lo(xv.size()), up(xv.size());
      for (size_t i = 0; i < xv.size(); ++i) {
        const int64_t r = (static_cast<int64_t>(i) / C) % R, c = static_cast<int64_t>(i) % C;
        lo[i] = c - r <= diag ? xv[i] : 0;
        up[i] = c - r >= diag ? xv[i] : 0;
      }
      EXPECT_CLOSE(tril(x, diag), lo, shape, 0, 0);
      EXPECT_CLOSE(x.triu(diag), up, shape, 0, 0);
    }
  }
  EXPECT_EQ(tril(tensor({1, 2, 3, 4}, {2, 2}, kInt64)).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 3, 4}));
  EXPECT_TRUE(contains(error_message([] { tril(zeros({4})); }), "at least 2 dims"));
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { return mul(triu(v[0], 1), v[0]); }, {leaf({3, 4}, 5)}));
}

double ref_norm(const std::vector<double>& v, double p) {
  const double inf = std::numeric_limits<double>::infinity();
  double acc = p == -inf ? inf : 0;
  for (double e : v) {
    const double a = std::fabs(e);
    if (p == inf) acc = std::max(acc, a);
    else if (p == -inf) acc = std::min(acc, a);
    else if (p == 0) acc += a != 0;
    else acc += std::pow(a, p);
  }
  return std::isinf(p) || p == 0 ? acc : std::pow(acc, 1 / p);
}

TEST(TensorErgonomics, NormMatchesAFloat64Loop) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = random_tensor({3, 5, 7}, kFloat32, Layout::Strided, 6);
  const std::vector<double> xv = values(x);
  for (double p : {2.0, 1.0, inf, -inf, 0.0, 3.0, 0.5}) {
    EXPECT_CLOSE(norm(x, p), std::vector<double>{ref_norm(xv, p)}, Shape{}, 300 * kU32, 0) << "p = " << p;
    // Along dim 1, keepdim.
    std::vector<double> want;
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t c = 0; c < 7; ++c) {
        std::vector<double> line;
        for (int64_t b = 0; b < 5; ++b) line.push_back(xv[(a * 5 + b) * 7 + c]);
        want.push_back(ref_norm(line, p));
      }
    EXPECT_CLOSE(x.norm(p, {1}, true), want, Shape({3, 1, 7}), 30 * kU32, 0) << "p = " << p;
  }
  EXPECT_EQ(norm(zeros({0})).item<double>(), 0);
  EXPECT_TRUE(contains(error_message([] { norm(tensor({1, 2}, kInt64)); }), "floating"));
  // Gradients, also where an element or the whole norm is zero (PyTorch gives 0 there).
  const Tensor nz = leaf({2, 3}, 7, [](double v) { return v >= 0 ? v + 0.5 : v - 0.5; });
  for (double p : {2.0, 1.0, 3.0, 1.5, inf}) {
    EXPECT_TRUE(grad_ok([p](const Ins& v) { return norm(v[0], p, {1}); }, {nz})) << "p = " << p;
    EXPECT_TRUE(gradgrad_ok([p](const Ins& v) { return norm(v[0], p); }, {nz})) << "p = " << p;
  }
  Tensor z = zeros({3}, kFloat64).requires_grad_();
  norm(z).backward();
  EXPECT_EQ(z.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
}

TEST(TensorErgonomics, AllAnyWholeAndAlongADim) {
  const Tensor x = tensor({1, 0, 2, 3, 4, 5, 0, 0, 0}, {3, 3});
  EXPECT_FALSE(all(x).item<bool>());
  EXPECT_TRUE(any(x).item<bool>());
  EXPECT_EQ(all(x).dtype(), kBool);
  EXPECT_EQ(x.all(1).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(x.any(1, true).to_vector<bool>(), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(x.any(1, true).shape(), Shape({3, 1}));
  EXPECT_EQ(any(x.t(), 0).to_vector<bool>(), (std::vector<bool>{true, true, false}));  // non-contiguous
  EXPECT_TRUE(all(zeros({0})).item<bool>());  // empty: all true, any false, as PyTorch
  EXPECT_FALSE(any(zeros({0})).item<bool>());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(all(tensor({nan, 1})).item<bool>());  // NaN is nonzero
  EXPECT_TRUE(any(tensor({0, 1}, kBool)).item<bool>());
  EXPECT_TRUE(contains(error_message([&] { all(x, 2); }), "dim"));
}

// The reference: each row's indices sorted by value (largest: descending, NaN first;
// smallest: ascending, NaN last), ties by index.
void ref_topk(const std::vector<double>& row, int64_t k, bool largest, std::vector<double>& v, std::vector<int64_t>& ix) {
  std::vector<int64_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool na = std::isnan(row[a]), nb = std::isnan(row[b]);
    if (na != nb) return largest ? na : nb;
    if (na) return false;
    return largest ? row[a] > row[b] : row[a] < row[b];
  });
  for (int64_t q = 0; q < k; ++q) {
    v.push_back(row[order[q]]);
    ix.push_back(order[q]);
  }
}

TEST(TensorErgonomics, TopkMatchesASortedFloat64Loop) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (bool largest : {true, false}) {
    for (int64_t k : {0, 1, 3, 9}) {
      // [4, 9, 5] along dim 1, non-contiguous, with ties and a NaN.
      Tensor x = random_tensor({4, 5, 9}, kFloat32, Layout::Contiguous, 8, [](double v) { return std::round(2 * v); });
      std::vector<double> xv = values(x);
      xv[7] = nan;
      x = tensor(xv, {4, 5, 9}).transpose(1, 2);
      const std::vector<double> tv = values(x);
      std::vector<double> want_v(4 * k * 5);
      std::vector<double> want_i(4 * k * 5);
      for (int64_t a = 0; a < 4; ++a)
        for (int64_t c = 0; c < 5; ++c) {
          std::vector<double> row;
          for (int64_t b = 0; b < 9; ++b) row.push_back(tv[(a * 9 + b) * 5 + c]);
          std::vector<double> v;
          std::vector<int64_t> ix;
          ref_topk(row, k, largest, v, ix);
          for (int64_t q = 0; q < k; ++q) {
            want_v[(a * k + q) * 5 + c] = v[q];
            want_i[(a * k + q) * 5 + c] = static_cast<double>(ix[q]);
          }
        }
      auto [values_, indices] = x.topk(k, 1, largest);
      EXPECT_CLOSE(values_, want_v, Shape({4, k, 5}), 0, 0) << "largest " << largest << " k " << k;
      EXPECT_EQ(indices.dtype(), kInt64);
      EXPECT_CLOSE(indices, want_i, Shape({4, k, 5}), 0, 0) << "largest " << largest << " k " << k;
    }
  }
  EXPECT_EQ(topk(tensor({3, 1, 2}), 2).second.to_vector<int64_t>(), (std::vector<int64_t>{0, 2}));
  EXPECT_TRUE(contains(error_message([] { topk(zeros({3}), 4); }), "out of range"));
  EXPECT_TRUE(contains(error_message([] { topk(zeros({3}), -1); }), "out of range"));
  EXPECT_TRUE(contains(error_message([] { topk(zeros({3}), 1, 1); }), "dim"));
  const Tensor x = leaf({3, 6}, 9);
  EXPECT_TRUE(grad_ok([](const Ins& v) { return topk(v[0], 2, 1).first; }, {x}));
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { return mul(topk(v[0], 3, 0, false).first, v[0].narrow(0, 0, 3)); }, {x}));
}

TEST(TensorErgonomics, SplitAndChunkAreViews) {
  const Tensor x = iota({7, 4});
  std::vector<Tensor> parts = x.split(3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), Shape({1, 4}));
  EXPECT_TRUE(parts[1].shares_storage_with(x));
  EXPECT_EQ(parts[1].at({0, 0}), 12);
  parts = split(x, {1, 0, 3}, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].shape(), Shape({7, 0}));
  EXPECT_EQ(parts[2].at({1, 0}), 5);
  parts = chunk(x, 3, 0);  // ceil(7 / 3) = 3: sizes 3, 3, 1
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), Shape({1, 4}));
  EXPECT_EQ(chunk(iota({6}), 4).size(), 3u);  // sizes 2, 2, 2: fewer than asked, as PyTorch
  EXPECT_EQ(chunk(zeros({0}), 2).size(), 2u);
  EXPECT_TRUE(contains(error_message([&] { split(x, {2, 2}); }), "sum to 4"));
  EXPECT_TRUE(contains(error_message([&] { x.split(0); }), "positive"));
  EXPECT_TRUE(contains(error_message([&] { chunk(x, 0); }), "positive"));
  const Tensor l = leaf({5, 3}, 10);
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { auto p = chunk(v[0], 2); return mul(p[0], p[0]).sum() + p[1].sum(); }, {l}));
}

TEST(TensorErgonomics, UnfoldIsTheWindowView) {
  const Tensor x = iota({2, 9});
  const Tensor u = x.unfold(1, 4, 2);  // windows at 0, 2, 4: (9 - 4) / 2 + 1 = 3
  EXPECT_EQ(u.shape(), Shape({2, 3, 4}));
  EXPECT_TRUE(u.shares_storage_with(x));
  std::vector<double> want;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t w = 0; w < 3; ++w)
      for (int64_t j = 0; j < 4; ++j) want.push_back(a * 9 + w * 2 + j);
  EXPECT_CLOSE(u, want, Shape({2, 3, 4}), 0, 0);
  EXPECT_EQ(unfold(x, 0, 2, 1).shape(), Shape({1, 9, 2}));
  EXPECT_EQ(x.unfold(1, 0, 5).shape(), Shape({2, 2, 0}));
  EXPECT_TRUE(contains(error_message([&] { x.unfold(1, 10, 1); }), "out of range"));
  EXPECT_TRUE(contains(error_message([&] { x.unfold(1, 2, 0); }), "step"));
  // Overlapping windows add their gradients.
  const Tensor l = leaf({3, 7}, 11);
  EXPECT_TRUE(grad_ok([](const Ins& v) { return mul(v[0].unfold(1, 3, 2), v[0].unfold(1, 3, 2)); }, {l}));
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { return mul(v[0].unfold(1, 3, 1), v[0].unfold(1, 3, 1)).sum(); }, {l}));
}

TEST(TensorErgonomics, IndexAddAddsInOrderAndIsIndexSelectsBackward) {
  const Tensor self = random_tensor({3, 5, 4}, kFloat64, Layout::Contiguous, 12);
  const Tensor src = random_tensor({3, 6, 4}, kFloat64, Layout::Transposed, 13);
  const std::vector<int64_t> idx{4, 0, 4, 2, 4, 1};
  std::vector<double> want = values(self);
  const std::vector<double> sv = values(src);
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t c = 0; c < 4; ++c) want[(a * 5 + idx[i]) * 4 + c] += sv[(a * 6 + i) * 4 + c];
  EXPECT_CLOSE(index_add(self, 1, tensor({4, 0, 4, 2, 4, 1}, kInt64), src), want, Shape({3, 5, 4}), 1e-15, 1e-15);
  // On a device the check runs there and is raised at the next synchronization (to_vector).
  EXPECT_TRUE(contains(error_message([&] { index_add(self, 1, tensor({5, 0, 0, 0, 0, 0}, kInt64), src).to_vector<double>(); }),
                       "out of range"));
  EXPECT_TRUE(contains(error_message([&] { index_add(self, 1, tensor({1, 0}, kInt64), src); }), "must have shape"));
  const Tensor a = leaf({4, 3}, 14), b = leaf({5, 3}, 15);
  const Tensor ix = tensor({1, 3, 1, 0, 1}, kInt64);
  EXPECT_TRUE(grad_ok([ix](const Ins& v) { return index_add(v[0], 0, ix, v[1]); }, {a, b}));
  EXPECT_TRUE(gradgrad_ok([ix](const Ins& v) { return mul(index_add(v[0], 0, ix, v[1]), v[0]); }, {a, b}));
  EXPECT_TRUE(gradgrad_ok([ix](const Ins& v) { return mul(index_select(v[0], 0, ix), v[1]); }, {a, b}));
}

// scatter_add runs in parallel over the fibers along dim (Note [Parallel scatter_add]): each
// element still gets its terms in order of position along dim, so float32 results equal a
// serial float32 loop bit for bit, at any thread count, for every dim, with many
// collisions (the index draws from 3 values) and a strided source.
TEST(TensorErgonomics, ScatterAddAddsInPositionOrderAtAnyThreadCount) {
  const int saved = get_num_threads();
  const Shape shape{5, 37, 300};
  for (int64_t dim = 0; dim < 3; ++dim) {
    Shape self_shape = shape;
    self_shape[static_cast<size_t>(dim)] = 3;
    const Tensor self = random_tensor(self_shape, kFloat32, Layout::Contiguous, 20);
    const Tensor src = random_tensor(shape, kFloat32, Layout::Transposed, 21);
    std::vector<int64_t> iv(static_cast<size_t>(5 * 37 * 300));
    for (size_t i = 0; i < iv.size(); ++i) iv[i] = static_cast<int64_t>((i * 7 + i / 11) % 3);
    const Tensor index = tensor(std::vector<double>(iv.begin(), iv.end()), shape, kInt64);
    std::vector<float> want = self.to(Device::cpu()).contiguous().to_vector<float>();
    const std::vector<float> sv = src.to(Device::cpu()).contiguous().to_vector<float>();
    for (int64_t a = 0; a < shape[0]; ++a)
      for (int64_t b = 0; b < shape[1]; ++b)
        for (int64_t c = 0; c < shape[2]; ++c) {
          const size_t p = static_cast<size_t>((a * shape[1] + b) * shape[2] + c);
          int64_t t[3] = {a, b, c};
          t[dim] = iv[p];
          want[static_cast<size_t>((t[0] * self_shape[1] + t[1]) * self_shape[2] + t[2])] += sv[p];
        }
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      EXPECT_EQ(scatter_add(self, dim, index.to(self.device()), src).to(Device::cpu()).to_vector<float>(), want)
          << "dim " << dim << ", " << threads << " threads";
    }
  }
  set_num_threads(saved);
}

TEST(TensorErgonomics, RandLikeTakesShapeDtypeAndDevice) {
  const Tensor t = zeros({3, 5}, kFloat64);
  Generator g1(7), g2(7);
  const Tensor r = rand_like(t, &g1);
  EXPECT_EQ(r.shape(), t.shape());
  EXPECT_EQ(r.dtype(), kFloat64);
  EXPECT_TRUE(allclose(r, rand({3, 5}, kFloat64, &g2)));
  EXPECT_EQ(randn_like(zeros({2}, kFloat32)).dtype(), kFloat32);
  EXPECT_TRUE(contains(error_message([] { randn_like(zeros({2}, kInt64)); }), "floating"));
}

}  // namespace
}  // namespace ember::test
