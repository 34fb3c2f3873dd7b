// Autograd, part 1: gradcheck (float64 central differences, core/autograd.h) of every
// differentiable op, with broadcasting, Scalar operands on both sides, non-contiguous
// operands and every view. The engine's behaviour is in test_autograd_engine.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ember.h"
#include "reference.h"

namespace ember::test {
namespace {

using Ins = std::vector<Tensor>;
using Fn = std::function<Tensor(const Ins&)>;

// A float64 leaf of N(0,1) values (optionally mapped) that requires grad.
Tensor leaf(const Shape& shape, uint64_t seed, const std::function<double(double)>& map = {}) {
  Tensor t = random_tensor(shape, kFloat64, Layout::Contiguous, seed, map);
  t.requires_grad_();
  return t;
}
double away_from_zero(double v) { return v >= 0 ? v + 0.5 : v - 0.5; }  // |v| >= 0.5
double positive(double v) { return std::fabs(v) + 0.5; }

using test::grad_ok;
#define EXPECT_GRAD(...) EXPECT_TRUE(grad_ok(__VA_ARGS__))

// ----- (a) gradcheck of every op -----

TEST(AutogradGradcheck, BinaryArithmeticWithBroadcasting) {
  const Tensor a = leaf({3, 1, 4}, 1), b = leaf({2, 4}, 2), c = leaf({3, 4}, 3, away_from_zero);
  const Tensor z = leaf({}, 4, away_from_zero);  // a 0-dim operand
  EXPECT_GRAD([](const Ins& x) { return add(x[0], x[1]); }, {a, b});
  EXPECT_GRAD([](const Ins& x) { return sub(x[0], x[1]); }, {a, b});
  EXPECT_GRAD([](const Ins& x) { return mul(x[0], x[1]); }, {a, b});
  EXPECT_GRAD([](const Ins& x) { return div(x[0], x[1]); }, {a, c});
  EXPECT_GRAD([](const Ins& x) { return x[0] * x[1] - x[1] / x[2]; }, {a, b, z});
  EXPECT_GRAD([](const Ins& x) { return x[0] + x[1]; }, {z, c});
  EXPECT_GRAD([](const Ins& x) { return x[1] / x[0]; }, {z, c});
  // A non-contiguous operand (transposed view) on either side.
  EXPECT_GRAD([](const Ins& x) { return mul(x[0].t(), x[1]); }, {leaf({4, 3}, 5), c});
}

TEST(AutogradGradcheck, ScalarOperandsOnBothSides) {
  const Tensor x = leaf({2, 3}, 6), nz = leaf({2, 3}, 7, away_from_zero);
  EXPECT_GRAD([](const Ins& v) { return v[0] + 2.5; }, {x});
  EXPECT_GRAD([](const Ins& v) { return 2.5 + v[0]; }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0] - 1.5; }, {x});
  EXPECT_GRAD([](const Ins& v) { return 1.5 - v[0]; }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0] * -3.0; }, {x});
  EXPECT_GRAD([](const Ins& v) { return -3.0 * v[0]; }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0] / 4.0; }, {x});
  EXPECT_GRAD([](const Ins& v) { return 4.0 / v[0]; }, {nz});
  EXPECT_GRAD([](const Ins& v) { return add(v[0], Scalar(2)); }, {x});  // integral Scalar
  EXPECT_GRAD([](const Ins& v) { return div(v[0], Scalar(3)); }, {x});
}

TEST(AutogradGradcheck, Pow) {
  const Tensor base = leaf({3, 4}, 8, positive), ex = leaf({4}, 9), any = leaf({3, 4}, 10);
  EXPECT_GRAD([](const Ins& x) { return pow(x[0], x[1]); }, {base, ex});
  EXPECT_GRAD([](const Ins& x) { return pow(x[0], Scalar(3)); }, {any});
  EXPECT_GRAD([](const Ins& x) { return pow(x[0], Scalar(2.5)); }, {base});
  EXPECT_GRAD([](const Ins& x) { return pow(x[0], Scalar(-1.5)); }, {base});
}

