// 3x3 stride-1 convolutions by Winograd's minimal filtering F(4x4, 3x3) (Lavin & Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2016): each 4x4 output tile costs
// 36 multiplies per (input, output) channel pair instead of 144, so the GEMMs that
// remain do a quarter of im2col's work (a third on sizes not divisible by 4, whose edge
// tiles are partly wasted). The transforms add O(tiles x channels) adds, cheap beside the
// GEMMs once a layer has a few dozen channels. Note [Conv choice] in conv.cpp says
// when the backend takes this path.
//
// Forward, the gradient of the input (a convolution of the output's gradient with the
// flipped, transposed filters and padding 2 - p) and the gradient of the weight
// (G^T [sum over tiles of (A dY A^T) . (B^T d B)] G) all run here. Accuracy: the
// transforms' constants (1/4, 1/6, 1/24, up to 8) cost about one more decimal digit than
// a direct sum in float32; tests/kernels/test_conv_variants.cpp states the bound it checks.
#pragma once

#include <vector>

#include "core/dispatch.h"
#include "core/kernel_scratch.h"

namespace ember::kernels::cpu {

// 3x3 kernel, stride 1, dilation 1, padding at most 2 on each side.
bool winograd_supported(const Conv2dParams& p, int64_t kh, int64_t kw);

// The same contracts as the conv2d stubs (core/dispatch.h), float32 or float64.
void winograd_conv2d(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias,
                     const Conv2dParams& p);
void winograd_conv2d_backward_input(const Tensor& grad_input, const Tensor& grad_output, const Tensor& weight,
                                    const Conv2dParams& p);
void winograd_conv2d_backward_weight(const Tensor& grad_weight, const Tensor& grad_bias, const Tensor& grad_output,
                                     const Tensor& input, const Conv2dParams& p);

// The host allocator's blocks a pass takes (core/kernel_scratch.h): the transformed
// filters (or the weight gradient's partial sums), then each concurrent task's
// transformed tiles and packed planes. in, weight, out as the forward sees them.
std::vector<std::size_t> winograd_scratch(ConvPass pass, const Shape& in, const Shape& weight, const Shape& out,
                                          DType dtype, const Conv2dParams& p);

}  // namespace ember::kernels::cpu
