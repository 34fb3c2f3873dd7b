// The image layers (ConvTranspose2d in layers/conv.h, Dropout2d in layers/activation.h, the
// layers of layers/vision.h, GroupNorm and InstanceNorm2d): PyTorch's parameter
// names, shapes, defaults and initialisation bounds, their forwards equal to the
// functional ops, modes (Dropout2d, InstanceNorm2d's running statistics), bad options.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/core/reference.h"
#include "tests/device.h"

namespace ember::test {
namespace {

std::vector<std::string> names(const NamedTensors& ts) {
  std::vector<std::string> n;
  for (const auto& [name, t] : ts) n.push_back(name);
  return n;
}

double max_abs(const Tensor& t) { return values(abs(t).amax()).at(0); }

TEST(VisionLayers, ConvTranspose2dParametersAndInit) {
  nn::ConvTranspose2d up(16, 12, {4, 3}, {.stride = {2, 2}, .padding = {1, 1}, .groups = 2});
  EXPECT_EQ(names(up.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(up.weight.shape(), (Shape{16, 6, 4, 3}));
  EXPECT_EQ(up.bias.shape(), (Shape{12}));
  // PyTorch's fan_in of a transposed weight is size(1) * kh * kw = 6 * 12 = 72: kaiming
  // uniform with a = sqrt(5) bounds the weight by 1 / sqrt(72), as it does the bias.
  const double bound = 1 / std::sqrt(72.0);
  EXPECT_LE(max_abs(up.weight), bound);
  EXPECT_GT(max_abs(up.weight), 0.9 * bound);
  EXPECT_LE(max_abs(up.bias), bound);
  const Tensor x = random_tensor({2, 16, 3, 5}, kFloat32, Layout::Contiguous, 3);
  const Tensor y = up(x);
  EXPECT_EQ(y.shape(), (Shape{2, 12, 6, 9}));
  EXPECT_TRUE(all_close(y, conv_transpose2d(x, up.weight, up.bias, {2, 2}, {1, 1}, {0, 0}, 2), 0, 0));
  nn::ConvTranspose2d plain(3, 5, {3, 3}, {.bias = false});
  EXPECT_FALSE(plain.bias.defined());
  EXPECT_EQ(names(plain.named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_EMBER_ERROR(nn::ConvTranspose2d(3, 5, {3, 3}, {.groups = 2}), "ConvTranspose2d", "groups=2");
}

TEST(VisionLayers, Dropout2dFollowsTheMode) {
  nn::Dropout2d drop(0.5);
  const Tensor x = ones({4, 8, 3, 3});
  drop.eval();
  EXPECT_TRUE(all_close(drop(x), x, 0, 0));
  drop.train();
  const std::vector<double> y = values(drop(x));
  for (int64_t pl = 0; pl < 32; ++pl)
    for (int64_t j = 1; j < 9; ++j) EXPECT_EQ(y[pl * 9 + j], y[pl * 9]);
  EXPECT_EMBER_ERROR(nn::Dropout2d(-0.1), "Dropout2d", "-0.1");
}

TEST(VisionLayers, PixelShuffleUpsample) {
  const Tensor x = random_tensor({1, 8, 3, 2}, kFloat32, Layout::Contiguous, 4);
  nn::PixelShuffle shuffle(2);
  nn::PixelUnshuffle unshuffle(2);
  EXPECT_TRUE(all_close(unshuffle(shuffle(x)), x, 0, 0));
  nn::Upsample up({.scale_factor = std::pair{2.0, 2.0}, .mode = InterpolateMode::kBilinear});
  EXPECT_EQ(up(x).shape(), (Shape{1, 8, 6, 4}));
  EXPECT_EQ(up.name(), "Upsample(scale_factor=(2, 2), mode='bilinear')");
  EXPECT_EMBER_ERROR(nn::Upsample({}), "Upsample", "exactly one");
  EXPECT_EMBER_ERROR(nn::PixelShuffle(0), "PixelShuffle");
}

TEST(VisionLayers, GroupNorm) {
  nn::GroupNorm gn(4, 12);
  EXPECT_EQ(names(gn.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(all_close(gn.weight, ones({12}), 0, 0));
  EXPECT_TRUE(all_close(gn.bias, zeros({12}), 0, 0));
  const Tensor x = random_tensor({2, 12, 5, 3}, kFloat32, Layout::Contiguous, 5);
  EXPECT_TRUE(all_close(gn(x), group_norm(x, 4, gn.weight, gn.bias), 0, 0));
  EXPECT_FALSE(nn::GroupNorm(2, 4, 1e-5, false).weight.defined());
  EXPECT_EMBER_ERROR(nn::GroupNorm(5, 12), "GroupNorm", "num_groups 5");
}

TEST(VisionLayers, InstanceNorm2dDefaultsAndRunningStats) {
  nn::InstanceNorm2d plain(3);
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_TRUE(plain.named_buffers().empty());
  const Tensor x = random_tensor({2, 3, 4, 5}, kFloat64, Layout::Contiguous, 6);
  EXPECT_TRUE(all_close(plain(x), group_norm(x, 3), 0, 0));
  plain.eval();  // no running statistics: still the input's
  EXPECT_TRUE(all_close(plain(x), group_norm(x, 3), 0, 0));
  EXPECT_TRUE(all_close(plain(x.select(0, 0)), group_norm(x, 3).select(0, 0), 1e-14, 1e-14));  // unbatched [C, H, W]

  nn::InstanceNorm2d tracked(3, {.momentum = 0.2, .affine = true, .track_running_stats = true});
  EXPECT_EQ(names(tracked.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(names(tracked.named_buffers()),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  const Tensor x64 = x.to(kFloat32);
  tracked(x64);
  const Tensor m = mean(mean(x64.reshape({2, 3, 20}), {2}), {0});
  EXPECT_TRUE(all_close(tracked.running_mean, mul(m, Scalar(0.2)), 1e-6, 1e-7));
  tracked.eval();
  const Tensor rm = tracked.running_mean.view({1, 3, 1, 1}), rv = tracked.running_var.view({1, 3, 1, 1});
  EXPECT_TRUE(all_close(tracked(x64), div(sub(x64, rm), sqrt(add(rv, Scalar(1e-5)))), 1e-5, 1e-6));
  EXPECT_EMBER_ERROR(tracked(zeros({2, 4, 3, 3})), "InstanceNorm2d", "3 channels");
}

}  // namespace
}  // namespace ember::test
