// PyTorch's vision layers: PixelShuffle, PixelUnshuffle and Upsample, with PyTorch's
// names and defaults; Upsample's options are a designated-initializer struct:
//   nn::Upsample grow({.scale_factor = std::pair{2.0, 2.0}, .mode = InterpolateMode::kBilinear});
// (ConvTranspose2d is with the convolutions in layers/conv.h, Dropout2d with the dropouts
// in layers/activation.h.)
#pragma once

#include <string>
#include <utility>

#include "core/ops.h"
#include "layers/module.h"

namespace ember::nn {

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
