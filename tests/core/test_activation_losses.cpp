// Issue 30's activations (leaky_relu, silu, elu) and losses (binary cross entropy on
// probabilities and on logits, L1, smooth L1, Huber, KL divergence): against float64
// loops at awkward sizes, PyTorch's edge numerics (log clamped at -100, gradients finite
// where the sigmoid saturates), gradcheck and gradgradcheck, and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "tests/core/grad_helpers.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

using Ins = std::vector<Tensor>;
constexpr double kU32 = 0x1p-24;

double away_from_zero(double v) { return v >= 0 ? v + 0.2 : v - 0.2; }
double sigmoid_ref(double v) { return 1 / (1 + std::exp(-v)); }

TEST(Activations, MatchAFloat64Loop) {
  for (Layout layout : {Layout::Contiguous, Layout::Strided}) {
    for (const Shape& shape : std::vector<Shape>{{0}, {13}, {3, 7, 5}}) {
      const Tensor x = random_tensor(shape, kFloat32, layout, 21, [](double v) { return 6 * v; });
      std::vector<double> lr, si, el;
      for (double v : values(x)) {
        lr.push_back(v > 0 ? v : 0.2 * v);
        si.push_back(v * sigmoid_ref(v));
        el.push_back(v > 0 ? v : 1.5 * std::expm1(v));
      }
      // One or two roundings in float32, plus the exp's few ulp.
      EXPECT_CLOSE(leaky_relu(x, 0.2), lr, shape, 2 * kU32, 0);
      EXPECT_CLOSE(silu(x), si, shape, 8 * kU32, 1e-30);
      EXPECT_CLOSE(elu(x, 1.5), el, shape, 8 * kU32, 1e-30);
    }
  }
  // Saturation: silu(-100) is -0 (not NaN), elu(-100) is -alpha.
  EXPECT_EQ(silu(tensor({-100.0, 100.0})).to_vector<double>(), (std::vector<double>{-0.0, 100.0}));
  EXPECT_EQ(elu(tensor({-100.0}), 2).item<double>(), -2);
  EXPECT_TRUE(std::isnan(leaky_relu(tensor({std::nan("")})).item<double>()));
}

TEST(Activations, DifferentiateTwice) {
  const Tensor x = leaf({3, 5}, 22, away_from_zero);
  EXPECT_TRUE(grad_ok([](const Ins& v) { return leaky_relu(v[0], 0.3); }, {x}));
  EXPECT_TRUE(grad_ok([](const Ins& v) { return silu(v[0]); }, {x}));
  EXPECT_TRUE(grad_ok([](const Ins& v) { return elu(v[0], 0.7); }, {x}));
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { return mul(leaky_relu(v[0], 0.3), v[0]); }, {x}));
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { return silu(v[0]); }, {x}));
  EXPECT_TRUE(gradgrad_ok([](const Ins& v) { return elu(v[0], 0.7); }, {x}));
  // elu's second derivative stays finite where e^x would overflow.
  Tensor big = tensor({1000.0, -3.0}, kFloat64).requires_grad_();
  Tensor g = autograd::grad({elu(big).sum()}, {big}, {}, std::nullopt, /*create_graph=*/true)[0];
  Tensor gg = autograd::grad({g.sum()}, {big})[0];
  EXPECT_FALSE(std::isnan(gg.at({0})));
}

double reduce_ref(const std::vector<double>& l, Reduction r) {
  double s = 0;
  for (double v : l) s += v;
  return r == Reduction::Sum ? s : s / static_cast<double>(l.size());
}

// Each loss in float32 against its float64 loop, every reduction.
void check_loss(const std::function<Tensor(const Tensor&, const Tensor&, Reduction)>& loss,
                const std::function<double(double, double)>& ref, const Tensor& x, const Tensor& t, double rtol) {
  const std::vector<double> xv = values(x), tv = values(t);
  std::vector<double> want;
  for (size_t i = 0; i < xv.size(); ++i) want.push_back(ref(xv[i], tv[i]));
  EXPECT_CLOSE(loss(x, t, Reduction::None), want, x.shape(), rtol, 1e-6);
  const double n = static_cast<double>(want.size());
  // Sums of n float32 terms: gamma_n relative to the sum of magnitudes (the terms are >= 0).
  EXPECT_CLOSE(loss(x, t, Reduction::Sum), std::vector<double>{reduce_ref(want, Reduction::Sum)}, Shape{}, rtol + gamma_n(n, kU32), 1e-6);
  EXPECT_CLOSE(loss(x, t, Reduction::Mean), std::vector<double>{reduce_ref(want, Reduction::Mean)}, Shape{}, rtol + gamma_n(n + 1, kU32), 1e-6);
}