TEST(AutogradGradcheck, MaximumMinimumNoTies) {
  const Tensor a = leaf({3, 4}, 11), b = leaf({4}, 12);
  for (double d : ref_binary(a, b, [](double p, double q) { return std::fabs(p - q); })) ASSERT_GT(d, 1e-3);
  EXPECT_GRAD([](const Ins& x) { return maximum(x[0], x[1]); }, {a, b});
  EXPECT_GRAD([](const Ins& x) { return minimum(x[0], x[1]); }, {a, b});
}

TEST(AutogradGradcheck, UnaryOps) {
  const Tensor x = leaf({3, 5}, 13), nz = leaf({3, 5}, 14, away_from_zero), pos = leaf({3, 5}, 15, positive);
  EXPECT_GRAD([](const Ins& v) { return neg(v[0]); }, {x});
  EXPECT_GRAD([](const Ins& v) { return -v[0]; }, {x});
  EXPECT_GRAD([](const Ins& v) { return abs(v[0]); }, {nz});
  EXPECT_GRAD([](const Ins& v) { return exp(v[0]); }, {x});
  EXPECT_GRAD([](const Ins& v) { return log(v[0]); }, {pos});
  EXPECT_GRAD([](const Ins& v) { return sqrt(v[0]); }, {pos});
  EXPECT_GRAD([](const Ins& v) { return rsqrt(v[0]); }, {pos});
  EXPECT_GRAD([](const Ins& v) { return relu(v[0]); }, {nz});
  EXPECT_GRAD([](const Ins& v) { return gelu(v[0], false); }, {x});
  EXPECT_GRAD([](const Ins& v) { return gelu(v[0], true); }, {x});
  EXPECT_GRAD([](const Ins& v) { return erf(v[0]); }, {x});
  EXPECT_GRAD([](const Ins& v) { return tanh(v[0]); }, {x});
  EXPECT_GRAD([](const Ins& v) { return sigmoid(v[0]); }, {x});
  EXPECT_GRAD([](const Ins& v) { return exp(v[0].t()); }, {x});  // a non-contiguous input
}

TEST(AutogradGradcheck, ClampAwayFromBounds) {
  // Values are N(0,1); none lies within 1e-3 of +-0.5 for this seed (checked below).
  const Tensor x = leaf({4, 5}, 16);
  for (double v : values(x)) ASSERT_GT(std::fabs(std::fabs(v) - 0.5), 1e-3);
  EXPECT_GRAD([](const Ins& v) { return clamp(v[0], -0.5, 0.5); }, {x});
  EXPECT_GRAD([](const Ins& v) { return clamp(v[0], -0.5, std::nullopt); }, {x});
  EXPECT_GRAD([](const Ins& v) { return clamp(v[0], std::nullopt, 0.5); }, {x});
}

TEST(AutogradGradcheck, Where) {
  const Tensor cond = gt(random_tensor({3, 1}, kFloat64, Layout::Contiguous, 17), zeros({}, kFloat64));
  const Tensor cond2 = gt(random_tensor({3, 4}, kFloat64, Layout::Contiguous, 18), zeros({}, kFloat64));
  const Tensor a = leaf({3, 4}, 19), b = leaf({4}, 20), s = leaf({}, 21);
  EXPECT_GRAD([&](const Ins& x) { return where(cond, x[0], x[1]); }, {a, b});
  EXPECT_GRAD([&](const Ins& x) { return where(cond2, x[0], x[1]); }, {s, a});
}

