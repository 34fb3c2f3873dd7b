// Scratch memory that backend kernels take from their device's caching allocator beyond
// the op's outputs, sized from the op's arguments alone. Ops on the meta device allocate
// it and free it again around the skipped kernel call (core/meta.h), so that a memory
// estimate sees what the target device's allocator will. Only kernels whose scratch
// matters beside the activations are here: conv2d's three passes (the CPU's Winograd
// transforms; CUDA's im2col columns and, for 16-bit tensors, float32 staging per chunk and
// the weight's float32 copy). Defined by the backends (kernels/cpu/conv.cpp;
// kernels/cuda/ops_conv.cu, or kernels/cuda/no_cuda.cpp without CUDA).
#pragma once

#include <cstddef>
#include <vector>

#include "core/dispatch.h"

namespace ember::kernels {

enum class ConvPass { kForward, kBackwardInput, kBackwardWeight };

// The blocks (bytes each, in allocation order, live together) the pass's kernel takes for
// a convolution of in [N, C, H, W] by weight [O, C / groups, kh, kw] into out [N, O, OH,
// OW], tensors of `dtype`; `bias`: the forward's bias, or the backward's bias gradient, is
// computed. Empty when the kernel takes none from the allocator.
std::vector<std::size_t> cpu_conv2d_scratch(ConvPass pass, const Shape& in, const Shape& weight, const Shape& out,
                                            DType dtype, bool bias, const Conv2dParams& p);
std::vector<std::size_t> cuda_conv2d_scratch(ConvPass pass, const Shape& in, const Shape& weight, const Shape& out,
                                             DType dtype, bool bias, const Conv2dParams& p);

}  // namespace ember::kernels
