// Mixed precision (core/autocast.h): under AutocastScope(kBFloat16) the big ops compute in
// bf16 and keep bf16 activations, float32 parameters get float32 gradients close to the
// float32 ones, the loss stays float32, and a training step of the Fashion-MNIST CNN
// needs markedly less memory.
#include <gtest/gtest.h>

#include <cmath>

#include "memory/caching_allocator.h"
#include "tests/core/reference.h"

namespace ember::test {
namespace {

std::shared_ptr<nn::Sequential> cnn() {
  manual_seed(3);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 32, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}}),
      std::make_shared<nn::Conv2d>(32, 64, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(3136, 128), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(128, 10)});
}

struct Step {
  Tensor loss;
  std::vector<Tensor> grads;
  int64_t peak;  // bytes allocated above the start
};

Step step(bool bf16) {
  auto model = cnn();
  Generator gen(9);
  const Tensor x = rand({128, 1, 28, 28}, kFloat32, &gen), y = randint(0, 10, {128}, kInt64, &gen);
  memory::CachingAllocator& host = device_allocator(default_device());  // the tests' device
  const int64_t start = host.stats().allocated_bytes[memory::kAllPools].current;
  host.reset_peak_stats();
  Step s;
  {
    std::optional<AutocastScope> scope;
    if (bf16) scope.emplace(kBFloat16);
    Tensor logits = (*model)(x);
    EXPECT_DTYPE(logits, bf16 ? kBFloat16 : kFloat32);
    s.loss = nn::functional::cross_entropy(logits, y);
  }
  s.loss.backward();
  s.peak = host.stats().allocated_bytes[memory::kAllPools].peak - start;
  for (const Tensor& p : model->parameters()) s.grads.push_back(p.grad());
  return s;
}

TEST(Autocast, Bf16ComputeWithFloat32MasterWeights) {
  const Step f32 = step(false), b16 = step(true);
  EXPECT_DTYPE(b16.loss, kFloat32);  // losses compute in float32
  EXPECT_NEAR(b16.loss.item<double>(), f32.loss.item<double>(), 1e-2 * f32.loss.item<double>());
  ASSERT_EQ(b16.grads.size(), f32.grads.size());
  for (size_t i = 0; i < f32.grads.size(); ++i) {
    EXPECT_DTYPE(b16.grads[i], kFloat32);  // the parameters are float32, and so are their gradients
    // bf16 keeps 8 bits of mantissa, and a parameter's gradient sums many products that
    // cancel (random data): elementwise errors are large, the direction is kept.
    const std::vector<double> a = values(b16.grads[i]), b = values(f32.grads[i]);
    double dot = 0, na = 0, nb = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      dot += a[k] * b[k];
      na += a[k] * a[k];
      nb += b[k] * b[k];
    }
    EXPECT_GT(dot / std::sqrt(na * nb), 0.98) << "cosine of parameter " << i << "'s gradients";
  }
  // The memory: measured on this CNN at batch 128 (2026-12-03), the step's peak above the
  // start fell from 23.9 MiB (float32) to 13.3 MiB (56%): activations, saved tensors and
  // the gradients flowing back are bf16, and the kernels convert per image, not per tensor.
  std::printf("training step peak above the start: float32 %.1f MiB, bf16 autocast %.1f MiB (%.0f%%)\n",
              f32.peak / 1048576.0, b16.peak / 1048576.0, 100.0 * b16.peak / f32.peak);
#if defined(EMBER_CUDA_EMULATED)
  // The emulated device's conv2d is im2col around the float32 SGEMM, which widens a 16-bit
  // operand whole before it starts (kernels/cuda/ops_conv.cu); on a GPU cuDNN takes bf16
  // as it is. Until the im2col path converts per chunk, the saving is a GPU's and the CPU's.
  if (default_device().is_cuda()) GTEST_SKIP() << "bf16 memory saving: not on the emulated device's im2col conv";
#endif
  EXPECT_LT(static_cast<double>(b16.peak), 0.7 * static_cast<double>(f32.peak));
}

TEST(Autocast, ScopesNestAndOnlyTheBigOpsConvert) {
  Tensor a = randn({4, 8}), b = randn({8, 3});
  {
    AutocastScope s(kBFloat16);
    EXPECT_DTYPE(matmul(a, b), kBFloat16);
    EXPECT_DTYPE(relu(a), kFloat32);  // follows its input
    {
      AutocastScope inner(kFloat16);
      EXPECT_DTYPE(matmul(a, b), kFloat16);
    }
    EXPECT_DTYPE(matmul(a, b), kBFloat16);
  }
  EXPECT_DTYPE(matmul(a, b), kFloat32);
  EXPECT_EMBER_ERROR(AutocastScope(kFloat64), "AutocastScope");
}

}  // namespace
}  // namespace ember::test
