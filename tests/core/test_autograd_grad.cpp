// Autograd, part 3: autograd::grad (core/autograd.h) and double backward. Gradients are
// returned, never accumulated; intermediate inputs, several outputs, explicit output
// gradients; only the graph leading to the inputs runs; allow_unused, retain_graph and
// the argument errors; create_graph (second and third derivatives, the gradient penalty
// of libtorch's cpp/autograd example trained through); the error a second backward
// through a once-differentiable op (conv2d, max_pool2d, batch_norm) raises.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/autograd_graph.h"
#include "ember.h"
#include "reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

using autograd::grad;

Tensor param(const std::vector<double>& v, const Shape& shape) {
  Tensor t = tensor(v, shape, kFloat64);
  t.requires_grad_();
  return t;
}
Tensor leaf(const Shape& shape, uint64_t seed) {
  Tensor t = random_tensor(shape, kFloat64, Layout::Contiguous, seed);
  t.requires_grad_();
  return t;
}

TEST(AutogradGrad, ReturnsGradientsWithoutAccumulating) {
  const Tensor x = param({1, -2, 3}, {3}), w = param({0.5, 2, -1}, {3});
  int hooks = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor&) { ++hooks; });
  const std::vector<Tensor> g = grad({sum(x * w * x)}, {x});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_CLOSE(g[0], std::vector<double>({1, -8, -6}), Shape{3}, 0, 0);  // 2 w x
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined()) << "a leaf outside `inputs` gets nothing either";
  EXPECT_EQ(hooks, 0);
  EXPECT_FALSE(g[0].requires_grad()) << "without create_graph the gradient is a plain tensor";
}

TEST(AutogradGrad, IntermediateInputsSeveralOutputsAndOutputGradients) {
  const Tensor x = param({0.5, -1, 2}, {3});
  const Tensor h = x * 2.0;  // not a leaf
  const std::vector<Tensor> g = grad({sum(h * h), sum(exp(h))}, {h, x}, {}, /*retain_graph=*/true);
  std::vector<double> dh, dx;
  for (double v : {0.5, -1.0, 2.0}) {
    dh.push_back(2 * (2 * v) + std::exp(2 * v));
    dx.push_back(2 * dh.back());
  }
  EXPECT_CLOSE(g[0], dh, Shape{3}, 1e-15, 0);
  EXPECT_CLOSE(g[1], dx, Shape{3}, 1e-15, 0);

  // A non-scalar output with its gradient (the vector of a vector-Jacobian product), and
  // an output that is itself an input.
  const Tensor y = h * 3.0, v = tensor({1, 10, 100}, kFloat64);
  EXPECT_CLOSE(grad({y}, {x}, {v}, true)[0], std::vector<double>({6, 60, 600}), Shape{3}, 0, 0);
  EXPECT_CLOSE(grad({y}, {y}, {v})[0], std::vector<double>({1, 10, 100}), Shape{3}, 0, 0);
  // The same input twice, an output twice: each gets the whole gradient.
  const std::vector<Tensor> twice = grad({sum(h), sum(h)}, {x, x});
  for (const Tensor& t : twice) EXPECT_CLOSE(t, std::vector<double>({4, 4, 4}), Shape{3}, 0, 0);
}

TEST(AutogradGrad, GradientsHaveTheInputsDtypeAndShape) {
  const Tensor x = param({1, 2}, {2, 1});
  const Tensor y = x.to(kFloat32).expand({2, 3}) * 2.0;  // float32, broadcast
  const Tensor g = grad({sum(y)}, {x})[0];
  EXPECT_DTYPE(g, kFloat64);
  EXPECT_CLOSE(g, std::vector<double>({6, 6}), Shape({2, 1}), 0, 0);
}

TEST(AutogradGrad, OnlyTheGraphLeadingToTheInputsRuns) {
  const Tensor x = param({1, 2}, {2}), w = param({3, 4}, {2});
  int side_calls = 0;
  bool asked_for_w = true;
  // A branch that only w reaches: its backward must not run for grad(..., {x}).
  const Tensor side = autograd::custom_function("side", {w}, w * 2.0, [&](const Tensor& g) {
    ++side_calls;
    return std::vector<Tensor>{g * 2.0};
  });
  // An op of x and w: its formula is told that w's gradient is not wanted.
  const Tensor both = autograd::custom_function("both", {x, w}, x * w, [&, x, w](const Tensor& g) {
    asked_for_w = autograd::needs_input_grad(1);
    return std::vector<Tensor>{g * w, autograd::needs_input_grad(1) ? g * x : Tensor()};
  });
  const Tensor g = grad({sum(both + side)}, {x})[0];
  EXPECT_CLOSE(g, std::vector<double>({3, 4}), Shape{2}, 0, 0);
  EXPECT_EQ(side_calls, 0);
  EXPECT_FALSE(asked_for_w);
  EXPECT_FALSE(w.grad().defined());
}