TEST(AutogradGradcheck, Reductions) {
  const Tensor x = leaf({3, 4, 5}, 22);
  for (bool keep : {false, true}) {
    SCOPED_TRACE(keep ? "keepdim" : "no keepdim");
    for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{}, {1}, {0, 2}, {-1}}) {
      EXPECT_GRAD([&](const Ins& v) { return sum(v[0], dims, keep); }, {x});
      EXPECT_GRAD([&](const Ins& v) { return mean(v[0], dims, keep); }, {x});
      EXPECT_GRAD([&](const Ins& v) { return amax(v[0], dims, keep); }, {x});
      EXPECT_GRAD([&](const Ins& v) { return amin(v[0], dims, keep); }, {x});
      EXPECT_GRAD([&](const Ins& v) { return var(v[0], dims, 1, keep); }, {x});
      EXPECT_GRAD([&](const Ins& v) { return var(v[0], dims, 0, keep); }, {x});
    }
    EXPECT_GRAD([&](const Ins& v) { return max(v[0], 1, keep).first; }, {x});
    EXPECT_GRAD([&](const Ins& v) { return max(v[0], -1, keep).first; }, {x});
    EXPECT_GRAD([&](const Ins& v) { return min(v[0], 0, keep).first; }, {x});
  }
  EXPECT_GRAD([](const Ins& v) { return max(v[0]); }, {x});
  EXPECT_GRAD([](const Ins& v) { return min(v[0]); }, {x});
  EXPECT_GRAD([](const Ins& v) { return sum(v[0].transpose(0, 2), {1}); }, {x});
}

TEST(AutogradGradcheck, MatmulAllForms) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{4}, {4}},             {{4}, {4, 3}},          {{3, 4}, {4}},        {{3, 4}, {4, 2}},
      {{2, 3, 4}, {2, 4, 5}}, {{2, 3, 4}, {4, 5}},    {{3, 4}, {2, 4, 5}},  {{4}, {2, 4, 3}},
      {{2, 3, 4}, {4}},       {{2, 1, 3, 4}, {1, 3, 4, 2}}, {{2, 1, 3, 4}, {3, 4, 2}},
  };
  uint64_t seed = 30;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.a) + " @ " + shape_str(c.b));
    EXPECT_GRAD([](const Ins& x) { return matmul(x[0], x[1]); }, {leaf(c.a, seed), leaf(c.b, seed + 1)});
    seed += 2;
  }
  // Transposed (non-contiguous) operands.
  EXPECT_GRAD([](const Ins& x) { return matmul(x[0].t(), x[1].t()); }, {leaf({4, 3}, 60), leaf({2, 4}, 61)});
}

TEST(AutogradGradcheck, SoftmaxLogSoftmax) {
  const Tensor x = leaf({3, 4, 5}, 62), s = leaf({}, 63), one = leaf({4, 1}, 64);
  for (int64_t d : {0, 1, 2, -1}) {
    SCOPED_TRACE("dim " + std::to_string(d));
    EXPECT_GRAD([d](const Ins& v) { return softmax(v[0], d); }, {x});
    EXPECT_GRAD([d](const Ins& v) { return log_softmax(v[0], d); }, {x});
  }
  EXPECT_GRAD([](const Ins& v) { return softmax(v[0], 0); }, {s});
  EXPECT_GRAD([](const Ins& v) { return log_softmax(v[0], 1); }, {one});
  EXPECT_GRAD([](const Ins& v) { return softmax(v[0].transpose(0, 2), 1); }, {x});
}

TEST(AutogradGradcheck, CatStack) {
  const Tensor a = leaf({2, 3}, 65), b = leaf({2, 1}, 66), c = leaf({2, 4}, 67), d = leaf({2, 3}, 68);
  EXPECT_GRAD([](const Ins& x) { return cat({x[0], x[1], x[2]}, 1); }, {a, b, c});
  EXPECT_GRAD([](const Ins& x) { return cat({x[0], x[1]}, 0); }, {a, d});
  EXPECT_GRAD([](const Ins& x) { return cat({x[0], x[1]}, -1); }, {a, b});
  EXPECT_GRAD([](const Ins& x) { return stack({x[0], x[1]}, 0); }, {a, d});
  EXPECT_GRAD([](const Ins& x) { return stack({x[0], x[1]}, 2); }, {a, d});
  // One operand that does not require grad.
  const Tensor fixed = random_tensor({2, 3}, kFloat64, Layout::Contiguous, 69);
  EXPECT_GRAD([&](const Ins& x) { return cat({fixed, x[0]}, 0); }, {a});
}

