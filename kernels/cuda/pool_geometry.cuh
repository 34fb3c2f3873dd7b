// The geometry of 2-D pooling over NCHW tensors, shared by the pooling kernels (pool.cuh,
// pool_windows.cuh): PoolGeometry and its output size (PyTorch's), the predicates that
// choose a family of kernels (pool_fits_int32, pool_windows_tile, PoolKernelChoice), and
// the kernels' index helpers in their index type I (pool_detail: Dims, split_index,
// the taps inside the input, the outputs covering a pixel, a tiling window's place).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

struct PoolGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input [N, C, H, W]
  int64_t OH = 0, OW = 0;              // output [N, C, OH, OW] (pool_geometry computes them)
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool count_include_pad = true;  // average pooling only
  int64_t divisor_override = 0;   // average pooling only; 0: none
};

// PyTorch's output size: floor((in + 2p - d(k - 1) - 1 + (ceil ? s - 1 : 0)) / s) + 1,
// where with ceil_mode the last window must start inside the input or its left padding.
inline int64_t pool_output_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (span >= 0 ? span / s : -((-span + s - 1) / s)) + 1;
  if (ceil_mode && out > 0 && (out - 1) * s >= in + p) --out;
  return out;
}

inline PoolGeometry pool_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh,
                                  int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, bool ceil_mode) {
  PoolGeometry g;
  g.N = N, g.C = C, g.H = H, g.W = W, g.kh = kh, g.kw = kw, g.sh = sh, g.sw = sw, g.ph = ph, g.pw = pw, g.dh = dh,
  g.dw = dw;
  g.OH = pool_output_size(H, kh, sh, ph, dh, ceil_mode);
  g.OW = pool_output_size(W, kw, sw, pw, dw, ceil_mode);
  return g;
}

// Whether every index the kernels compute for g fits in int32: the input's and the
// output's element counts, and along each dim the padded size plus a window's span plus
// the outputs' reach (bounds on every intermediate value).
inline bool pool_fits_int32(const PoolGeometry& g) {
  constexpr int64_t kMax = INT32_MAX;
  return g.N * g.C * g.H * g.W <= kMax && g.N * g.C * g.OH * g.OW <= kMax &&
         g.H + 2 * g.ph + g.kh * g.dh + g.OH * g.sh <= kMax && g.W + 2 * g.pw + g.kw * g.dw + g.OW * g.sw <= kMax;
}

// Whether g's windows tile the input without overlap (each input pixel in at most one
// window, every window at least one pixel): the windows kernels' geometry.
inline bool pool_windows_tile(const PoolGeometry& g) {
  return g.kh == g.sh && g.kw == g.sw && g.ph == 0 && g.pw == 0 && g.dh == 1 && g.dw == 1 && g.OH > 0 && g.OW > 0 &&
         (g.OH - 1) * g.kh < g.H && (g.OW - 1) * g.kw < g.W;
}

// Which kernels a launcher may choose (Note [Pool kernels] in pool_windows.cuh). Tests
// forbid a choice to check the other kernels on small tensors.
struct PoolKernelChoice {
  bool windows = true;  // the windows kernels where pool_windows_tile(g)
  bool int32 = true;    // int32 index arithmetic where pool_fits_int32(g)
  bool pairs = true;    // the 2x2 pairs kernels where pool_pairs(...) (Note [Pool pairs] in pool_windows.cuh)
};

namespace pool_detail {

enum class MaxIndex { kNone, kCode, kPlane };

// The geometry in the kernels' index type I.
template <class I>
struct Dims {
  I H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
  bool count_include_pad;
  int64_t divisor_override;
};
template <class I>
Dims<I> dims(const PoolGeometry& g) {
  return {I(g.H),  I(g.W),  I(g.OH), I(g.OW), I(g.kh), I(g.kw), I(g.sh),
          I(g.sw), I(g.ph), I(g.pw), I(g.dh), I(g.dw), g.count_include_pad, g.divisor_override};
}

template <class I>
__device__ __forceinline__ I min_of(I a, I b) {
  return a < b ? a : b;
}

// Flat index i of a [planes, rows, cols] array as (plane, row, col): two divisions.
template <class I>
__device__ __forceinline__ void split_index(I i, I rows, I cols, I& plane, I& row, I& col) {
  const I r = i / cols;  // plane * rows + row
  col = i - r * cols;
  plane = r / rows;
  row = r - plane * rows;
}

template <class I>
__device__ __forceinline__ I ceil_div_nonneg(I a, I b) {
  return a <= 0 ? I(0) : (a + b - 1) / b;
}

// The taps [lo, hi) of a window starting at `start` (k taps, d apart) that land in [0, size).
template <class I>
__device__ __forceinline__ void taps_inside(I start, I k, I d, I size, I& lo, I& hi) {
  lo = start >= 0 ? I(0) : (-start + d - 1) / d;
  const I n = start < size ? (size - start + d - 1) / d : I(0);
  hi = n < k ? n : k;
}

// The outputs [lo, hi] along one dim whose windows (k taps, d apart, stride s, padding p)
// can contain input position x; empty when lo > hi.
template <class I>
__device__ __forceinline__ void covering_outputs(I x, I k, I s, I p, I d, I out, I& lo, I& hi) {
  lo = ceil_div_nonneg(x + p - (k - 1) * d, s);
  hi = (x + p) / s;
  if (hi > out - 1) hi = out - 1;
}

// Output o's window among windows that tile the input (pool_windows_tile): its plane and
// output row and column (two divisions), its first input row and column, and the offset
// of its first pixel in the input.
template <class I>
struct Window {
  I pl, oh, ow, h0, w0, offset;
};
template <class I>
__device__ __forceinline__ Window<I> window_of(I o, const Dims<I>& g) {
  Window<I> w;
  split_index(o, g.OH, g.OW, w.pl, w.oh, w.ow);
  w.h0 = w.oh * g.kh, w.w0 = w.ow * g.kw;
  w.offset = (w.pl * g.H + w.h0) * g.W + w.w0;
  return w;
}

}  // namespace pool_detail

}  // namespace ember::kernels::cuda
