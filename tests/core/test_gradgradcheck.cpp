// Autograd, part 4: gradgradcheck (second derivatives against finite differences of the
// first, float64) of every op a gradient penalty uses: elementwise arithmetic with
// broadcasting and Scalar operands, pow, the unary functions and activations (relu and
// the fused linear + ReLU through relu_backward), reductions, matmul in all its forms,
// linear, softmax / log_softmax, cross entropy (every reduction, class weights, label
// smoothing, ignore_index), nll and mse losses, layer norm, group and instance norm,
// embedding, dropout, avg_pool2d, every view, cat / stack and the indexing ops. Small
// shapes: each check runs a forward and a create_graph backward per element of every input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ember.h"
#include "reference.h"
#include "tests/core/grad_helpers.h"
#include "tests/device.h"

namespace ember::test {
namespace {

using Ins = std::vector<Tensor>;

double away_from_zero(double v) { return v >= 0 ? v + 0.5 : v - 0.5; }
double positive(double v) { return std::fabs(v) + 0.5; }

#define EXPECT_GRADGRAD(...) EXPECT_TRUE(gradgrad_ok(__VA_ARGS__))

TEST(Gradgradcheck, Arithmetic) {
  const Tensor a = leaf({2, 1, 3}, 1), b = leaf({2, 3}, 2), nz = leaf({2, 3}, 3, away_from_zero);
  const Tensor z = leaf({}, 4, away_from_zero);
  EXPECT_GRADGRAD([](const Ins& x) { return add(x[0], x[1]); }, {a, b});
  EXPECT_GRADGRAD([](const Ins& x) { return sub(x[0], x[1]); }, {a, b});
  EXPECT_GRADGRAD([](const Ins& x) { return mul(x[0], x[1]); }, {a, b});
  EXPECT_GRADGRAD([](const Ins& x) { return div(x[0], x[1]); }, {a, nz});
  EXPECT_GRADGRAD([](const Ins& x) { return x[0] * x[1] - x[1] / x[2]; }, {a, b, z});
  EXPECT_GRADGRAD([](const Ins& x) { return x[0] * x[0] * x[0]; }, {b});  // a tensor used three times
  EXPECT_GRADGRAD([](const Ins& x) { return mul(x[0].t(), x[1]); }, {leaf({3, 2}, 5), b});
}

TEST(Gradgradcheck, ScalarOperandsAndPow) {
  const Tensor x = leaf({2, 3}, 6), nz = leaf({2, 3}, 7, away_from_zero), pos = leaf({2, 3}, 8, positive);
  EXPECT_GRADGRAD([](const Ins& v) { return v[0] + 2.5; }, {x});
  EXPECT_GRADGRAD([](const Ins& v) { return 1.5 - v[0]; }, {x});
  EXPECT_GRADGRAD([](const Ins& v) { return v[0] * -3.0; }, {x});
  EXPECT_GRADGRAD([](const Ins& v) { return v[0] / 4.0; }, {x});
  EXPECT_GRADGRAD([](const Ins& v) { return 4.0 / v[0]; }, {nz});
  EXPECT_GRADGRAD([](const Ins& v) { return pow(v[0], Scalar(3)); }, {x});
  EXPECT_GRADGRAD([](const Ins& v) { return pow(v[0], Scalar(2.5)); }, {pos});
  EXPECT_GRADGRAD([](const Ins& v) { return pow(v[0], Scalar(-1.5)); }, {pos});
  EXPECT_GRADGRAD([](const Ins& v) { return pow(v[0], v[1]); }, {pos, leaf({3}, 9)});
}

TEST(Gradgradcheck, UnaryAndActivations) {
  const Tensor x = leaf({2, 3}, 10), nz = leaf({2, 3}, 11, away_from_zero), pos = leaf({2, 3}, 12, positive);
  for (const auto& [name, f, in] : std::vector<std::tuple<std::string, Tensor (*)(const Tensor&), Tensor>>{
           {"neg", [](const Tensor& t) { return neg(t); }, x},
           {"abs", [](const Tensor& t) { return abs(t); }, nz},
           {"exp", [](const Tensor& t) { return exp(t); }, x},
           {"log", [](const Tensor& t) { return log(t); }, pos},
           {"sqrt", [](const Tensor& t) { return sqrt(t); }, pos},
           {"rsqrt", [](const Tensor& t) { return rsqrt(t); }, pos},
           {"relu", [](const Tensor& t) { return relu(t); }, nz},
           {"gelu", [](const Tensor& t) { return gelu(t, false); }, x},
           {"gelu tanh", [](const Tensor& t) { return gelu(t, true); }, x},
           {"erf", [](const Tensor& t) { return erf(t); }, x},
           {"tanh", [](const Tensor& t) { return tanh(t); }, x},
           {"sigmoid", [](const Tensor& t) { return sigmoid(t); }, x},
       }) {
    SCOPED_TRACE(name);
    EXPECT_GRADGRAD([f = f](const Ins& v) { return f(v[0]); }, {in});
    EXPECT_GRADGRAD([f = f](const Ins& v) { return f(v[0].t()); }, {in});  // through a transposed view
  }
  for (double v : values(x)) ASSERT_GT(std::fabs(std::fabs(v) - 0.5), 1e-3);
  EXPECT_GRADGRAD([](const Ins& v) { return clamp(v[0] * v[0], -0.25, 0.25); }, {x});
  const Tensor a = leaf({2, 3}, 13), b = leaf({3}, 14);
  for (double d : ref_binary(a, b, [](double p, double q) { return std::fabs(p - q); })) ASSERT_GT(d, 1e-3);
  EXPECT_GRADGRAD([](const Ins& v) { return maximum(v[0], v[1]); }, {a, b});
  EXPECT_GRADGRAD([](const Ins& v) { return minimum(v[0], v[1]); }, {a, b});
  const Tensor cond = gt(random_tensor({2, 1}, kFloat64, Layout::Contiguous, 15), zeros({}, kFloat64));
  EXPECT_GRADGRAD([&](const Ins& v) { return where(cond, v[0], v[1]); }, {a, b});
}

TEST(Gradgradcheck, Reductions) {
  const Tensor x = leaf({2, 3, 2}, 20);
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{}, {1}, {0, 2}}) {
    SCOPED_TRACE("dims " + std::to_string(dims.size()));
    EXPECT_GRADGRAD([&](const Ins& v) { return sum(v[0], dims); }, {x});
    EXPECT_GRADGRAD([&](const Ins& v) { return mean(v[0], dims, true); }, {x});
    EXPECT_GRADGRAD([&](const Ins& v) { return var(v[0], dims); }, {x});
    EXPECT_GRADGRAD([&](const Ins& v) { return var(v[0], dims, 0, true); }, {x});
    EXPECT_GRADGRAD([&](const Ins& v) { return amax(v[0], dims); }, {x});
    EXPECT_GRADGRAD([&](const Ins& v) { return amin(v[0], dims, true); }, {x});
  }
  EXPECT_GRADGRAD([](const Ins& v) { return max(v[0], 1).first; }, {x});
  EXPECT_GRADGRAD([](const Ins& v) { return min(v[0], -1, true).first; }, {x});
  // A reduction whose square makes the second derivative non-zero.
  EXPECT_GRADGRAD([](const Ins& v) { return pow(sum(v[0], {1}), Scalar(2)); }, {x});
}