TEST(AutogradGradcheck, IndexSelectGatherScatterAdd) {
  const Tensor x = leaf({4, 3}, 70);
  const Tensor rep = tensor({0, 2, 0, 3, 2, 2}, kInt64);  // repeated indices accumulate
  EXPECT_GRAD([&](const Ins& v) { return index_select(v[0], 0, rep); }, {x});
  EXPECT_GRAD([&](const Ins& v) { return index_select(v[0], 1, tensor({2, 2, 0}, kInt64)); }, {x});
  EXPECT_GRAD([&](const Ins& v) { return index_select(v[0], 0, tensor({3, 1}, kInt32)); }, {x});
  const Tensor gi = tensor({0, 2, 2, 1, 1, 1, 2, 0}, {4, 2}, kInt64);
  EXPECT_GRAD([&](const Ins& v) { return gather(v[0], 1, gi); }, {x});
  EXPECT_GRAD([&](const Ins& v) { return gather(v[0], 1, tensor({1, 1, 0, 2}, {2, 2}, kInt64)); }, {x});
  EXPECT_GRAD([&](const Ins& v) { return gather(v[0], 0, tensor({3, 3, 0, 1, 0, 3}, {2, 3}, kInt64)); }, {x});
  // src [3, 5] larger than index [2, 4]; positions repeat.
  const Tensor self = leaf({4, 5}, 71), src = leaf({3, 5}, 72);
  const Tensor si = tensor({0, 3, 3, 1, 2, 0, 3, 3}, {2, 4}, kInt64);
  EXPECT_GRAD([&](const Ins& v) { return scatter_add(v[0], 0, si, v[1]); }, {self, src});
  EXPECT_GRAD([&](const Ins& v) { return scatter_add(v[0], 1, si, v[1]); }, {self, src});
}

TEST(AutogradGradcheck, Conv2d) {
  struct Case {
    Shape x, w;
    bool bias;
    std::pair<int64_t, int64_t> stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{2, 3, 5, 5}, {4, 3, 3, 3}, true, {1, 1}, {0, 0}, {1, 1}, 1},
      {{1, 2, 6, 5}, {3, 2, 3, 2}, true, {2, 1}, {1, 0}, {1, 1}, 1},
      {{1, 2, 7, 7}, {2, 2, 3, 3}, false, {1, 2}, {2, 1}, {2, 1}, 1},
      {{2, 4, 5, 4}, {4, 2, 2, 3}, true, {1, 1}, {1, 1}, {1, 1}, 2},
      {{1, 3, 4, 4}, {3, 1, 3, 3}, true, {1, 1}, {1, 1}, {1, 1}, 3},  // depthwise
      {{2, 5, 4}, {3, 2, 2, 2}, true, {1, 1}, {0, 0}, {1, 1}, 1},     // unbatched [C, H, W]
  };
  uint64_t seed = 80;
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w) + " groups " + std::to_string(c.groups));
    Ins in = {leaf(c.x, seed), leaf(c.w, seed + 1)};
    if (c.bias) in.push_back(leaf({c.w[0]}, seed + 2));
    seed += 3;
    EXPECT_GRAD([&c](const Ins& v) {
      return conv2d(v[0], v[1], c.bias ? v[2] : Tensor(), c.stride, c.padding, c.dilation, c.groups);
    }, in);
  }
}

