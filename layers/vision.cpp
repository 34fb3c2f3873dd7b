#include "layers/vision.h"

#include <cmath>

#include "base/error.h"
#include "layers/init.h"

namespace ember::nn {
namespace {

std::string pair_str(std::pair<int64_t, int64_t> p) { return detail::str("(", p.first, ", ", p.second, ")"); }

// The weight, checked before it is allocated (the members bind to it first).
Tensor transposed_weight(int64_t in, int64_t out, std::pair<int64_t, int64_t> k, const ConvTranspose2dOptions& o) {
  EMBER_CHECK(in > 0 && out > 0 && o.groups > 0 && in % o.groups == 0 && out % o.groups == 0,
              "ConvTranspose2d: channels in=", in, " out=", out, " must be positive and divisible by groups=",
              o.groups);
  EMBER_CHECK(k.first > 0 && k.second > 0, "ConvTranspose2d: kernel_size must be positive, got ", pair_str(k));
  return empty({in, out / o.groups, k.first, k.second});
}

}  // namespace

// PyTorch's reset_parameters: kaiming_uniform(a = sqrt(5)) and a bias bound of
// 1 / sqrt(fan_in), fan_in computed from the weight as stored ([in, out / groups, k]:
// size(1) times the kernel, so out / groups * kh * kw).
ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, std::pair<int64_t, int64_t> k, ConvTranspose2dOptions o)
    : weight(register_parameter("weight", transposed_weight(in, out, k, o))),
      bias(register_parameter("bias", o.bias ? empty({out}) : Tensor())),
      in_(in),
      out_(out),
      kernel_(k),
      options_(o) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (o.bias) {
    const double b = 1.0 / std::sqrt(static_cast<double>(init::calculate_fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -b, b);
  }
}
Tensor ConvTranspose2d::forward(const Tensor& x) {
  const ConvTranspose2dOptions& o = options_;
  return conv_transpose2d(x, weight, bias, o.stride, o.padding, o.output_padding, o.groups, o.dilation);
}
std::string ConvTranspose2d::name() const {
  return "ConvTranspose2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" +
         pair_str(kernel_) + ", stride=" + pair_str(options_.stride) + ", padding=" + pair_str(options_.padding) + ")";
}

Dropout2d::Dropout2d(double p) : p_(p) {
  EMBER_CHECK(p >= 0 && p <= 1, "Dropout2d: p must be in [0, 1], got ", p);
}
std::string Dropout2d::name() const { return detail::str("Dropout2d(p=", p_, ")"); }

PixelShuffle::PixelShuffle(int64_t r) : r_(r) {
  EMBER_CHECK(r > 0, "PixelShuffle: upscale_factor must be positive, got ", r);
}
std::string PixelShuffle::name() const { return detail::str("PixelShuffle(upscale_factor=", r_, ")"); }

PixelUnshuffle::PixelUnshuffle(int64_t r) : r_(r) {
  EMBER_CHECK(r > 0, "PixelUnshuffle: downscale_factor must be positive, got ", r);
}
std::string PixelUnshuffle::name() const { return detail::str("PixelUnshuffle(downscale_factor=", r_, ")"); }

Upsample::Upsample(InterpolateOptions o) : options_(o) {
  EMBER_CHECK(o.size.has_value() != o.scale_factor.has_value(), "Upsample: give exactly one of size and scale_factor");
}
std::string Upsample::name() const {
  const char* mode = options_.mode == InterpolateMode::kBilinear ? "bilinear" : "nearest";
  if (options_.size) return detail::str("Upsample(size=", pair_str(*options_.size), ", mode='", mode, "')");
  return detail::str("Upsample(scale_factor=(", options_.scale_factor->first, ", ", options_.scale_factor->second,
                     "), mode='", mode, "')");
}

}  // namespace ember::nn