TEST(AutogradGrad, AllowUnused) {
  const Tensor x = param({1, 2}, {2}), unused = param({3}, {1});
  const Tensor y = sum(x * x);
  EXPECT_EMBER_ERROR(grad({y}, {x, unused}, {}, true), "grad", "input 1", "allow_unused");
  const std::vector<Tensor> g = grad({y}, {x, unused}, {}, true, false, /*allow_unused=*/true);
  EXPECT_CLOSE(g[0], std::vector<double>({2, 4}), Shape{2}, 0, 0);
  EXPECT_FALSE(g[1].defined());
}

TEST(AutogradGrad, ArgumentErrors) {
  const Tensor x = param({1, 2}, {2});
  const Tensor y = x * 2.0;
  const Tensor plain = tensor({1, 2}, kFloat64);
  EXPECT_EMBER_ERROR(grad({y}, {plain}, {ones_like(y)}), "grad", "input 0", "does not require grad");
  EXPECT_EMBER_ERROR(grad({plain * 2.0}, {x}, {ones_like(plain)}), "grad", "output 0", "does not require grad");
  EXPECT_EMBER_ERROR(grad({y}, {x}), "grad", "implied", "[2]");  // a non-scalar output needs its gradient
  EXPECT_EMBER_ERROR(grad({y}, {x}, {ones({3}, kFloat64)}), "grad", "shape", "[3]", "[2]");
  EXPECT_EMBER_ERROR(grad({y, y}, {x}, {ones_like(y)}), "grad", "1 grad_outputs for 2 outputs");
  EXPECT_EMBER_ERROR(grad({}, {x}), "grad", "no outputs");
  EXPECT_EMBER_ERROR(grad({y}, {}, {ones_like(y)}), "grad", "no inputs");
  EXPECT_TRUE(grad_enabled()) << "a failed call must restore grad mode";
}

TEST(AutogradGrad, RetainGraph) {
  const Tensor x = param({1, 2}, {2});
  const Tensor y = sum(exp(x) * x);
  grad({y}, {x}, {}, /*retain_graph=*/true);
  grad({y}, {x});  // frees it
  const std::string msg = error_of([&] { grad({y}, {x}); });
  EXPECT_TRUE(contains(msg, "already freed")) << msg;
  EXPECT_TRUE(contains(msg, "retain_graph")) << msg;
  EXPECT_TRUE(contains(msg, "'sum'")) << msg << " (it names the op whose graph is gone)";

  // create_graph keeps the graph unless told otherwise.
  const Tensor z = sum(x * x * x);
  grad({z}, {x}, {}, std::nullopt, /*create_graph=*/true);
  EXPECT_NO_THROW(grad({z}, {x}));
}

TEST(AutogradGrad, SecondAndThirdDerivatives) {
  const Tensor x = param({-1.5, 0.5, 2}, {3});
  const Tensor d1 = grad({sum(pow(x, Scalar(4)))}, {x}, {}, std::nullopt, true)[0];  // 4 x^3
  ASSERT_TRUE(d1.requires_grad());
  const Tensor d2 = grad({sum(d1)}, {x}, {}, std::nullopt, true)[0];  // 12 x^2
  const Tensor d3 = grad({sum(d2)}, {x})[0];                          // 24 x
  std::vector<double> w1, w2, w3;
  for (double v : {-1.5, 0.5, 2.0}) {
    w1.push_back(4 * v * v * v);
    w2.push_back(12 * v * v);
    w3.push_back(24 * v);
  }
  EXPECT_CLOSE(d1, w1, Shape{3}, 1e-15, 0);
  EXPECT_CLOSE(d2, w2, Shape{3}, 1e-15, 0);
  EXPECT_CLOSE(d3, w3, Shape{3}, 1e-15, 0);

  // Mixed: d/dy (d/dx sum(x^2 y)) = 2x, through a product of two leaves.
  const Tensor y = param({3, -1, 0.25}, {3});
  const Tensor dx = grad({sum(x * x * y)}, {x}, {}, std::nullopt, true)[0];
  EXPECT_CLOSE(grad({sum(dx)}, {y})[0], std::vector<double>({-3, 1, 4}), Shape{3}, 0, 0);
}

