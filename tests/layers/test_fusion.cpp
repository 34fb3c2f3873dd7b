// Fused activations (Note [Fused activations] in layers/containers.cpp): linear and conv2d
// with Activation::kReLU give what the op followed by relu() gives, bit for bit, forward
// and backward (NaN and negative zero included), and a Sequential with fusion on trains
// exactly like one with fusion off.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "kernels/cpu/conv.h"
#include "kernels/cuda/variants.h"
#include "memory/caching_allocator.h"
#include "tests/core/reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

// Equal bit for bit (so NaN == NaN and -0 != +0).
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << "shapes differ";
  const std::vector<double> x = values(a), y = values(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << x[i] << " vs " << y[i];
  return ::testing::AssertionSuccess();
}

// Inputs with a NaN, exact zeros and negative zeros, so the fused ReLU meets every case.
Tensor awkward(const Shape& s, DType d, uint64_t seed) {
  std::vector<double> v = values(random_tensor(s, d, Layout::Contiguous, seed));
  v[0] = std::numeric_limits<double>::quiet_NaN();
  if (v.size() > 2) v[1] = 0.0, v[2] = -0.0;
  return tensor(v, s, {d});
}

// op(inputs, act) against relu(op(inputs, kNone)): outputs and every input's gradient.
void expect_fusion_exact(const std::function<Tensor(const std::vector<Tensor>&, Activation)>& op,
                         const std::vector<Tensor>& inputs) {
  auto run = [&](bool fused) {
    std::vector<Tensor> in;
    for (const Tensor& t : inputs) in.push_back(t.detach().requires_grad_());
    Tensor y = fused ? op(in, Activation::kReLU) : relu(op(in, Activation::kNone));
    Tensor g = random_tensor(y.shape(), y.dtype(), Layout::Contiguous, 99);
    y.backward(g);
    std::vector<Tensor> out{y};
    for (const Tensor& t : in) out.push_back(t.grad());
    return out;
  };
  const std::vector<Tensor> fused = run(true), plain = run(false);
  for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(same_bits(fused[i], plain[i])) << (i ? "gradient " : "output");
}

TEST(Fusion, LinearReluIsExactlyLinearThenRelu) {
  for (DType d : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(d));
    expect_fusion_exact([](const std::vector<Tensor>& v, Activation a) { return linear(v[0], v[1], v[2], a); },
                        {awkward({7, 13}, d, 1), random_tensor({5, 13}, d, Layout::Contiguous, 2),
                         random_tensor({5}, d, Layout::Contiguous, 3)});
    expect_fusion_exact([](const std::vector<Tensor>& v, Activation a) { return linear(v[0], v[1], {}, a); },
                        {awkward({2, 3, 13}, d, 4), random_tensor({5, 13}, d, Layout::Contiguous, 5)});
  }
}

TEST(Fusion, Conv2dReluIsExactlyConv2dThenRelu) {
  using kernels::cpu::ConvVariant;
  const DeterministicConv deterministic;
  for (ConvVariant v : {ConvVariant::Im2col, ConvVariant::Winograd}) {
    const ConvVariant saved = kernels::cpu::conv_variant();
    kernels::cpu::set_conv_variant(v);
    for (DType d : {kFloat32, kFloat64}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + (v == ConvVariant::Winograd ? " winograd" : " im2col"));
      expect_fusion_exact(
          [](const std::vector<Tensor>& t, Activation a) { return conv2d(t[0], t[1], t[2], {1, 1}, {1, 1}, {1, 1}, 1, a); },
          {awkward({2, 17, 9, 7}, d, 6), random_tensor({18, 17, 3, 3}, d, Layout::Contiguous, 7),
           random_tensor({18}, d, Layout::Contiguous, 8)});
    }
    kernels::cpu::set_conv_variant(saved);
  }
}

