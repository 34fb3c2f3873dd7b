// Source coordinates of 2-D resampling (nearest and bilinear), PyTorch's rules
// (aten/src/ATen/native/UpSample.h), written once for the CPU loops and the CUDA kernels.
// `scale` is the per-dim factor core computes (Upsample2dParams in core/dispatch.h): the
// inverse of the user's scale_factor, in / out from sizes, or (in - 1) / (out - 1) with
// align_corners.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace ember::kernels::ops {

// Nearest: floor(d * scale) in float, as PyTorch computes it (a double product could
// round across an integer where float's does not), clamped to the last input index.
EMBER_HD inline int64_t nearest_source(int64_t d, int64_t in, float scale) {
  const float s = static_cast<float>(d) * scale;
  const int64_t i = static_cast<int64_t>(s);  // s >= 0: truncation is floor
  return i < in - 1 ? i : in - 1;
}

// The two inputs output index d reads in bilinear mode and their weights (i1 == i0 at the
// last input), in the compute type C.
template <class C>
struct LinearTap {
  int64_t i0, i1;
  C w0, w1;
};

template <class C>
EMBER_HD LinearTap<C> linear_source(int64_t d, int64_t in, C scale, bool align_corners) {
  C real = align_corners ? scale * C(d) : scale * (C(d) + C(0.5)) - C(0.5);
  if (real < C(0)) real = C(0);
  const int64_t i0 = static_cast<int64_t>(real);
  const int64_t step = i0 < in - 1 ? 1 : 0;
  const C l1 = real - C(i0);
  return {i0, i0 + step, C(1) - l1, l1};
}

}  // namespace ember::kernels::ops
