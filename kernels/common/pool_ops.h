// The rules of 2-D pooling, written once for the CPU loops (kernels/cpu/pool.cpp) and the
// CUDA kernels (kernels/cuda/pool.cuh): which tap wins a max window, and an average
// window's clipped extent and divisor. PyTorch's semantics.
#pragma once

#include <cstdint>

#include "core/macros.h"

namespace ember::kernels::ops {

// Max pooling: whether tap value v replaces the running maximum `best`. The first maximum
// in the window's row-major order wins, and a NaN beats everything but an earlier NaN.
template <class C>
EMBER_HD inline bool pool_replaces(C v, C best) {
  return v > best || (v != v && best == best);
}

// The window [h0, h1) x [w0, w1) of average-pool output (oh, ow), clipped to the input,
// and its divisor: divisor_override when nonzero, else the window's size clipped to the
// padded input (count_include_pad) or to the input itself.
struct AvgPoolWindow {
  int64_t h0, h1, w0, w1, divisor;
};
EMBER_HD inline AvgPoolWindow avg_pool_window(int64_t oh, int64_t ow, int64_t H, int64_t W, int64_t kh, int64_t kw,
                                              int64_t sh, int64_t sw, int64_t ph, int64_t pw, bool count_include_pad,
                                              int64_t divisor_override) {
  int64_t h0 = oh * sh - ph, w0 = ow * sw - pw;
  int64_t h1 = h0 + kh < H + ph ? h0 + kh : H + ph, w1 = w0 + kw < W + pw ? w0 + kw : W + pw;
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = h0 > 0 ? h0 : 0;
  w0 = w0 > 0 ? w0 : 0;
  h1 = h1 < H ? h1 : H;
  w1 = w1 < W ? w1 : W;
  const int64_t div = divisor_override ? divisor_override : count_include_pad ? padded : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, div};
}

}  // namespace ember::kernels::ops