TEST(Gradgradcheck, MatmulAndLinear) {
  EXPECT_GRADGRAD([](const Ins& v) { return matmul(v[0], v[1]); }, {leaf({2, 3}, 30), leaf({3, 2}, 31)});
  EXPECT_GRADGRAD([](const Ins& v) { return matmul(v[0], v[1]); }, {leaf({2, 1, 2, 3}, 32), leaf({2, 3, 2}, 33)});
  EXPECT_GRADGRAD([](const Ins& v) { return matmul(v[0], v[1]); }, {leaf({3}, 34), leaf({3, 2}, 35)});
  EXPECT_GRADGRAD([](const Ins& v) { return matmul(v[0], v[1]); }, {leaf({2, 3}, 36), leaf({3}, 37)});
  EXPECT_GRADGRAD([](const Ins& v) { return matmul(v[0], v[1]); }, {leaf({3}, 38), leaf({3}, 39)});
  EXPECT_GRADGRAD([](const Ins& v) { return matmul(v[0].t(), v[1]); }, {leaf({3, 2}, 40), leaf({3, 2}, 41)});
  const Tensor x = leaf({2, 3}, 42), w = leaf({2, 3}, 43), b = leaf({2}, 44);
  EXPECT_GRADGRAD([](const Ins& v) { return linear(v[0], v[1], v[2]); }, {x, w, b});
  EXPECT_GRADGRAD([](const Ins& v) { return linear(v[0], v[1]); }, {leaf({2, 2, 3}, 45), w});
  // The fused ReLU backs through relu_backward, an op with its own derivative.
  for (double y : values(linear(x, w, b))) ASSERT_GT(std::fabs(y), 1e-3);
  EXPECT_GRADGRAD([](const Ins& v) { return linear(v[0], v[1], v[2], Activation::kReLU); }, {x, w, b});
  EXPECT_GRADGRAD([](const Ins& v) { return tanh(linear(tanh(linear(v[0], v[1], v[2])), v[1].t())); }, {x, w, b});
}

