// The fused layer norm (forward and backward for input, weight and bias) and batch-norm
// statistics (with the running-statistics update) on the test's device against float64
// loop references, at sizes that take each kernel variant (rows of 1 value, of 1000, of
// more than a block holds; channels of one value pair, of many planes), and on the CPU
// against the composed ops they replace.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fused_util.h"
#include "reference.h"

namespace ember::test {
namespace {

struct LnRef {
  std::vector<double> y, dx, dw, db;
};

LnRef ref_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g, double eps) {
  const int64_t cols = w.numel(), rows = x.numel() / cols;
  const std::vector<double> xv = values(x), wv = values(w), bv = values(b), gv = values(g);
  LnRef r;
  r.y.resize(xv.size());
  r.dx.resize(xv.size());
  r.dw.assign(static_cast<size_t>(cols), 0.0);
  r.db.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0, v = 0, sg = 0, sgx = 0;
    for (int64_t j = 0; j < cols; ++j) m += xv[i * cols + j] / cols;
    for (int64_t j = 0; j < cols; ++j) v += (xv[i * cols + j] - m) * (xv[i * cols + j] - m) / cols;
    const double rs = 1 / std::sqrt(v + eps);
    for (int64_t j = 0; j < cols; ++j) {
      const double xh = (xv[i * cols + j] - m) * rs, gg = gv[i * cols + j] * wv[j];
      r.y[i * cols + j] = xh * wv[j] + bv[j];
      r.dw[j] += gv[i * cols + j] * xh;
      r.db[j] += gv[i * cols + j];
      sg += gg / cols;
      sgx += gg * xh / cols;
    }
    for (int64_t j = 0; j < cols; ++j) {
      const double xh = (xv[i * cols + j] - m) * rs;
      r.dx[i * cols + j] = rs * (gv[i * cols + j] * wv[j] - sg - xh * sgx);
    }
  }
  return r;
}

class LayerNormSizes : public ::testing::TestWithParam<std::tuple<int64_t, int64_t, DType>> {};

TEST_P(LayerNormSizes, MatchesFloat64ReferenceForwardAndBackward) {
  const auto [rows, cols, dtype] = GetParam();
  SCOPED_TRACE(testing::Message() << rows << " x " << cols << " " << dtype_name(dtype));
  const Tensor x = randn_on({rows, cols}, dtype, rows + cols, 2.0).requires_grad_();
  const Tensor w = randn_on({cols}, dtype, 2).requires_grad_();
  const Tensor b = randn_on({cols}, dtype, 3).requires_grad_();
  const Tensor y = layer_norm(x, 1, w, b, 1e-5);
  const Tensor g = randn_on({rows, cols}, dtype, 4);
  y.backward(g);
  const LnRef want = ref_layer_norm(x.detach(), w.detach(), b.detach(), g, 1e-5);
  // Statistics of `cols` values: within cols u (relative) of their size; outputs of size
  // |xhat w| + |b| ~ 10 and gradients summing `cols` (dx) or `rows` (dw, db) terms.
  const double u = dtype_unit_roundoff(dtype), tol = 40 * u * std::max<int64_t>(cols, 8);
  EXPECT_CLOSE(y, want.y, (Shape{rows, cols}), tol, tol);
  EXPECT_CLOSE(x.grad(), want.dx, (Shape{rows, cols}), tol, tol);
  const double ptol = 40 * u * std::max<int64_t>(rows, 8);
  EXPECT_CLOSE(w.grad(), want.dw, (Shape{cols}), ptol, ptol);
  EXPECT_CLOSE(b.grad(), want.db, (Shape{cols}), ptol, ptol);
}

INSTANTIATE_TEST_SUITE_P(Fused, LayerNormSizes,
                         ::testing::Values(std::tuple{int64_t{3}, int64_t{1}, kFloat32},
                                           std::tuple{int64_t{37}, int64_t{5}, kFloat32},
                                           std::tuple{int64_t{33}, int64_t{1000}, kFloat32},
                                           std::tuple{int64_t{5}, int64_t{5000}, kFloat32},
                                           std::tuple{int64_t{19}, int64_t{48}, kFloat64},
                                           std::tuple{int64_t{0}, int64_t{8}, kFloat32}));

TEST(FusedLayerNorm, NoAffineAndSeveralNormalizedDims) {
  const Tensor x = randn_on({4, 3, 5}, kFloat64, 1).requires_grad_();
  const Tensor y = layer_norm(x, 2);
  const Tensor g = randn_on({4, 3, 5}, kFloat64, 2);
  y.backward(g);
  const Tensor ones15 = ones({15}, {kFloat64, Device::cpu()}), zeros15 = zeros({15}, {kFloat64, Device::cpu()});
  const LnRef want = ref_layer_norm(x.detach(), ones15, zeros15, g, 1e-5);
  EXPECT_CLOSE(y, want.y, (Shape{4, 3, 5}), 1e-12, 1e-12);
  EXPECT_CLOSE(x.grad(), want.dx, (Shape{4, 3, 5}), 1e-12, 1e-12);
  EXPECT_EMBER_ERROR(layer_norm(x, 4), "layer_norm", "cannot normalize the last 4 dims");
  EXPECT_EMBER_ERROR(layer_norm(x, 1, randn_on({4}, kFloat64, 1)), "layer_norm", "normalized shape [5]");
}

TEST(FusedLayerNorm, CpuMatchesTheComposedOps) {
  EMBER_CPU_ONLY();
  const Tensor x = randn_on({64, 256}, kFloat32, 5, 3.0), w = randn_on({256}, kFloat32, 6), b = randn_on({256}, kFloat32, 7);
  const Tensor composed = add(mul(mul(sub(x, mean(x, {1}, true)), rsqrt(add(var(x, {1}, 0, true), Scalar(1e-5)))), w), b);
  // Both round mean and variance of 256 values in float32: 256 u relative to |y| ~ 10.
  EXPECT_TRUE(all_close(layer_norm(x, 1, w, b), composed, 0, 40 * 256 * 6e-8));
}