TEST(AutogradGradcheck, Pooling) {
  const Tensor x = leaf({2, 2, 6, 5}, 100), x3 = leaf({2, 5, 5}, 101);
  auto opts = [](std::pair<int64_t, int64_t> k, std::optional<std::pair<int64_t, int64_t>> s,
                 std::pair<int64_t, int64_t> p, bool include_pad = true) {
    Pool2dOptions o;
    o.kernel_size = k;
    o.stride = s;
    o.padding = p;
    o.count_include_pad = include_pad;
    return o;
  };
  EXPECT_GRAD([&](const Ins& v) { return max_pool2d(v[0], opts({2, 2}, std::nullopt, {0, 0})); }, {x});
  EXPECT_GRAD([&](const Ins& v) { return max_pool2d(v[0], opts({3, 3}, {{1, 1}}, {1, 1})); }, {x});  // overlapping
  EXPECT_GRAD([&](const Ins& v) { return max_pool2d(v[0], opts({3, 2}, {{2, 1}}, {1, 0})); }, {x3});
  Pool2dOptions dil = opts({2, 2}, {{1, 1}}, {0, 0});
  dil.dilation = {2, 2};
  EXPECT_GRAD([&](const Ins& v) { return max_pool2d(v[0], dil); }, {x});
  for (bool include_pad : {true, false}) {
    SCOPED_TRACE(include_pad ? "count_include_pad" : "exclude pad");
    EXPECT_GRAD([&](const Ins& v) { return avg_pool2d(v[0], opts({3, 3}, {{2, 2}}, {1, 1}, include_pad)); }, {x});
    EXPECT_GRAD([&](const Ins& v) { return avg_pool2d(v[0], opts({2, 3}, {{1, 2}}, {1, 1}, include_pad)); }, {x3});
  }
  EXPECT_GRAD([&](const Ins& v) { return avg_pool2d(v[0], opts({2, 2}, std::nullopt, {0, 0})); }, {x});
  Pool2dOptions ceil = opts({2, 2}, {{2, 2}}, {1, 1});  // ceil_mode: partial windows at the end
  ceil.ceil_mode = true;
  EXPECT_GRAD([&](const Ins& v) { return max_pool2d(v[0], ceil); }, {x});
  EXPECT_GRAD([&](const Ins& v) { return avg_pool2d(v[0], ceil); }, {x});
  ceil.count_include_pad = false;
  EXPECT_GRAD([&](const Ins& v) { return avg_pool2d(v[0], ceil); }, {x});
  Pool2dOptions div = opts({3, 3}, {{2, 2}}, {1, 1});
  div.divisor_override = 4;
  EXPECT_GRAD([&](const Ins& v) { return avg_pool2d(v[0], div); }, {x});
}

TEST(AutogradGradcheck, Views) {
  const Tensor x = leaf({2, 3, 4}, 110), m = leaf({3, 4}, 111), col = leaf({3, 1}, 112);
  const Tensor ones4 = leaf({3, 1, 4, 1}, 113);
  EXPECT_GRAD([](const Ins& v) { return v[0].view({6, 4}); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].view({-1}); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].reshape({4, 6}); }, {x});                  // view path
  EXPECT_GRAD([](const Ins& v) { return v[0].transpose(0, 2).reshape({-1, 2}); }, {x});  // copy path
  EXPECT_GRAD([](const Ins& v) { return v[0].permute({2, 0, 1}); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].permute({-1, 1, 0}) * 2.0; }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].transpose(0, 2); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].t(); }, {m});
  EXPECT_GRAD([](const Ins& v) { return v[0].narrow(2, 1, 2); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].narrow(0, -1, 1); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].slice(2, 0, 4, 2); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].slice(1, 1, 100, 2); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].select(1, 2); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].select(-1, -1); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].expand({2, 3, 5}); }, {col});
  EXPECT_GRAD([](const Ins& v) { return v[0].expand({-1, 4}); }, {col});
  EXPECT_GRAD([](const Ins& v) { return v[0].squeeze(); }, {ones4});
  EXPECT_GRAD([](const Ins& v) { return v[0].squeeze(1); }, {ones4});
  EXPECT_GRAD([](const Ins& v) { return v[0].unsqueeze(1); }, {m});
  EXPECT_GRAD([](const Ins& v) { return v[0].unsqueeze(-1); }, {m});
  EXPECT_GRAD([](const Ins& v) { return v[0].flatten(1, 2); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].flatten(); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].transpose(0, 1).contiguous(); }, {m});
  EXPECT_GRAD([](const Ins& v) { return v[0].clone(); }, {m});
  // Down to and up from 0-dim.
  const Tensor s = leaf({}, 114), one = leaf({1, 1}, 115);
  EXPECT_GRAD([](const Ins& v) { return v[0].expand({2, 3}); }, {s});
  EXPECT_GRAD([](const Ins& v) { return v[0].unsqueeze(0); }, {s});
  EXPECT_GRAD([](const Ins& v) { return v[0].squeeze(); }, {one});
  EXPECT_GRAD([](const Ins& v) { return v[0].reshape({}); }, {one});
  EXPECT_GRAD([](const Ins& v) { return v[0].select(0, 1).select(0, 2); }, {m});
  // Views of views, and a view feeding an op twice.
  EXPECT_GRAD([](const Ins& v) { return v[0].permute({1, 2, 0}).narrow(0, 1, 2).select(2, 1).t(); }, {x});
  EXPECT_GRAD([](const Ins& v) { return v[0].select(0, 0) * v[0].select(0, 1); }, {x});
}