TEST(Losses, MatchAFloat64Loop) {
  const Shape shape{5, 3, 7};
  const Tensor x = random_tensor(shape, kFloat32, Layout::Strided, 31, [](double v) { return 3 * v; });
  const Tensor t = random_tensor(shape, kFloat32, Layout::Contiguous, 32);
  const Tensor p = random_tensor(shape, kFloat32, Layout::Transposed, 33, sigmoid_ref);
  const Tensor q = random_tensor(shape, kFloat32, Layout::Contiguous, 34, sigmoid_ref);
  check_loss([](const Tensor& a, const Tensor& b, Reduction r) { return l1_loss(a, b, r); },
             [](double a, double b) { return std::fabs(a - b); }, x, t, 2 * kU32);
  check_loss([](const Tensor& a, const Tensor& b, Reduction r) { return smooth_l1_loss(a, b, r, 0.7); },
             [](double a, double b) { double d = std::fabs(a - b); return d < 0.7 ? 0.5 * d * d / 0.7 : d - 0.35; }, x, t,
             8 * kU32);
  check_loss([](const Tensor& a, const Tensor& b, Reduction r) { return huber_loss(a, b, r, 1.3); },
             [](double a, double b) { double d = std::fabs(a - b); return d < 1.3 ? 0.5 * d * d : 1.3 * (d - 0.65); }, x,
             t, 8 * kU32);
  check_loss([](const Tensor& a, const Tensor& b, Reduction r) { return binary_cross_entropy(a, b, {}, r); },
             [](double a, double b) { return -(b * std::log(a) + (1 - b) * std::log(1 - a)); }, p, q, 64 * kU32);
  check_loss([](const Tensor& a, const Tensor& b, Reduction r) { return binary_cross_entropy_with_logits(a, b, {}, {}, r); },
             [](double a, double b) { return (1 - b) * a + std::log1p(std::exp(-a)); }, x, q, 64 * kU32);
  // kl_div's terms have either sign: compared elementwise only.
  const std::vector<double> lv = values(log(p)), qv = values(q);
  std::vector<double> kl, kl_log;
  for (size_t i = 0; i < lv.size(); ++i) {
    kl.push_back(qv[i] * (std::log(qv[i]) - lv[i]));
    kl_log.push_back(std::exp(qv[i]) * (qv[i] - lv[i]));
  }
  EXPECT_CLOSE(kl_div(log(p), q, Reduction::None), kl, shape, 64 * kU32, 1e-6);
  EXPECT_CLOSE(kl_div(log(p), q, Reduction::None, true), kl_log, shape, 64 * kU32, 1e-6);
  double s = 0;
  for (double v : kl) s += v;
  EXPECT_NEAR(kl_div(log(p), q, Reduction::BatchMean).item<double>(), s / 5, 1e-5);
  EXPECT_EQ(kl_div(tensor({-1.0}), tensor({0.0}), Reduction::Sum).item<double>(), 0);  // 0 log 0 = 0
}

TEST(Losses, PyTorchEdgeNumerics) {
  // BCE: log clamped at -100, so x = 0 or 1 gives 100, not inf; its gradient is finite.
  Tensor x = tensor({0.0, 1.0, 0.0, 1.0}, kFloat64).requires_grad_();
  const Tensor t = tensor({1.0, 0.0, 0.0, 1.0}, kFloat64);
  Tensor l = binary_cross_entropy(x, t, {}, Reduction::None);
  EXPECT_EQ(l.to_vector<double>(), (std::vector<double>{100, 100, 0, 0}));
  l.sum().backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(g));
  EXPECT_EQ(x.grad().at({2}), 0);
  // With logits: a loss of 0 (not NaN) at saturation and gradients sigmoid(x) - t.
  Tensor z = tensor({-200.0, 200.0, 0.0, 50.0}, kFloat32).requires_grad_();
  const Tensor zt = tensor({0.0, 1.0, 1.0, 0.0}, kFloat32);
  Tensor lz = binary_cross_entropy_with_logits(z, zt, {}, {}, Reduction::None);
  EXPECT_CLOSE(lz, (std::vector<double>{0, 0, std::log(2.0), 50}), Shape({4}), 1e-6, 0);
  lz.sum().backward();
  EXPECT_CLOSE(z.grad(), (std::vector<double>{0, 0, -0.5, 1}), Shape({4}), 1e-6, 0);
}

