// Capturable optimizers (Options::capturable): the learning rate and step count in device
// tensors, the bias corrections computed from the step by the kernel. Over 10 steps, with
// an lr change, they equal the ordinary optimizers on the test's device; on a CUDA device
// a step captured in a CUDA graph (core/cuda_graph.h) and replayed equals eager steps.
//
// The bound. SGD reads the same double lr: the same bits. Adam's kernel computes the
// corrections with AdamUpdate::at, the code core runs on the host; where pow rounds as
// the host's (the CPU, the emulator) the constants and so the results are bit-identical.
// A GPU's double pow may differ by an ulp of double; T(lr / bc1) and T(1 / sqrt(bc2)) then
// round to the same or an adjacent T, so each step's update u differs by at most
// 2 eps_T |u| (eps_T = 2^-24 for float, 2^-53 for double), and |u| <= lr (1 - b1) /
// sqrt(1 - b2) (Adam's bound on its step, Kingma & Ba 2.1). Over n steps:
// |p - p_capturable| <= sum_k 2 eps_T lr_k (1 - b1) / sqrt(1 - b2), which the device
// check takes twice (the L2 term feeds a difference of p back into g, second order).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "core/cuda_graph.h"
#include "tests/core/reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

using optim::Adam;
using optim::AdamW;
using optim::SGD;

constexpr int kSteps = 10;
constexpr double kLr = 1e-2, kLrAfter = 3e-3;  // the lr changes before step 6

struct Params {
  std::vector<Tensor> p;
  explicit Params(Device dev) {
    for (int64_t n : {7, 1000, 1, 130}) {
      Generator gen(static_cast<uint64_t>(n));
      Tensor t = randn({n}, {kFloat32, Device::cpu()}, &gen).to(dev);
      t.requires_grad_();
      p.push_back(t);
    }
  }
};

// The gradient of step k of parameter i: fixed, so both runs see the same.
Tensor grad_at(const Tensor& p, int k, size_t i) {
  Generator gen(100 * static_cast<uint64_t>(k) + i);
  return randn(p.shape(), {kFloat32, Device::cpu()}, &gen).to(p.device());
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>, bool capturable)>;

// Runs kSteps of the optimizer on a fresh copy of the parameters; returns them.
std::vector<std::vector<float>> train(const MakeOptimizer& make, bool capturable) {
  Params ps(test_device());
  auto opt = make(ps.p, capturable);
  for (int k = 1; k <= kSteps; ++k) {
    if (k == 6) opt->set_lr(kLrAfter);
    for (size_t i = 0; i < ps.p.size(); ++i) ps.p[i].set_grad(grad_at(ps.p[i], k, i));
    opt->step();
  }
  EXPECT_EQ(opt->steps(), kSteps);
  std::vector<std::vector<float>> out;
  for (const Tensor& p : ps.p) out.push_back(p.to_vector<float>());
  return out;
}

#ifdef EMBER_TEST_EMULATED_CUDA
constexpr bool kHostPow = true;  // the emulated device runs the kernels on the host
#else
constexpr bool kHostPow = false;
#endif

// Adam's bound above (float32), for betas 0.9 / 0.999; 0 (bit-identical) where the
// device's pow is the host's.
double adam_bound() {
  if (!on_cuda() || kHostPow) return 0;
  const double per_lr = 2 * std::ldexp(1.0, -24) * 0.1 / std::sqrt(0.001);
  return 2 * per_lr * (5 * kLr + 5 * kLrAfter);
}

void expect_equal(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b, double bound) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (bound == 0) {
      EXPECT_EQ(a[i], b[i]) << "parameter " << i;
      continue;
    }
    for (size_t j = 0; j < a[i].size(); ++j)
      ASSERT_LE(std::abs(double(a[i][j]) - double(b[i][j])), bound) << "parameter " << i << ", element " << j;
  }
}

const MakeOptimizer kAdam = [](std::vector<Tensor> p, bool c) {
  return std::make_unique<Adam>(std::move(p), Adam::Options{.lr = kLr, .weight_decay = 0.1, .capturable = c});
};
const MakeOptimizer kAdamW = [](std::vector<Tensor> p, bool c) {
  return std::make_unique<AdamW>(std::move(p), AdamW::Options{.lr = kLr, .capturable = c});
};
const MakeOptimizer kSgd = [](std::vector<Tensor> p, bool c) {
  return std::make_unique<SGD>(std::move(p),
                               SGD::Options{.lr = kLr, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true,
                                            .capturable = c});
};

TEST(Capturable, AdamAndAdamWEqualTheOrdinaryStepsAcrossAnLrChange) {
  expect_equal(train(kAdam, true), train(kAdam, false), adam_bound());
  expect_equal(train(kAdamW, true), train(kAdamW, false), adam_bound());
}

TEST(Capturable, SgdWithMomentumIsBitIdenticalAcrossAnLrChange) {
  expect_equal(train(kSgd, true), train(kSgd, false), 0);
}