TEST(Fusion, MaxPoolReluIsExactlyReluThenMaxPool) {
  const Pool2dOptions pools[] = {Pool2dOptions{.kernel_size = {2, 2}},
                                 Pool2dOptions{.kernel_size = {3, 3}, .stride = std::pair<int64_t, int64_t>{2, 2},
                                               .padding = {1, 1}}};
  for (const Pool2dOptions& o : pools)
    for (DType d : {kFloat32, kFloat64}) {
      SCOPED_TRACE(std::string(dtype_name(d)) + " kernel " + std::to_string(o.kernel_size.first));
      // Shifted down so that many windows hold no positive value, plus a NaN and zeros.
      Tensor x = awkward({2, 3, 9, 11}, d, 12);
      x = (x - 0.8).detach();
      expect_fusion_exact(
          [&](const std::vector<Tensor>& t, Activation a) {
            return a == Activation::kReLU ? max_pool2d(t[0], o, a) : max_pool2d(t[0], o);
          },
          {x});
    }
}

// What the fusion saves in memory: the ReLU's full-size output is never made.
TEST(Fusion, ReluBeforeAPoolAllocatesNoFullSizeOutput) {
  manual_seed(3);
  nn::Sequential s{std::make_shared<nn::Conv2d>(1, 8, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}),
                   std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}})};
  Tensor x = randn({4, 1, 16, 16});
  const memory::CachingAllocator& host = device_allocator(default_device());  // the tests' device
  auto live_after_forward = [&](bool fuse) {
    s.set_fusion(fuse);
    const int64_t before = host.stats().allocated_bytes[memory::kAllPools].current;
    Tensor y = s(x);
    return host.stats().allocated_bytes[memory::kAllPools].current - before;
  };
  const int64_t relu_output = 4 * 8 * 16 * 16 * 4;  // [4, 8, 16, 16] floats
  EXPECT_EQ(live_after_forward(false) - live_after_forward(true), relu_output);
}

TEST(Fusion, SequentialTrainsTheSameWithAndWithoutFusion) {
  auto make = [] {
    manual_seed(5);
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 16, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}),
        std::make_shared<nn::ReLU>(),  // fused into the conv
        std::make_shared<nn::Conv2d>(16, 16, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}),
        std::make_shared<nn::ReLU>(),  // moved after the pool
        std::make_shared<nn::MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}}), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(16 * 3 * 3, 10), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(10, 3)});
  };
  const DeterministicConv deterministic;
  auto fused = make(), plain = make();
  plain->set_fusion(false);
  Tensor x = random_tensor({4, 1, 6, 6}, kFloat32, Layout::Contiguous, 11);
  Tensor yf = (*fused)(x), yp = (*plain)(x);
  EXPECT_TRUE(same_bits(yf, yp));
  sum(yf * yf).backward();
  sum(yp * yp).backward();
  const auto pf = fused->named_parameters(), pp = plain->named_parameters();
  ASSERT_EQ(pf.size(), pp.size());
  for (size_t i = 0; i < pf.size(); ++i) EXPECT_TRUE(same_bits(pf[i].second.grad(), pp[i].second.grad())) << pf[i].first;
}

TEST(Fusion, SequentialFusesALinearOrConv2dFollowedByRelu) {
  nn::Sequential s{std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::ReLU>()};
  Tensor x = randn({2, 4});
  EXPECT_EQ(s(x).grad_fn_name(), "linear");  // one node: the ReLU is inside it
  s.set_fusion(false);
  EXPECT_EQ(s(x).grad_fn_name(), "relu");
  nn::Sequential c{std::make_shared<nn::Conv2d>(1, 2, nn::Pair{3, 3}), std::make_shared<nn::ReLU>()};
  EXPECT_EQ(c(randn({1, 1, 5, 5})).grad_fn_name(), "conv2d");
  nn::Sequential alone{std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 3)};  // ReLU first: nothing to fuse
  EXPECT_EQ(alone(x).grad_fn_name(), "linear");
}

}  // namespace
}  // namespace ember::test
