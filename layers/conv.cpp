#include "layers/conv.h"

#include <cmath>

#include "base/error.h"
#include "layers/init.h"

namespace ember::nn {
namespace {

std::string pair_str(Pair p) { return detail::str("(", p.first, ", ", p.second, ")"); }
std::string pool_str(const char* kind, const Pool2dOptions& o) {
  return std::string(kind) + "(kernel_size=" + pair_str(o.kernel_size) + ", stride=" +
         pair_str(o.stride.value_or(o.kernel_size)) + ", padding=" + pair_str(o.padding) + ")";
}

// The weight, checked before it is allocated (the members bind to it first).
Tensor conv_weight(int64_t in, int64_t out, Pair k, int64_t groups) {
  EMBER_CHECK(in > 0 && out > 0 && groups > 0 && in % groups == 0 && out % groups == 0, "Conv2d: channels in=", in,
              " out=", out, " must be positive and divisible by groups=", groups);
  EMBER_CHECK(k.first > 0 && k.second > 0, "Conv2d: kernel_size must be positive, got ", pair_str(k));
  return empty({out, in / groups, k.first, k.second});
}

// The weight, checked before it is allocated (the members bind to it first).
Tensor transposed_weight(int64_t in, int64_t out, Pair k, const ConvTranspose2dOptions& o) {
  EMBER_CHECK(in > 0 && out > 0 && o.groups > 0 && in % o.groups == 0 && out % o.groups == 0,
              "ConvTranspose2d: channels in=", in, " out=", out, " must be positive and divisible by groups=",
              o.groups);
  EMBER_CHECK(k.first > 0 && k.second > 0, "ConvTranspose2d: kernel_size must be positive, got ", pair_str(k));
  return empty({in, out / o.groups, k.first, k.second});
}

}  // namespace

Conv2d::Conv2d(int64_t in, int64_t out, Pair k, Pair stride, Pair padding, Pair dilation, int64_t groups, bool with_bias)
    : weight(register_parameter("weight", conv_weight(in, out, k, groups))),
      bias(register_parameter("bias", with_bias ? empty({out}) : Tensor())),
      in_(in),
      out_(out),
      groups_(groups),
      kernel_(k),
      stride_(stride),
      padding_(padding),
      dilation_(dilation) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (with_bias) {
    const double b = 1.0 / std::sqrt(static_cast<double>(init::calculate_fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -b, b);
  }
}
Tensor Conv2d::forward(const Tensor& x, Activation act) {
  return conv2d(x, weight, bias, stride_, padding_, dilation_, groups_, act);
}
std::string Conv2d::name() const {
  return "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + pair_str(kernel_) +
         ", stride=" + pair_str(stride_) + ", padding=" + pair_str(padding_) + ")";
}

// PyTorch's reset_parameters: kaiming_uniform(a = sqrt(5)) and a bias bound of
// 1 / sqrt(fan_in), fan_in computed from the weight as stored ([in, out / groups, k]:
// size(1) times the kernel, so out / groups * kh * kw).
ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, Pair k, ConvTranspose2dOptions o)
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

std::string MaxPool2d::name() const { return pool_str("MaxPool2d", options_); }
std::string AvgPool2d::name() const { return pool_str("AvgPool2d", options_); }
std::string AdaptiveAvgPool2d::name() const { return "AdaptiveAvgPool2d(output_size=" + pair_str(size_) + ")"; }

}  // namespace ember::nn
