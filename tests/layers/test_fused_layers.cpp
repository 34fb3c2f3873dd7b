// The layers, losses and optimizers call the fused ops on every device (the op profiler
// counts each stub call), and their values still follow the fused op's float64 checks
// (tests/core/test_fused_*.cpp). Where a layer also needs a slot the test's device lacks,
// the test skips, naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tests/core/fused_util.h"

namespace ember::test {
namespace {

// The calls of `op` the profiler counted while `run` ran.
template <class F>
int64_t calls_of(const std::string& op, F&& run) {
  start_op_profiler();
  run();
  const std::vector<OpProfile> profile = stop_op_profiler();
  const auto it = std::find_if(profile.begin(), profile.end(), [&](const OpProfile& p) { return p.op == op; });
  return it == profile.end() ? 0 : it->calls;
}

TEST(FusedLayers, CrossEntropyLossCallsTheFusedOp) {
  const Tensor x = randn_on({8, 5}, kFloat32, 1).requires_grad_();
  const Tensor t = randint_on(0, 5, {8}, 2);
  start_op_profiler();
  nn::CrossEntropyLoss()(x, t).backward();
  const std::vector<OpProfile> profile = stop_op_profiler();
  for (const char* op : {"cross_entropy", "cross_entropy_backward"})
    EXPECT_TRUE(std::any_of(profile.begin(), profile.end(), [&](const OpProfile& p) { return p.op == op && p.calls == 1; }))
        << op;
}

TEST(FusedLayers, LayerNormAndDropoutCallTheFusedOps) {
  nn::LayerNorm ln({6});
  const Tensor x = randn_on({4, 6}, kFloat32, 1).requires_grad_();
  const Tensor g = randn_on({4, 6}, kFloat32, 2);
  EXPECT_EQ(calls_of("layer_norm_backward", [&] { ln.forward(x).backward(g); }), 1);
  x.set_grad({});  // a second backward into x would add (a slot the test's device may lack)
  nn::Dropout drop(0.25);
  EXPECT_EQ(calls_of("dropout_backward", [&] { drop.forward(x).backward(g); }), 1);
  drop.eval();
  EXPECT_EQ(calls_of("dropout", [&] { drop.forward(x); }), 0) << "eval mode is the identity";
}

TEST(FusedLayers, BatchNormAndEmbeddingCallTheFusedOps) {
  EMBER_SKIP_WITHOUT(index_select_stub);
  EMBER_SKIP_WITHOUT(rsqrt_stub);
  EMBER_SKIP_WITHOUT(add_stub);
  EMBER_SKIP_WITHOUT(normal_stub);  // Embedding initializes its weight with randn
  nn::BatchNorm2d bn(3);
  const Tensor x = randn_on({2, 3, 4, 4}, kFloat32, 1);
  EXPECT_EQ(calls_of("batch_norm_stats", [&] { bn.forward(x); }), 1);
  nn::Embedding emb(10, 4);
  const Tensor idx = randint_on(0, 10, {3, 2}, 1);
  EXPECT_EQ(calls_of("embedding_backward", [&] { sum(emb.forward(idx)).backward(); }), 1);
}

TEST(FusedLayers, OptimizersTakeOneMultiTensorStep) {
  std::vector<Tensor> params;
  for (int64_t n : {3, 1000, 1}) {
    params.push_back(randn_on({n}, kFloat32, n).requires_grad_());
    params.back().set_grad(randn_on({n}, kFloat32, n + 7));
  }
  optim::Adam adam(params, {});
  EXPECT_EQ(calls_of("multi_adam_update", [&] { adam.step(); }), 1);
  optim::SGD sgd(params, {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(calls_of("multi_sgd_update", [&] { sgd.step(); }), 1);  // every buffer starts now
  EXPECT_EQ(calls_of("multi_sgd_update", [&] { sgd.step(); }), 1);
}

}  // namespace
}  // namespace ember::test
