// Image layers: ConvTranspose2d, Dropout2d, PixelShuffle, PixelUnshuffle and Upsample.
// Each mirrors its PyTorch namesake: parameter names and shapes (ConvTranspose2d's weight
// is [in, out / groups, kh, kw]), defaults and initialisation; options are designated-
// initializer structs:
//   nn::ConvTranspose2d up(512, 256, {4, 4}, {.stride = {2, 2}, .padding = {1, 1}, .bias = false});
//   nn::Upsample grow({.scale_factor = std::pair{2.0, 2.0}, .mode = InterpolateMode::kBilinear});
#pragma once

#include <string>
#include <utility>

#include "core/ops.h"
#include "layers/module.h"

namespace ember::nn {

struct ConvTranspose2dOptions {
  std::pair<int64_t, int64_t> stride{1, 1};
  std::pair<int64_t, int64_t> padding{0, 0};
  std::pair<int64_t, int64_t> output_padding{0, 0};
  int64_t groups = 1;
  bool bias = true;
  std::pair<int64_t, int64_t> dilation{1, 1};
};

class ConvTranspose2d : public Callable<ConvTranspose2d> {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::pair<int64_t, int64_t> kernel_size,
                  ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x);
  std::string name() const override;
  Tensor& weight;  // [in, out / groups, kh, kw]
  Tensor& bias;    // [out], or undefined

 private:
  int64_t in_, out_;
  std::pair<int64_t, int64_t> kernel_;
  ConvTranspose2dOptions options_;
};

// Zeroes whole channels of [N, C, H, W] (or [N, C, L]) in training mode, as F.dropout2d.
class Dropout2d : public Callable<Dropout2d> {
 public:
  explicit Dropout2d(double p = 0.5);
  Tensor forward(const Tensor& x) { return dropout2d(x, p_, is_training()); }
  std::string name() const override;

 private:
  double p_;
};

class PixelShuffle : public Callable<PixelShuffle> {
 public:
  explicit PixelShuffle(int64_t upscale_factor);
  Tensor forward(const Tensor& x) { return pixel_shuffle(x, r_); }
  std::string name() const override;

 private:
  int64_t r_;
};

class PixelUnshuffle : public Callable<PixelUnshuffle> {
 public:
  explicit PixelUnshuffle(int64_t downscale_factor);
  Tensor forward(const Tensor& x) { return pixel_unshuffle(x, r_); }
  std::string name() const override;

 private:
  int64_t r_;
};

// nn.Upsample: interpolate with fixed options (exactly one of size and scale_factor).
class Upsample : public Callable<Upsample> {
 public:
  explicit Upsample(InterpolateOptions options);
  Tensor forward(const Tensor& x) { return interpolate(x, options_); }
  std::string name() const override;

 private:
  InterpolateOptions options_;
};

}  // namespace ember::nn
