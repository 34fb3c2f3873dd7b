// conv2d on the CPU, with its variants reachable by name from tests and benchmarks:
// im2col + GEMM, and Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions
// (kernels/cpu/winograd.h). Auto picks per call (Note [Conv choice] in conv.cpp); a forced Winograd still uses im2col
// where Winograd cannot compute the convolution.
#pragma once

#include <string_view>

namespace ember::kernels::cpu {

// EMBER_CONV (auto, im2col, winograd) sets the starting choice.
enum class ConvVariant { Auto, Im2col, Winograd };
void set_conv_variant(ConvVariant v);
ConvVariant conv_variant();
// "auto", "im2col", "winograd"; throws ember::Error otherwise.
ConvVariant parse_conv_variant(std::string_view name);

}  // namespace ember::kernels::cpu