TEST(Capturable, TheStateDictIsTheOrdinaryOnesAndLoadsIntoEither) {
  Params a(test_device()), b(test_device());
  Adam capturable(a.p, {.lr = kLr, .capturable = true});
  Adam ordinary(b.p, {.lr = kLr});
  for (int k = 1; k <= 3; ++k) {
    for (size_t i = 0; i < a.p.size(); ++i) {
      a.p[i].set_grad(grad_at(a.p[i], k, i));
      b.p[i].set_grad(grad_at(b.p[i], k, i));
    }
    capturable.step();
    ordinary.step();
  }
  const NamedTensors sa = capturable.state_dict(), sb = ordinary.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_EQ(sa[i].second.to(kFloat64).to_vector<double>(), sb[i].second.to(kFloat64).to_vector<double>())
        << sa[i].first;
  }
  Params c(test_device());
  Adam resumed(c.p, {.lr = 1, .capturable = true});
  resumed.load_state_dict(sb);
  EXPECT_EQ(resumed.steps(), 3);
  EXPECT_EQ(resumed.lr(), kLr);
}

TEST(Capturable, ZeroGradInPlaceKeepsTheGradientsAddresses) {
  Params ps(test_device());
  SGD opt(ps.p, {.lr = kLr});
  for (size_t i = 0; i < ps.p.size(); ++i) ps.p[i].set_grad(grad_at(ps.p[i], 1, i));
  const void* before = ps.p[1].grad().data_ptr();
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_EQ(ps.p[1].grad().data_ptr(), before);
  EXPECT_EQ(sum(abs(ps.p[1].grad())).item<double>(), 0.0);
  opt.zero_grad();
  EXPECT_FALSE(ps.p[1].grad().defined());
}

// A whole training step (zero_grad in place, forward, loss, backward, capturable Adam)
// captured once and replayed per batch equals eager steps with the ordinary Adam, also
// after an lr change written between replays; set_lr inside a capture is an error.
TEST(Capturable, AWholeStepReplayedFromACudaGraphEqualsEagerSteps) {
  if (!on_cuda()) GTEST_SKIP() << "needs a CUDA device (EMBER_TEST_DEVICE=cuda; emulated: EMBER_CUDA=EMULATED)";
  const Device dev = test_device();
  auto make_model = [&] {
    manual_seed(5);
    auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 4)});
    m->to(dev);
    return m;
  };
  auto graph_model = make_model(), eager_model = make_model();
  Adam graph_opt(graph_model->parameters(), {.lr = kLr, .capturable = true});
  Adam eager_opt(eager_model->parameters(), {.lr = kLr});
  const nn::CrossEntropyLoss criterion;
  auto batch = [&](int k) {
    Generator gen(static_cast<uint64_t>(k));
    return std::pair{randn({8, 12}, {kFloat32, Device::cpu()}, &gen).to(dev),
                     randint(0, 4, {8}, {kInt64, Device::cpu()}, &gen).to(dev)};
  };
  auto step = [&](nn::Module& m, optim::Optimizer& o, const Tensor& x, const Tensor& y) {
    o.zero_grad(/*set_to_none=*/false);
    Tensor l = criterion(m(x), y);
    l.backward();
    o.step();
    return l.detach();
  };
  const Tensor x = zeros({8, 12}, {kFloat32, dev}), y = zeros({8}, {kInt64, dev});
  int k = 0;
  for (; k < 2; ++k) {  // eager warm-up: the gradients and Adam's moments exist after it
    auto [bx, by] = batch(k);
    step(*graph_model, graph_opt, bx, by);
    step(*eager_model, eager_opt, bx, by);
  }
  CudaGraph graph;
  Tensor loss;
  {
    CudaGraphCapture capture(graph);
    EXPECT_THROW(graph_opt.set_lr(1), Error);
    loss = step(*graph_model, graph_opt, x, y);
  }
  for (; k < 2 + kSteps; ++k) {
    if (k == 6) {
      graph_opt.set_lr(kLrAfter);
      eager_opt.set_lr(kLrAfter);
    }
    auto [bx, by] = batch(k);
    x.copy_(bx);
    y.copy_(by);
    graph.replay();
    const float eager_loss = step(*eager_model, eager_opt, bx, by).item<float>();
    if (adam_bound() == 0)
      EXPECT_EQ(loss.item<float>(), eager_loss) << "step " << k;
    else
      EXPECT_NEAR(loss.item<float>(), eager_loss, 1e-5 * std::abs(eager_loss)) << "step " << k;
  }
  EXPECT_EQ(graph_opt.steps(), 2 + kSteps);
  const std::vector<Tensor> pg = graph_model->parameters(), pe = eager_model->parameters();
  // A replay runs the eager step's kernels on the same values; only the corrections may
  // differ (the bound above, which a parameter's difference also feeds through later
  // gradients: 10 times it).
  std::vector<std::vector<float>> a, b;
  for (size_t i = 0; i < pg.size(); ++i) {
    a.push_back(pg[i].to_vector<float>());
    b.push_back(pe[i].to_vector<float>());
  }
  expect_equal(a, b, 10 * adam_bound());
}

}  // namespace
}  // namespace ember::test