TEST(AutogradGradcheck, DtypeRoundTrip) {
  // float64 -> float32 -> float64: the float32 rounding needs a wider step and tolerance.
  EXPECT_GRAD([](const Ins& v) { return v[0].to(kFloat32).to(kFloat64); }, {leaf({2, 3}, 120)}, 1e-3, 1e-3, 1e-3);
  EXPECT_GRAD([](const Ins& v) { return v[0].to(kFloat64) * 3.0; }, {leaf({2, 3}, 121)});  // same dtype: no-op
  // A float32 leaf: the gradient comes back through the conversion as float32.
  Tensor x = random_tensor({2, 3}, kFloat32, Layout::Contiguous, 122);
  x.requires_grad_();
  Tensor w = random_tensor({2, 3}, kFloat64, Layout::Contiguous, 123);
  Tensor y = x.to(kFloat64);
  EXPECT_EQ(y.grad_fn_name(), "to");
  sum(y * w).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_DTYPE(x.grad(), kFloat32);
  EXPECT_TRUE(all_close(x.grad(), w, 1e-7, 1e-7));
}

TEST(AutogradGradcheck, CompositeMlp) {
  // tanh(x W + b) -> log_softmax -> pick a column: a small network, every input at once.
  const Tensor x = leaf({4, 3}, 130), w = leaf({3, 5}, 131), b = leaf({5}, 132);
  EXPECT_GRAD([](const Ins& v) {
    Tensor h = tanh(matmul(v[0], v[1]) + v[2]);
    return mean(log_softmax(h, 1).select(1, 2)) + var(h);
  }, {x, w, b});
  EXPECT_GRAD([](const Ins& v) { return matmul(v[0], v[0].t()) * v[0].select(1, 0).unsqueeze(1); }, {x});
}

TEST(AutogradGradcheck, GradcheckRejectsWrongGradientsAndBadInputs) {
  // x * detach(x) has analytic gradient x but numeric 2x: gradcheck must say so.
  const std::string msg = error_message([] {
    gradcheck([](const Ins& v) { return v[0] * v[0].detach(); }, {leaf({3}, 140)});
  });
  EXPECT_NE(msg.find("gradcheck: input 0 element"), std::string::npos) << msg;
  EXPECT_NE(msg.find("numeric"), std::string::npos) << msg;
  Tensor f32 = random_tensor({2}, kFloat32);
  f32.requires_grad_();
  EXPECT_EMBER_ERROR(gradcheck([](const Ins& v) { return v[0]; }, {f32}), "gradcheck", "float64");
  EXPECT_EMBER_ERROR(gradcheck([](const Ins& v) { return v[0]; }, {random_tensor({2}, kFloat64)}), "gradcheck");
}