TEST(Gradgradcheck, SoftmaxAndLosses) {
  const Tensor x = leaf({2, 3}, 50), y = leaf({2, 3, 2}, 51);
  for (int64_t d : {0, 1, -1}) {
    SCOPED_TRACE("dim " + std::to_string(d));
    EXPECT_GRADGRAD([d](const Ins& v) { return softmax(v[0], d); }, {y});
    EXPECT_GRADGRAD([d](const Ins& v) { return log_softmax(v[0], d); }, {y});
  }
  const Tensor t = tensor({2, 0}, kInt64), tk = tensor({1, 0, 2, 2}, {2, 2}, kInt64);
  const Tensor ignored = tensor({2, -100}, kInt64);
  const Tensor cw = tensor({0.5, 2, 1.5}, kFloat64);
  for (Reduction r : {Reduction::None, Reduction::Sum, Reduction::Mean}) {
    SCOPED_TRACE("reduction " + std::to_string(static_cast<int>(r)));
    EXPECT_GRADGRAD([&](const Ins& v) { return cross_entropy(v[0], t, -100, r); }, {x});
    EXPECT_GRADGRAD([&](const Ins& v) { return cross_entropy(v[0], tk, -100, r, cw, 0.1); }, {y});
    EXPECT_GRADGRAD([&](const Ins& v) { return cross_entropy(v[0], ignored, -100, r, cw); }, {x});
    nn::functional::LossOptions o{.reduction = r, .weight = cw};
    EXPECT_GRADGRAD([&](const Ins& v) { return nn::functional::nll_loss(log_softmax(v[0], 1), t, o); }, {x});
    EXPECT_GRADGRAD([&](const Ins& v) { return nn::functional::mse_loss(v[0], v[1], r); }, {x, leaf({2, 3}, 52)});
  }
}

