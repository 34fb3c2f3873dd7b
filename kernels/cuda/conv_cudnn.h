// conv2d and its backwards through cuDNN's convolution API (GPU builds with cuDNN only,
// EMBER_WITH_CUDNN): the algorithm is chosen once per shape, dtype and mode from cuDNN's
// heuristics and cached; workspaces come from the device's caching allocator. The
// tensors are the op table's (core/dispatch.h): float32, float64, bf16 and f16 (the
// 16-bit ones accumulate in float32), on the current stream of their device.
#pragma once

#include "core/dispatch.h"

namespace ember::kernels::cuda {

// out = the convolution alone; the caller adds the bias and applies the ReLU.
void cudnn_conv2d(const Tensor& out, const Tensor& in, const Tensor& weight, const Conv2dParams& p);
void cudnn_conv2d_backward_input(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p);
// The weight's gradient only; the caller sums the bias's (cuDNN's BackwardBias has no bf16).
void cudnn_conv2d_backward_weight(const Tensor& gw, const Tensor& gout, const Tensor& in, const Conv2dParams& p);

}  // namespace ember::kernels::cuda