// PyTorch's choices where the derivative is undefined or the formula would give NaN.
TEST(AutogradConventions, KinksTiesAndZeroExponents) {
  auto grad_of = [](const std::vector<double>& v, const std::function<Tensor(const Tensor&)>& f) {
    Tensor x = tensor(v, kFloat64);
    x.requires_grad_();
    sum(f(x)).backward();
    return x.grad();
  };
  EXPECT_CLOSE(grad_of({-1, 0, 2}, [](const Tensor& x) { return relu(x); }), std::vector<double>({0, 0, 1}),
               Shape{3}, 0, 0);
  EXPECT_CLOSE(grad_of({-1, 0, 2}, [](const Tensor& x) { return abs(x); }), std::vector<double>({-1, 0, 1}),
               Shape{3}, 0, 0);
  EXPECT_CLOSE(grad_of({-1, 0, 1, 2}, [](const Tensor& x) { return clamp(x, -1.0, 1.0); }),
               std::vector<double>({1, 1, 1, 0}), Shape{4}, 0, 0);  // bounds included
  const Tensor other = tensor({1, 1, 1}, kFloat64);
  EXPECT_CLOSE(grad_of({0, 1, 2}, [&](const Tensor& x) { return maximum(x, other); }),
               std::vector<double>({0, 0.5, 1}), Shape{3}, 0, 0);  // a tie splits the gradient
  EXPECT_CLOSE(grad_of({0, 1, 2}, [&](const Tensor& x) { return minimum(x, other); }),
               std::vector<double>({1, 0.5, 0}), Shape{3}, 0, 0);
  EXPECT_CLOSE(grad_of({3, 1, 3}, [](const Tensor& x) { return amax(x); }), std::vector<double>({0.5, 0, 0.5}),
               Shape{3}, 0, 0);  // shared evenly among tied extrema
  EXPECT_CLOSE(grad_of({3, 1, 3}, [](const Tensor& x) { return max(x); }), std::vector<double>({0.5, 0, 0.5}),
               Shape{3}, 0, 0);
  EXPECT_CLOSE(grad_of({1, 1, 3}, [](const Tensor& x) { return amin(x); }), std::vector<double>({0.5, 0.5, 0}),
               Shape{3}, 0, 0);
  // The exponent's gradient a^b log a is taken as 0 at a = 0, b >= 0.
  const Tensor zero_base = zeros({3}, kFloat64);
  EXPECT_CLOSE(grad_of({0, 1, 2}, [&](const Tensor& b) { return pow(zero_base, b); }), std::vector<double>({0, 0, 0}),
               Shape{3}, 0, 0);
  EXPECT_CLOSE(grad_of({0, 2}, [](const Tensor& x) { return pow(x, Scalar(2)); }), std::vector<double>({0, 4}),
               Shape{2}, 0, 0);
}

TEST(AutogradConventions, PowZeroExponentHasZeroGradientAtZeroBase) {
  auto grad_of = [](const std::vector<double>& v, const std::function<Tensor(const Tensor&)>& f) {
    Tensor x = tensor(v, kFloat64);
    x.requires_grad_();
    sum(f(x)).backward();
    return x.grad();
  };
  // pow: d/dx x^0 = 0 everywhere, also at x = 0 (PyTorch's pow_backward returns zeros for a
  // zero exponent, and pow_backward_self masks exponent == 0), not 0 * 0^-1 = NaN.
  EXPECT_CLOSE(grad_of({0, 1, 2}, [](const Tensor& x) { return pow(x, Scalar(0)); }), std::vector<double>({0, 0, 0}),
               Shape{3}, 0, 0);
  EXPECT_CLOSE(grad_of({0, 1, 2}, [](const Tensor& x) { return pow(x, Scalar(0.0)); }),
               std::vector<double>({0, 0, 0}), Shape{3}, 0, 0);
  const Tensor zero_exp = zeros({3}, kFloat64);
  EXPECT_CLOSE(grad_of({0, 1, 2}, [&](const Tensor& x) { return pow(x, zero_exp); }), std::vector<double>({0, 0, 0}),
               Shape{3}, 0, 0);
}

}  // namespace
}  // namespace ember::test