TEST(Gradgradcheck, LayerNormEmbeddingDropoutPooling) {
  const Tensor x = leaf({2, 3}, 60), w = leaf({3}, 61), b = leaf({3}, 62);
  EXPECT_GRADGRAD([](const Ins& v) { return layer_norm(v[0], 1, v[1], v[2]); }, {x, w, b});
  EXPECT_GRADGRAD([](const Ins& v) { return layer_norm(v[0], 2); }, {leaf({2, 2, 2}, 63)});
  // group_norm over [N, C, S] in groups of C / G channels: two groups of two channels, and
  // one channel per group without affine (what instance_norm runs).
  EXPECT_GRADGRAD([](const Ins& v) { return group_norm(v[0], 2, v[1], v[2]); },
                  {leaf({2, 4, 3}, 80), leaf({4}, 81), leaf({4}, 82)});
  EXPECT_GRADGRAD([](const Ins& v) { return group_norm(v[0] * v[0], 3); }, {leaf({1, 3, 2, 2}, 83)});
  EXPECT_GRADGRAD([](const Ins& v) { return instance_norm(v[0], {}, {}, {}, {}, true, 0.1, 1e-5); },
                  {leaf({2, 2, 3}, 84)});
  const Tensor table = leaf({4, 2}, 64);
  const Tensor idx = tensor({1, 3, 1, 0, 2, 1}, {2, 3}, kInt64);
  EXPECT_GRADGRAD([&](const Ins& v) { return embedding(idx, v[0]) * embedding(idx, v[0]); }, {table});
  EXPECT_GRADGRAD([&](const Ins& v) { return pow(embedding(idx, v[0], 1), Scalar(2)); }, {table});
  // The same mask on every call: a generator seeded the same each time.
  EXPECT_GRADGRAD([](const Ins& v) {
    Generator gen(3);
    return dropout(v[0] * v[0], 0.4, true, &gen);
  }, {leaf({3, 4}, 65)});
  EXPECT_GRADGRAD([](const Ins& v) { return pow(avg_pool2d(v[0], {.kernel_size = {2, 2}, .padding = {1, 1}}), Scalar(2)); },
                  {leaf({1, 2, 3, 3}, 66)});
  EXPECT_GRADGRAD([](const Ins& v) { return avg_pool2d(v[0] * v[0], {.kernel_size = {2, 2}}); }, {leaf({2, 4, 4}, 67)});
}

TEST(Gradgradcheck, ViewsAndIndexing) {
  const Tensor x = leaf({2, 3, 2}, 70), col = leaf({3, 1}, 71);
  // Views are linear: their first derivative is a function of the output gradient only,
  // which gradgradcheck checks too (the narrow / slice / select backward is an op).
  const std::vector<std::function<Tensor(const Tensor&)>> views = {
      [](const Tensor& t) { return t.view({6, 2}); },
      [](const Tensor& t) { return t.transpose(0, 2).reshape({-1}); },
      [](const Tensor& t) { return t.permute({2, 0, 1}); },
      [](const Tensor& t) { return t.narrow(1, 1, 2); },
      [](const Tensor& t) { return t.slice(1, 0, 3, 2); },
      [](const Tensor& t) { return t.select(1, 2); },
      [](const Tensor& t) { return t.unsqueeze(1).squeeze(); },
      [](const Tensor& t) { return t.flatten(1).t(); },
  };
  for (size_t i = 0; i < views.size(); ++i) {
    SCOPED_TRACE("view " + std::to_string(i));
    EXPECT_GRADGRAD([&, i](const Ins& v) { return views[i](v[0] * v[0]); }, {x});
  }
  EXPECT_GRADGRAD([](const Ins& v) { return v[0].expand({2, 3, 4}) * v[0]; }, {col});
  EXPECT_GRADGRAD([](const Ins& v) { return cat({v[0] * v[1], v[1]}, 1); }, {leaf({3, 2}, 72), leaf({3, 2}, 73)});
  EXPECT_GRADGRAD([](const Ins& v) { return stack({v[0], v[0] * v[0]}, 1); }, {leaf({3, 2}, 74)});
  const Tensor rep = tensor({0, 2, 0, 2}, kInt64);
  EXPECT_GRADGRAD([&](const Ins& v) { return pow(index_select(v[0], 0, rep), Scalar(2)); }, {leaf({3, 2}, 75)});
  EXPECT_GRADGRAD([&](const Ins& v) { return pow(gather(v[0], 1, tensor({1, 1, 0, 0}, {2, 2}, kInt64)), Scalar(2)); },
                  {leaf({2, 3}, 76)});
  // src [3, 3] larger than index [2, 2]: its gradient is padded with zeros (by cat).
  const Tensor si = tensor({0, 2, 2, 1}, {2, 2}, kInt64);
  EXPECT_GRADGRAD([&](const Ins& v) { return pow(scatter_add(v[0], 0, si, v[1]), Scalar(2)); },
                  {leaf({3, 3}, 77), leaf({3, 3}, 78)});
}

}  // namespace
}  // namespace ember::test