// The gradient penalty of libtorch's cpp/autograd example (and WGAN-GP): the norm of
// d model(x) / dx, pushed towards 1, added to the loss and trained through. For a linear
// model with grad_outputs of ones, that gradient is the column sums s of W in every row,
// so the penalty mean((|s| - 1)^2) has dW[o][j] = 2 (|s| - 1) s_j / |s| for every o.
TEST(AutogradGrad, GradientPenaltyTrainsThrough) {
  const Tensor W = leaf({4, 3}, 11), b = leaf({4}, 12);
  const Tensor x = random_tensor({5, 3}, kFloat64, Layout::Contiguous, 13);
  x.requires_grad_();
  const Tensor out = linear(x, W, b);
  const Tensor gradient = grad({out}, {x}, {ones_like(out)}, std::nullopt, /*create_graph=*/true)[0];
  const Tensor penalty = mean(pow(sub(sqrt(sum(gradient * gradient, {1})), Scalar(1)), Scalar(2)));
  penalty.backward();
  const std::vector<double> w = values(W);
  std::vector<double> s(3, 0.0);
  for (int o = 0; o < 4; ++o)
    for (int j = 0; j < 3; ++j) s[j] += w[o * 3 + j];
  const double norm = std::sqrt(s[0] * s[0] + s[1] * s[1] + s[2] * s[2]);
  std::vector<double> want;
  for (int o = 0; o < 4; ++o)
    for (int j = 0; j < 3; ++j) want.push_back(2 * (norm - 1) * s[j] / norm);
  EXPECT_CLOSE(W.grad(), want, Shape({4, 3}), 1e-12, 1e-14);
  EXPECT_FALSE(b.grad().defined()) << "the penalty does not depend on the bias";

  // The example's whole loss (MSE plus the penalty), against finite differences.
  const Tensor target = random_tensor({5, 4}, kFloat64, Layout::Contiguous, 14);
  EXPECT_TRUE(grad_ok(
      [&](const std::vector<Tensor>& p) {
        EnableGradGuard on;  // gradcheck's finite differences run without grad mode
        const Tensor xi = x.detach();
        xi.requires_grad_();
        const Tensor y = linear(xi, p[0], p[1]);
        const Tensor gx = grad({y}, {xi}, {ones_like(y)}, std::nullopt, true)[0];
        const Tensor pen = mean(pow(sub(sqrt(sum(gx * gx, {1})), Scalar(1)), Scalar(2)));
        return nn::functional::mse_loss(y, target) + pen;
      },
      {W.detach().requires_grad_(), b.detach().requires_grad_()}));
}

TEST(AutogradGrad, FirstOrderGradientsAreTheSameWithCreateGraph) {
  const Tensor x = leaf({2, 3, 6, 5}, 20), w = leaf({4, 3, 3, 3}, 21), v = leaf({2, 5}, 22);
  const Tensor t = tensor({1, 4}, kInt64);
  auto loss = [&] {
    const Tensor c = conv2d(x, w, {}, {1, 1}, {1, 1});
    return sum(relu(c)) + cross_entropy(v, t) + sum(max_pool2d(c, {.kernel_size = {2, 2}}));
  };
  const std::vector<Tensor> plain = grad({loss()}, {x, w, v});
  const std::vector<Tensor> graph = grad({loss()}, {x, w, v}, {}, std::nullopt, true);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(graph[i].requires_grad());
    EXPECT_TRUE(all_close(graph[i], plain[i], 1e-14, 1e-14)) << "input " << i;
  }
}

// conv2d, max_pool2d and batch_norm have no double backward: their gradients under
// create_graph are right, and a backward through them names the op.
TEST(AutogradGrad, SecondBackwardThroughAOnceDifferentiableOpNamesIt) {
  struct Case {
    const char* op;
    std::function<Tensor(const Tensor&)> f;
  };
  const Tensor w = leaf({3, 2, 3, 3}, 30);
  const std::vector<Case> cases = {
      {"conv2d", [&](const Tensor& x) { return conv2d(x, w, {}, {1, 1}, {1, 1}); }},
      {"max_pool2d", [](const Tensor& x) { return max_pool2d(x, {.kernel_size = {2, 2}}); }},
      {"batch_norm", [](const Tensor& x) { return batch_norm_training(x, {}, {}, {}, {}); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    const Tensor x = leaf({2, 2, 4, 4}, 31);
    const Tensor y = c.f(x);
    const Tensor g = grad({sum(y * y)}, {x}, {}, std::nullopt, true)[0];
    ASSERT_TRUE(g.requires_grad());
    const std::string msg = error_of([&] { sum(g * g).backward(); });
    EXPECT_TRUE(contains(msg, std::string("'") + c.op + "'")) << msg;
    EXPECT_TRUE(contains(msg, "not differentiable twice")) << msg;
    EXPECT_TRUE(grad_enabled());
  }
}

// gradgradcheck fails where a backward formula is right to first order but cut from the
// graph (as ember's were before double backward: they captured detached tensors).
TEST(AutogradGrad, GradgradcheckCatchesAFormulaCutFromTheGraph) {
  const auto square = [](const std::vector<Tensor>& v) {
    return autograd::custom_function("square", {v[0]}, v[0] * v[0],
                           [x = v[0].detach()](const Tensor& g) { return std::vector<Tensor>{g * x * 2.0}; });
  };
  const Tensor x = leaf({3}, 40);
  EXPECT_TRUE(grad_ok(square, {x}));
  const std::string msg = error_of([&] { gradgradcheck(square, {x}); });
  EXPECT_TRUE(contains(msg, "gradgradcheck")) << msg;
  EXPECT_TRUE(contains(msg, "analytic")) << msg;
  // Kept as it came, the input carries its graph and the check passes.
  const auto square_ok = [](const std::vector<Tensor>& v) {
    return autograd::custom_function("square", {v[0]}, v[0] * v[0],
                           [x = v[0]](const Tensor& g) { return std::vector<Tensor>{g * x * 2.0}; });
  };
  EXPECT_NO_THROW(gradgradcheck(square_ok, {x}));
  EXPECT_EMBER_ERROR(gradgradcheck(square, {random_tensor({2}, kFloat64)}), "gradgradcheck", "float64 leaf");
}

}  // namespace
}  // namespace ember::test
