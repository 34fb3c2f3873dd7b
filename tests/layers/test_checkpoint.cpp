// nn::Checkpoint: the same gradients as the plain model, bit for bit (dropout's masks are
// drawn again identically, autocast's dtype is kept), for far less memory on a deep MLP.
#include <gtest/gtest.h>

#include <cstring>

#include "memory/caching_allocator.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

// Block i: Linear(W, 4W), ReLU, [Dropout,] Linear(4W, W), as in a transformer's MLP.
std::shared_ptr<nn::Sequential> deep_mlp(int blocks, int64_t width, bool checkpoint, double dropout = 0) {
  manual_seed(21);
  auto net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < blocks; ++i) {
    auto block = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(width, 4 * width), std::make_shared<nn::ReLU>()});
    if (dropout > 0) block->push_back(std::make_shared<nn::Dropout>(dropout));
    block->push_back(std::make_shared<nn::Linear>(4 * width, width));
    if (checkpoint) net->push_back(std::make_shared<nn::Checkpoint>(block));
    else net->push_back(block);
  }
  return net;
}

struct Trace {
  std::vector<std::vector<double>> grads;  // parameters', then the input's
  int64_t peak = 0;                        // bytes allocated above the start, at most
};

Trace run(nn::Module& net, const Tensor& x0, bool input_grad) {
  memory::CachingAllocator& host = device_allocator(default_device());  // the tests' device
  Tensor x = input_grad ? x0.detach().requires_grad_() : x0;
  manual_seed(77);  // the dropout draws
  const int64_t start = host.stats().allocated_bytes[memory::kAllPools].current;
  host.reset_peak_stats();
  sum(net(x)).backward();
  Trace r;
  r.peak = host.stats().allocated_bytes[memory::kAllPools].peak - start;
  for (const Tensor& p : net.parameters()) r.grads.push_back(values(p.grad()));
  if (input_grad) r.grads.push_back(values(x.grad()));
  return r;
}

TEST(Checkpoint, SixteenBlocksUseFarLessMemoryForTheSameGradients) {
  const Tensor x = randn({1024, 128});
  auto plain = deep_mlp(16, 128, false), ckpt = deep_mlp(16, 128, true);
  const Trace a = run(*plain, x, true), b = run(*ckpt, x, true);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << "tensor " << i;
  const double saved = 1.0 - static_cast<double>(b.peak) / static_cast<double>(a.peak);
  // Plain: each block keeps its input (0.5 MiB) and its hidden layer (2 MiB); checkpointed,
  // the inputs alone, plus one block's activations while it is differentiated again.
  std::printf("peak above the start: plain %.1f MiB, checkpointed %.1f MiB (%.0f%% lower)\n", a.peak / 1048576.0,
              b.peak / 1048576.0, 100 * saved);
  EXPECT_GE(saved, 0.40);
}

TEST(Checkpoint, DropoutMasksAreDrawnAgainIdentically) {
  const Tensor x = randn({64, 16});
  auto plain = deep_mlp(3, 16, false, 0.3), ckpt = deep_mlp(3, 16, true, 0.3);
  const Trace a = run(*plain, x, true), b = run(*ckpt, x, true);
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << "tensor " << i;
  // After the backward the generator is where the forward left it, not where the recompute did.
  manual_seed(77);
  Tensor y = (*ckpt)(x);
  const uint64_t offset = default_generator().offset();
  sum(y).backward();
  EXPECT_EQ(default_generator().offset(), offset);
}

TEST(Checkpoint, TheRecomputeRunsUnderTheForwardsAutocast) {
  const Tensor x = randn({32, 16});
  auto plain = deep_mlp(2, 16, false), ckpt = deep_mlp(2, 16, true);
  Tensor xa = x.detach().requires_grad_(), xb = x.detach().requires_grad_();
  Tensor ya, yb;
  {
    AutocastScope bf16(kBFloat16);  // the forward only: backward runs after the scope closed
    ya = (*plain)(xa);
    yb = (*ckpt)(xb);
  }
  EXPECT_DTYPE(yb, kBFloat16);
  sum(ya).backward();
  sum(yb).backward();
  const std::vector<Tensor> pa = plain->parameters(), pb = ckpt->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(values(pa[i].grad()), values(pb[i].grad())) << "parameter " << i;
  EXPECT_EQ(values(xa.grad()), values(xb.grad()));
}

TEST(Checkpoint, ParametersGetGradientsWhenTheInputNeedsNone) {
  const Tensor x = randn({8, 16});
  auto plain = deep_mlp(2, 16, false), ckpt = deep_mlp(2, 16, true);
  const Trace a = run(*plain, x, false), b = run(*ckpt, x, false);
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_EQ(a.grads[i], b.grads[i]) << "tensor " << i;
  NoGradGuard no_grad;  // without autograd it is the plain forward
  EXPECT_EQ(values((*ckpt)(x)), values((*plain)(x)));
}

}  // namespace
}  // namespace ember::test