TEST(Losses, WeightsAndPosWeight) {
  const Tensor x = random_tensor({4, 3}, kFloat64, Layout::Contiguous, 41);
  const Tensor t = random_tensor({4, 3}, kFloat64, Layout::Contiguous, 42, sigmoid_ref);
  const Tensor pw = tensor({0.5, 2.0, 3.0}, kFloat64), w = tensor({1.0, 0.0, 2.0}, kFloat64);
  const std::vector<double> xv = values(x), tv = values(t);
  std::vector<double> want;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double p = values(pw)[i % 3], lw = 1 + (p - 1) * tv[i];
    want.push_back(values(w)[i % 3] * ((1 - tv[i]) * xv[i] + lw * std::log1p(std::exp(-xv[i]))));
  }
  EXPECT_CLOSE(binary_cross_entropy_with_logits(x, t, w, pw, Reduction::None), want, Shape({4, 3}), 1e-13, 1e-15);
  const Tensor p = sigmoid(x);
  const std::vector<double> pv = values(p);
  std::vector<double> wb;
  for (size_t i = 0; i < pv.size(); ++i)
    wb.push_back(-values(w)[i % 3] * (tv[i] * std::log(pv[i]) + (1 - tv[i]) * std::log(1 - pv[i])));
  EXPECT_CLOSE(binary_cross_entropy(p, t, w, Reduction::None), wb, Shape({4, 3}), 1e-13, 1e-15);
}

TEST(Losses, DifferentiateTwice) {
  const Tensor x = leaf({3, 4}, 51), t = leaf({3, 4}, 52, sigmoid_ref);
  const Tensor p = leaf({3, 4}, 53, [](double v) { return 0.1 + 0.8 * sigmoid_ref(v); });
  const Tensor w = leaf({4}, 54), pw = leaf({4}, 55, [](double v) { return std::fabs(v) + 0.5; });
  const Tensor far = leaf({3, 4}, 56, [](double v) { return v >= 0 ? v + 0.3 : v - 0.3; });  // away from the kinks
  const Tensor zero = zeros({3, 4}, kFloat64);
  const std::vector<std::pair<const char*, std::function<Tensor(const Ins&)>>> cases = {
      {"bce", [](const Ins& v) { return binary_cross_entropy(v[0], v[1], v[2], Reduction::Mean); }},
      {"bce_logits", [](const Ins& v) { return binary_cross_entropy_with_logits(v[3], v[1], v[2], v[4], Reduction::Sum); }},
      {"bce_logits plain", [](const Ins& v) { return binary_cross_entropy_with_logits(v[3], v[1], {}, {}, Reduction::None); }},
      {"l1", [zero](const Ins& v) { return l1_loss(v[5], zero, Reduction::Mean); }},
      {"smooth_l1", [zero](const Ins& v) { return smooth_l1_loss(v[5], zero, Reduction::Sum, 0.5); }},
      {"huber", [zero](const Ins& v) { return huber_loss(v[5], zero, Reduction::None, 0.6); }},
      {"kl_div", [](const Ins& v) { return kl_div(v[3], v[1], Reduction::BatchMean); }},
      {"kl_div log_target", [](const Ins& v) { return kl_div(v[3], v[5], Reduction::Sum, true); }},
  };
  const Ins ins{p, t, w, x, pw, far};
  for (const auto& [name, fn] : cases) {
    EXPECT_TRUE(grad_ok(fn, ins)) << name;
    EXPECT_TRUE(gradgrad_ok(fn, ins)) << name;
  }
}

TEST(Losses, BadArgumentsAreErrors) {
  const Tensor a = zeros({2, 3}), b = zeros({3, 2});
  EXPECT_TRUE(contains(error_message([&] { l1_loss(a, b); }), "differ in shape"));
  EXPECT_TRUE(contains(error_message([&] { smooth_l1_loss(a, a, Reduction::Mean, -1); }), "beta"));
  EXPECT_TRUE(contains(error_message([&] { huber_loss(a, a, Reduction::Mean, 0); }), "delta"));
  // Checked on the CPU only (a device would pay a synchronization per call).
  EXPECT_TRUE(contains(error_message([&] { binary_cross_entropy(full({2}, 1.5, Device::cpu()), zeros({2}, Device::cpu())); }),
                       "[0, 1]"));
  EXPECT_TRUE(contains(error_message([&] { binary_cross_entropy_with_logits(a, a, zeros({4})); }), "broadcast"));
  EXPECT_TRUE(contains(error_message([&] { l1_loss(a, a, Reduction::BatchMean); }), "batchmean"));
  EXPECT_TRUE(contains(error_message([&] { cross_entropy(a, zeros({2}, kInt64), -100, Reduction::BatchMean); }), "batchmean"));
  EXPECT_TRUE(contains(error_message([&] { l1_loss(zeros({2}, kInt64), zeros({2}, kInt64)); }), "floating"));
}

}  // namespace
}  // namespace ember::test
