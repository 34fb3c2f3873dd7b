// Convolution and pooling layers (NCHW): Conv2d, ConvTranspose2d, MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d. Each mirrors its PyTorch namesake: parameter names, shapes
// (ConvTranspose2d's weight is [in, out / groups, kh, kw]) and default initialisation
// (Kaiming-uniform with a = sqrt(5), and the same bound 1/sqrt(fan_in) for biases).
// ConvTranspose2d's options are a designated-initializer struct:
//   nn::ConvTranspose2d up(512, 256, {4, 4}, {.stride = {2, 2}, .padding = {1, 1}, .bias = false});
#pragma once

#include <string>
#include <utility>

#include "core/ops.h"
#include "layers/functional.h"
#include "layers/module.h"

namespace ember::nn {

using Pair = std::pair<int64_t, int64_t>;

class Conv2d : public Callable<Conv2d> {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, Pair stride = {1, 1}, Pair padding = {0, 0},
         Pair dilation = {1, 1}, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) { return forward(x, Activation::kNone); }
  // With an activation fused into the op (what Sequential does for Conv2d, ReLU).
  Tensor forward(const Tensor& x, Activation act);
  std::string name() const override;
  Tensor& weight;  // [out, in / groups, kh, kw]
  Tensor& bias;    // [out], or undefined (Note [One place per parameter] in layers/module.h)

 private:
  int64_t in_, out_, groups_;
  Pair kernel_, stride_, padding_, dilation_;
};

struct ConvTranspose2dOptions {
  Pair stride{1, 1};
  Pair padding{0, 0};
  Pair output_padding{0, 0};
  int64_t groups = 1;
  bool bias = true;
  Pair dilation{1, 1};
};

class ConvTranspose2d : public Callable<ConvTranspose2d> {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Pair kernel_size,
                  ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x);
  std::string name() const override;
  Tensor& weight;  // [in, out / groups, kh, kw]
  Tensor& bias;    // [out], or undefined

 private:
  int64_t in_, out_;
  Pair kernel_;
  ConvTranspose2dOptions options_;
};

class MaxPool2d : public Callable<MaxPool2d> {
 public:
  explicit MaxPool2d(Pool2dOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& x) { return max_pool2d(x, options_); }
  // relu(pool(x)): what Sequential runs for ReLU, MaxPool2d.
  Tensor forward(const Tensor& x, Activation act) { return max_pool2d(x, options_, act); }
  std::string name() const override;

 private:
  Pool2dOptions options_;
};

class AvgPool2d : public Callable<AvgPool2d> {
 public:
  explicit AvgPool2d(Pool2dOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& x) { return avg_pool2d(x, options_); }
  std::string name() const override;

 private:
  Pool2dOptions options_;
};

class AdaptiveAvgPool2d : public Callable<AdaptiveAvgPool2d> {
 public:
  explicit AdaptiveAvgPool2d(Pair output_size) : size_(output_size) {}
  Tensor forward(const Tensor& x) { return functional::adaptive_avg_pool2d(x, size_); }
  std::string name() const override;

 private:
  Pair size_;
};

}  // namespace ember::nn