// ----- batch-norm statistics -----

struct BnRef {
  std::vector<double> mean, var, unbiased;
};
BnRef ref_bn_stats(const Tensor& x) {
  const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / std::max<int64_t>(n * c, 1);
  const std::vector<double> v = values(x);
  BnRef r{std::vector<double>(c), std::vector<double>(c), std::vector<double>(c)};
  for (int64_t ch = 0; ch < c; ++ch) {
    double m = 0, s = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) m += v[(i * c + ch) * hw + k];
    m /= static_cast<double>(n * hw);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k < hw; ++k) s += std::pow(v[(i * c + ch) * hw + k] - m, 2);
    r.mean[ch] = m;
    r.var[ch] = s / static_cast<double>(n * hw);
    r.unbiased[ch] = s / static_cast<double>(n * hw - 1);
  }
  return r;
}

TEST(FusedBatchNormStats, MatchesFloat64ReferenceAndUpdatesRunningStats) {
  for (const Shape& shape : {Shape{2, 1}, Shape{64, 16}, Shape{3, 5, 7}, Shape{2, 3, 4, 5}, Shape{3, 2, 100, 100}}) {
    SCOPED_TRACE(shape_str(shape));
    // Offset values: the statistics must not lose precision to a mean far from 0.
    const Tensor x = add(randn_on(shape, kFloat32, shape[0] + shape[1], 2.0).to(Device::cpu()), Scalar(100.0))
                         .to(test_device());
    const int64_t c = shape[1];
    const Tensor rm = randn_on({c}, kFloat32, 1), rv = add(abs(randn_on({c}, kFloat32, 2).to(Device::cpu())), Scalar(1.0)).to(test_device());
    const std::vector<double> rm0 = values(rm), rv0 = values(rv);
    const auto [mean, var] = batch_norm_stats(x, rm, rv, 0.1);
    const BnRef want = ref_bn_stats(x);
    const int64_t count = x.numel() / c;
    // Values ~100 +- 6: the mean within log2(count) u of 100, the variance within a few u
    // of its size (Welford's merges of shifted values keep the spread's precision).
    const double u = dtype_unit_roundoff(kFloat32);
    EXPECT_CLOSE(mean, want.mean, (Shape{c}), 0, 100 * 8 * u * std::log2(count + 2));
    EXPECT_CLOSE(var, want.var, (Shape{c}), 2e-4, 1e-5);
    std::vector<double> want_rm(c), want_rv(c);
    for (int64_t i = 0; i < c; ++i) {
      want_rm[i] = 0.9 * rm0[i] + 0.1 * want.mean[i];
      want_rv[i] = 0.9 * rv0[i] + 0.1 * want.unbiased[i];
    }
    EXPECT_CLOSE(rm, want_rm, (Shape{c}), 1e-5, 1e-5);
    EXPECT_CLOSE(rv, want_rv, (Shape{c}), 2e-4, 1e-5);
  }
}

TEST(FusedBatchNormStats, ChecksItsArguments) {
  const Tensor x = randn_on({1, 3}, kFloat32, 1);
  const Tensor r = randn_on({3}, kFloat32, 2);
  EXPECT_EMBER_ERROR(batch_norm_stats(x, r, r), "batch_norm_stats", "more than one value per channel");
  EXPECT_EMBER_ERROR(batch_norm_stats(randn_on({2, 4}, kFloat32, 1), r, r), "running statistics", "[4]");
  const auto [m, v] = batch_norm_stats(x);  // statistics alone: one value has variance 0
  EXPECT_CLOSE(v, (std::vector<double>{0, 0, 0}), (Shape{3}), 0, 0);
  EXPECT_EQ(values(m), values(x));
}

// The training path of BatchNorm: statistics from the stub, the backward in composed ops.
TEST(FusedBatchNorm, TrainingMatchesComposedFormAndGradcheck) {
  EMBER_SKIP_WITHOUT(sum_stub);
  EMBER_SKIP_WITHOUT(mul_stub);
  EMBER_SKIP_WITHOUT(normal_stub);
  const Tensor x = randn_on({3, 2, 2, 3}, kFloat64, 1).requires_grad_();
  const Tensor w = randn_on({2}, kFloat64, 2).requires_grad_(), b = randn_on({2}, kFloat64, 3).requires_grad_();
  EXPECT_TRUE(grad_ok(
      [](const std::vector<Tensor>& in) { return batch_norm_training(in[0], in[1], in[2], {}, {}, 0.1, 1e-5); },
      {x, w, b}));
  EXPECT_TRUE(grad_ok([](const std::vector<Tensor>& in) { return layer_norm(in[0], 2, in[1], in[2]); },
                      {randn_on({3, 2, 4}, kFloat64, 4).requires_grad_(),
                       randn_on({2, 4}, kFloat64, 5).requires_grad_(),
                       randn_on({2, 4}, kFloat64, 6).requires_grad_()}));
  std::vector<int64_t> dims{0, 2, 3};
  const Tensor composed = add(mul(div(sub(x, mean(x, dims, true)), sqrt(add(var(x, dims, 0, true), Scalar(1e-5)))),
                                  w.reshape({1, 2, 1, 1})),
                              b.reshape({1, 2, 1, 1}));
  EXPECT_TRUE(all_close(batch_norm_training(x, w, b, {}, {}, 0.1, 1e-5), composed, 1e-12, 1e-12));
}

}  // namespace
}  // namespace ember::test
