// The losses (cross_entropy, nll_loss, mse_loss) against hand computations of the
// README's formulas, their argument errors, and float64 gradchecks over every reduction,
// with class weights, ignore_index and label smoothing. (The PyTorch cases are in
// test_loss_norm_refcases.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/core/reference.h"

namespace ember::test {
namespace {

namespace F = nn::functional;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor leaf(const Shape& s, uint64_t seed, double scale = 1) {
  Tensor t = random_tensor(s, kFloat64, Layout::Contiguous, seed, [=](double v) { return v * scale; });
  t.requires_grad_();
  return t;
}
using test::grad_ok;

// ----- losses against the README's formulas -----

// Label smoothing with ignored targets: l_i = (1-e)(-log p[i,y_i]) + e/C sum_c -log p[i,c];
// ignored targets give 0 and leave the mean's divisor (README; PyTorch >= 1.12).
TEST(Losses, CrossEntropySmoothingWithIgnoredTargets) {
  Tensor logits = random_tensor({4, 3}, kFloat64, Layout::Contiguous, 21);
  const std::vector<int64_t> y = {0, -100, 2, 1};
  const std::vector<double> lv = values(logits), wc = {0.5, 2.0, 1.5};
  const double e = 0.2;
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "class weights" : "no weights");
    std::vector<double> per(4, 0);
    double total = 0, denom = 0;
    for (int64_t i = 0; i < 4; ++i) {
      if (y[i] < 0) continue;
      double mx = std::max({lv[i * 3], lv[i * 3 + 1], lv[i * 3 + 2]}), z = 0;
      for (int c = 0; c < 3; ++c) z += std::exp(lv[i * 3 + c] - mx);
      auto nlp = [&](int c) { return -(lv[i * 3 + c] - mx - std::log(z)); };
      double smooth = 0;
      for (int c = 0; c < 3; ++c) smooth += (weighted ? wc[c] : 1) * nlp(c);
      const double wy = weighted ? wc[y[i]] : 1;
      per[i] = (1 - e) * wy * nlp(int(y[i])) + e / 3 * smooth;
      total += per[i];
      denom += wy;
    }
    F::LossOptions o{F::Reduction::None, weighted ? tensor(wc, kFloat64) : Tensor(), -100, e};
    Tensor t = tensor({0, -100, 2, 1}, kInt64);
    EXPECT_CLOSE(F::cross_entropy(logits, t, o), per, (Shape{4}), 1e-10, 1e-12);
    o.reduction = F::Reduction::Sum;
    EXPECT_CLOSE(F::cross_entropy(logits, t, o), std::vector<double>{total}, (Shape{}), 1e-10, 1e-12);
    o.reduction = F::Reduction::Mean;
    EXPECT_CLOSE(nn::CrossEntropyLoss(o)(logits, t), std::vector<double>{total / denom}, (Shape{}), 1e-10, 1e-12);
  }
}

TEST(Losses, MseAndErrors) {
  Tensor a = tensor({1, 2, 3, 4}, {2, 2}, kFloat64), b = tensor({0, 2, 5, 1}, {2, 2}, kFloat64);
  EXPECT_CLOSE(nn::MSELoss()(a, b), std::vector<double>{(1 + 0 + 4 + 9) / 4.0}, (Shape{}), 1e-12, 0);
  EXPECT_CLOSE(nn::MSELoss(F::Reduction::Sum)(a, b), std::vector<double>{14}, (Shape{}), 1e-12, 0);
  EXPECT_CLOSE(nn::MSELoss(F::Reduction::None)(a, b), (std::vector<double>{1, 0, 4, 9}), (Shape{2, 2}), 1e-12, 0);
  EXPECT_EMBER_ERROR(F::mse_loss(a, ones({4}, kFloat64)), "mse_loss", "[2, 2]", "[4]");
  Tensor logits = random_tensor({3, 4}, kFloat32);
  EXPECT_EMBER_ERROR(F::cross_entropy(logits, tensor({0, 1}, kInt64)), "cross_entropy", "[2]", "[3, 4]");
  // On a GPU a bad target is raised at the next synchronization (.item()).
  EXPECT_EMBER_ERROR(F::cross_entropy(logits, tensor({0, 1, 4}, kInt64)).item<double>(), "out of range", "4");
  EXPECT_EMBER_ERROR(F::nll_loss(logits, tensor({0, 1, 2}, kFloat32)), "nll_loss", "int64");
  EXPECT_EMBER_ERROR(F::parse_reduction("avg"), "avg");
  EXPECT_EQ(F::parse_reduction("sum"), F::Reduction::Sum);
}

TEST(Gradcheck, Losses) {
  Tensor logits = leaf({5, 4}, 10, 2), target = tensor({0, 3, -100, 1, 3}, kInt64);
  Tensor weight = tensor({0.5, 1.0, 2.0, 1.5}, kFloat64);
  for (auto r : {F::Reduction::Mean, F::Reduction::Sum, F::Reduction::None})
    for (double ls : {0.0, 0.1})
      for (bool weighted : {false, true}) {
        SCOPED_TRACE(std::to_string(int(r)) + " ls " + std::to_string(ls) + (weighted ? " weighted" : ""));
        F::LossOptions o{r, weighted ? weight : Tensor(), -100, ls};
        EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], target, o); }, {logits}));
        o.label_smoothing = 0;
        EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return F::nll_loss(in[0], target, o); }, {logits}));
      }
  Tensor kd = leaf({2, 3, 2, 2}, 11), kt = tensor({0, 1, 2, 2, 1, 0, -100, 1}, {2, 2, 2}, kInt64);
  F::LossOptions o{F::Reduction::Mean, {}, -100, 0.2};
  EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], kt, o); }, {kd}));
  Tensor a = leaf({3, 4}, 12), t = leaf({3, 4}, 13);
  for (auto r : {F::Reduction::Mean, F::Reduction::Sum, F::Reduction::None})
    EXPECT_TRUE(grad_ok([&](const std::vector<Tensor>& in) { return F::mse_loss(in[0], in[1], r); }, {a, t}));
}

}  // namespace
}  // namespace ember::test
