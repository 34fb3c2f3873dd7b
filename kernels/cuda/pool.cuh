// 2-D max and average pooling of NCHW tensors, forward and backward, with the CPU
// backend's semantics (kernels/cpu/pool.cpp, PyTorch's): padding, dilation (max),
// ceil_mode (through the output size), count_include_pad and divisor_override (average),
// NaN handling and tie-breaking from kernels/common/pool_ops.h.
//
// Two families of kernels (Note [Pool kernels]): the general ones take any geometry; the
// windows ones (max pooling) take windows that tile the input without overlap, the CNNs'
// 2x2 / stride 2. The general backwards are gathers: one thread per input pixel visits
// the windows that contain it, in output order (the CPU backend's order of additions, so
// float results match it bit for bit), and writes the pixel once. The windows backward
// has one thread per output write its window. No atomics, no zeroing pass, and every
// kernel gives the bits of the general one.
//
// Max-pool indices come in the two forms of Note [Max-pool indices] (kernels/cpu/pool.cpp):
// int64 h * W + w within the input plane (PyTorch's), or a uint8 code i * kw + j of the
// winning tap in its window. The backward counts a gradient for the pixel its index
// names when that pixel lies in the output's window; an index naming a pixel outside
// its window (never written by the forward) is ignored, never followed.
//
// Note [Pool kernels]. Pooling moves few bytes per element, so a kernel meets the memory
// floor only if its index arithmetic is cheap. The first kernels split every flat index
// with 64-bit division and modulo, a long emulated sequence on a GPU: on an H200 the
// CNN's first pool (float32 [128, 32, 28, 28], 2x2 / 2, uint8 codes) took 14.6 us forward
// and 50 us backward (one thread per input pixel, each finding its covering windows with
// more divisions), against a floor of about 4 us each (17 MB at ~4 TB/s). Hence:
//  - every kernel is instantiated for int32 and int64 index arithmetic (I); the launchers
//    take int32 when every index fits (pool_fits_int32), as it does but for tensors of
//    2^31 elements or more;
//  - windows that tile the input (kernel == stride, no padding, no dilation; ceil_mode
//    may clip the last ones) have their own max-pool kernels, one thread per output both
//    ways: two 32-bit divisions per output, and the backward writes each input pixel from
//    the one window that covers it (or as 0, below or right of the last windows when H or
//    W is not a multiple of the stride), kw = 2 rows as one aligned pair store.
// Measured on an H200 (ncu's gpu__time_duration, clocks left alone, float32 with uint8
// codes; the first kernels took 17.1 and 65.2 us there for the first pool, so that
// machine ran slower than the one above): [128, 32, 28, 28] 7.5 us forward, 7.9 us
// backward; [128, 64, 14, 14] 5.1 and 5.4 us (first kernels: 9.7 and 34.9). The general
// kernels with int32 arithmetic: 13.9 and 46.4 us for the first pool. Odd W (no pair
// stores) doubles the windows backward's time (13.8 us for [128, 32, 27, 29]). There,
// every kernel choice gave the first kernels' bits on those shapes (a one-off program).
// Tried on that pool: two outputs a turn in the windows forward (40 registers instead of
// 32, and no faster there); kept since for large inputs (max_pool2d_windows_kernel).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/pool_ops.h"
#include "kernels/cuda/types.cuh"
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

// Which kernels a launcher may choose (Note [Pool kernels]). Tests forbid a choice to
// check the other kernels on small tensors.
struct PoolKernelChoice {
  bool windows = true;  // the windows kernels where pool_windows_tile(g)
  bool int32 = true;    // int32 index arithmetic where pool_fits_int32(g)
  bool pairs = true;    // the 2x2 pairs kernels where pool_pairs(...) (Note [Pool pairs])
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

// The maximum of a whole 2x2 window's taps v (row-major) as the general kernel's scan
// finds it: the tap's number k = i * 2 + j, best set to its value.
template <class C>
__device__ __forceinline__ int scan_2x2(const C (&v)[4], C& best) {
  int k = 0;
  best = v[0];
  EMBER_UNROLL
  for (int t = 1; t < 4; ++t)
    if (ops::pool_replaces(v[t], best)) {
      best = v[t];
      k = t;
    }
  return k;
}

}  // namespace pool_detail

// ---------------------------------------------------------------------------------------
// General kernels: any geometry.

// Max pooling forward: one thread per output scans its window. Memory bound: sizeof(T)
// written per output (plus 8 or 1 index bytes), the input read once from DRAM (the
// overlapping windows' re-reads hit cache); kh * kw comparisons and up to six divisions
// per output.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256) max_pool2d_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                         int64_t* __restrict__ plane_idx, uint8_t* __restrict__ codes,
                                                         pool_detail::Dims<I> g, bool relu, int64_t total) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += step) {
    I pl, oh, ow;
    pool_detail::split_index(I(o), g.OH, g.OW, pl, oh, ow);
    const T* xp = x + pl * (g.H * g.W);
    const I h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    I i0, i1, j0, j1;
    pool_detail::taps_inside(h0, g.kh, g.dh, g.H, i0, i1);
    pool_detail::taps_inside(w0, g.kw, g.dw, g.W, j0, j1);
    C best = C(-INFINITY);
    I bi = i0, bj = j0;  // the output size leaves every window at least one tap
    for (I i = i0; i < i1; ++i) {
      const T* row = xp + (h0 + i * g.dh) * g.W + w0;
      for (I j = j0; j < j1; ++j) {
        const C v = widen(row[j * g.dw]);
        if ((i == i0 && j == j0) || ops::pool_replaces(v, best)) {
          best = v;
          bi = i;
          bj = j;
        }
      }
    }
    y[o] = round_to<T>(relu && best < C(0) ? C(0) : best);  // a NaN stays NaN
    if constexpr (K == pool_detail::MaxIndex::kPlane) plane_idx[o] = int64_t((h0 + bi * g.dh) * g.W + w0 + bj * g.dw);
    if constexpr (K == pool_detail::MaxIndex::kCode) codes[o] = static_cast<uint8_t>(bi * g.kw + bj);
  }
}

// Max pooling backward: gx (overwritten) = each output's gradient at its maximum. One
// thread per input pixel checks the outputs whose windows cover it. Memory bound:
// sizeof(T) written per input element, about (kh / sh) * (kw / sw) gradients and indices
// read per input element (from cache after the first); four divisions per input pixel
// and one per covering window.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256) max_pool2d_backward_kernel(const T* __restrict__ gy,
                                                                  const int64_t* __restrict__ plane_idx,
                                                                  const uint8_t* __restrict__ codes, T* __restrict__ gx,
                                                                  pool_detail::Dims<I> g, int64_t total) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += step) {
    I pl, h, w;
    pool_detail::split_index(I(i), g.H, g.W, pl, h, w);
    I oh0, oh1, ow0, ow1;
    pool_detail::covering_outputs(h, g.kh, g.sh, g.ph, g.dh, g.OH, oh0, oh1);
    pool_detail::covering_outputs(w, g.kw, g.sw, g.pw, g.dw, g.OW, ow0, ow1);
    C acc = C(0);
    for (I oh = oh0; oh <= oh1; ++oh) {
      const I di = h + g.ph - oh * g.sh;  // tap row * dh
      const I ti = di / g.dh;
      if (ti * g.dh != di) continue;
      for (I ow = ow0; ow <= ow1; ++ow) {
        const I dj = w + g.pw - ow * g.sw;
        const I tj = dj / g.dw;
        if (tj * g.dw != dj) continue;
        const I o = (pl * g.OH + oh) * g.OW + ow;
        const bool hit = K == pool_detail::MaxIndex::kCode ? I(codes[o]) == ti * g.kw + tj
                                                             : plane_idx[o] == int64_t(h * g.W + w);
        if (hit) acc += widen(gy[o]);
      }
    }
    gx[i] = round_to<T>(acc);
  }
}

// Average pooling forward: one thread per output sums its clipped window. Memory bound
// like max pooling; kh * kw additions and two divisions per output.
template <class T, class I>
__global__ void __launch_bounds__(256) avg_pool2d_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                         pool_detail::Dims<I> g, int64_t total) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += step) {
    I pl, oh, ow;
    pool_detail::split_index(I(o), g.OH, g.OW, pl, oh, ow);
    const ops::AvgPoolWindow win = ops::avg_pool_window(oh, ow, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw,
                                                        g.count_include_pad, g.divisor_override);
    const T* xp = x + pl * (g.H * g.W);
    C sum = C(0);
    for (I h = I(win.h0); h < I(win.h1); ++h)
      for (I w = I(win.w0); w < I(win.w1); ++w) sum += widen(xp[h * g.W + w]);
    y[o] = round_to<T>(win.divisor > 0 ? sum / C(win.divisor) : C(0));
  }
}

// Average pooling backward: gx (overwritten) = the sum over the windows covering each
// input pixel of their gradient / divisor. One thread per input pixel. Memory bound:
// sizeof(T) written per input element, about (kh / sh) * (kw / sw) gradients read; four
// divisions per input pixel.
template <class T, class I>
__global__ void __launch_bounds__(256) avg_pool2d_backward_kernel(const T* __restrict__ gy, T* __restrict__ gx,
                                                                  pool_detail::Dims<I> g, int64_t total) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += step) {
    I pl, h, w;
    pool_detail::split_index(I(i), g.H, g.W, pl, h, w);
    I oh0, oh1, ow0, ow1;
    pool_detail::covering_outputs(h, g.kh, g.sh, g.ph, I(1), g.OH, oh0, oh1);
    pool_detail::covering_outputs(w, g.kw, g.sw, g.pw, I(1), g.OW, ow0, ow1);
    C acc = C(0);
    for (I oh = oh0; oh <= oh1; ++oh)
      for (I ow = ow0; ow <= ow1; ++ow) {
        const ops::AvgPoolWindow win = ops::avg_pool_window(oh, ow, g.H, g.W, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw,
                                                            g.count_include_pad, g.divisor_override);
        if (win.divisor <= 0) continue;
        acc += widen(gy[(pl * g.OH + oh) * g.OW + ow]) / C(win.divisor);
      }
    gx[i] = round_to<T>(acc);
  }
}

// ---------------------------------------------------------------------------------------
// Windows kernels: max pooling over windows that tile the input (pool_windows_tile).

// Max pooling forward over tiling windows: one thread per output, two divisions per
// output, then the general kernel's scan, a whole 2x2 window's loads issued first (as a
// loop the scan waited for each load: 10.3 us for the first pool, 7.5 us so). Two outputs
// a turn (o and o + the grid), both windows' loads issued before either is scanned: 32
// bytes of loads in flight a thread, 64 KiB an SM at 2048 threads, where one output a turn
// had 32 KiB, at the edge of Little's law's ~30 KB an SM for an H200's bandwidth. (Two a
// turn was tried once on the CNN's first pool, 3136 blocks of one output a thread: no
// faster there, where the launch and the last wave dominate; the bench's 256 MiB input is
// 16 M outputs over the 1056 resident blocks.) Memory bound: each input element read once
// (kh kw sizeof(T) per output; adjacent threads' windows share sectors, which L1 serves),
// sizeof(T) plus the index (8 or 1 bytes) written per output. Float32 2x2 with codes:
// 16 + 4 + 1 = 21 bytes per output.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256, 4) max_pool2d_windows_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                                 int64_t* __restrict__ plane_idx,
                                                                 uint8_t* __restrict__ codes, pool_detail::Dims<I> g,
                                                                 bool relu, int64_t total) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o0 < total; o0 += 2 * step) {
    const T* win[2] = {x, x};
    I h0[2] = {0, 0}, w0[2] = {0, 0}, nh[2] = {0, 0}, nw[2] = {0, 0};
    C v[2][4];
    bool whole[2] = {false, false};
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t o = o0 + u * step;
      if (o >= total) break;
      const pool_detail::Window<I> wo = pool_detail::window_of(I(o), g);
      h0[u] = wo.h0, w0[u] = wo.w0;
      nh[u] = pool_detail::min_of(g.kh, g.H - h0[u]), nw[u] = pool_detail::min_of(g.kw, g.W - w0[u]);  // ceil_mode clips
      win[u] = x + wo.offset;
      // A whole 2x2 window: its four loads issued here, before any comparison. (In the loop
      // below each load waits for the comparison before it: two trips to DRAM per output.)
      whole[u] = g.kh == 2 && g.kw == 2 && nh[u] == 2 && nw[u] == 2;
      if (whole[u]) {
        v[u][0] = widen(win[u][0]), v[u][1] = widen(win[u][1]);
        v[u][2] = widen(win[u][g.W]), v[u][3] = widen(win[u][g.W + 1]);
      }
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t o = o0 + u * step;
      if (o >= total) break;
      C best = C(-INFINITY);
      I bi = 0, bj = 0;
      if (whole[u]) {
        const int k = pool_detail::scan_2x2(v[u], best);
        bi = I(k >> 1);
        bj = I(k & 1);
      } else {
        for (I i = 0; i < nh[u]; ++i)
          for (I j = 0; j < nw[u]; ++j) {
            const C e = widen(win[u][i * g.W + j]);
            if ((i == 0 && j == 0) || ops::pool_replaces(e, best)) {
              best = e;
              bi = i;
              bj = j;
            }
          }
      }
      y[o] = round_to<T>(relu && best < C(0) ? C(0) : best);  // a NaN stays NaN
      if constexpr (K == pool_detail::MaxIndex::kPlane) plane_idx[o] = int64_t((h0[u] + bi) * g.W + w0[u] + bj);
      if constexpr (K == pool_detail::MaxIndex::kCode) codes[o] = static_cast<uint8_t>(bi * g.kw + bj);
    }
  }
}

// Max pooling backward over tiling windows: gx (overwritten). One thread per output
// writes the pixels of its window (its gradient at the maximum, 0 elsewhere) and, in
// the last window of a row or column, the pixels right of or below it that no window
// covers (0). `pairs` (kw == 2, W = 2 OW, gx aligned to two elements): each window row is
// one aligned pair store, so a warp's stores are contiguous. Two outputs a turn (the
// second pool: 6.1 us with one, 5.4 with two). Memory bound: sizeof(T) written per input
// element, sizeof(T) plus the index (1 or 8 bytes) read per output. Float32 2x2 from
// codes: 16 + 4 + 1 = 21 bytes per output.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256) max_pool2d_windows_backward_kernel(const T* __restrict__ gy,
                                                                          const int64_t* __restrict__ plane_idx,
                                                                          const uint8_t* __restrict__ codes,
                                                                          T* __restrict__ gx, pool_detail::Dims<I> g,
                                                                          bool pairs, int64_t total) {
  using C = compute_t<T>;
  const T miss = round_to<T>(C(0));
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  // Two outputs a turn, both loaded before either is written: a turn waits for one DRAM
  // round trip, not two.
  for (int64_t o0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o0 < total; o0 += 2 * step) {
    T hit[2];
    I want[2];
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t o = o0 + u * step;
      if (o >= total) break;
      // The general kernel's 0 + gy (a -0 gradient lands as +0 there too).
      hit[u] = round_to<T>(C(0) + widen(gy[o]));
      // What the index names, compared with each tap of the window: its code, or its
      // plane offset (-1, matching no tap, for an index outside the plane).
      if constexpr (K == pool_detail::MaxIndex::kCode) {
        want[u] = I(codes[o]);
      } else {
        const int64_t p = plane_idx[o];
        want[u] = p >= 0 && p < int64_t(g.H) * g.W ? I(p) : I(-1);
      }
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t o = o0 + u * step;
      if (o >= total) break;
      const pool_detail::Window<I> wo = pool_detail::window_of(I(o), g);
      const I h0 = wo.h0, w0 = wo.w0;
      const I rows = (wo.oh == g.OH - 1 ? g.H : pool_detail::min_of(h0 + g.kh, g.H)) - h0;
      const I cols = (wo.ow == g.OW - 1 ? g.W : pool_detail::min_of(w0 + g.kw, g.W)) - w0;
      const auto value = [&](I i, I j) {
        const I key = K == pool_detail::MaxIndex::kCode ? i * g.kw + j : (h0 + i) * g.W + w0 + j;
        return i < g.kh && j < g.kw && key == want[u] ? hit[u] : miss;
      };
      T* out = gx + wo.offset;
      for (I i = 0; i < rows; ++i, out += g.W) {
        if (pairs) {
          Pack<T, 2> pk;
          pk.v[0] = value(i, I(0));
          pk.v[1] = value(i, I(1));
          store_vec(out, pk);
        } else {
          for (I j = 0; j < cols; ++j) out[j] = value(i, j);
        }
      }
    }
  }
}

// Note [Pool pairs]. The windows kernels above move 2x2 windows with 4-byte loads (a warp's
// 32 windows: 8 sectors of the input a load request, each used by half its bytes) and
// 1-byte codes (a warp's codes: 32 bytes, one sector a request). The pairs kernels take
// the common case whole: 2x2 windows of elements of at most 4 bytes over rows of
// W = 2 OW with OW even and no rows clipped (H >= 2 OH; rows left below the last windows
// are zeroed by the backward), every pointer aligned to its vector. A thread takes two
// adjacent outputs of an output row, whose windows are 4 adjacent pixels of two input
// rows: the forward loads each row as one vector (16 bytes in float32: a warp reads 512
// contiguous bytes of a row a load) and stores its two outputs as one vector (8 bytes) and
// its two codes as one 2-byte store (int64 indices: one 16-byte store); the backward loads
// two gradients and two codes the same way and stores rows of 4 pixels as vectors. Every
// access of a warp then covers whole sectors, contiguous. Two pairs a turn (p and p + the
// grid), both loaded before either is used: 32 bytes of input in flight a thread in the
// float32 forward, 64 KiB an SM at 2048 threads. The scan and the tie-breaking are the
// windows kernels' (scan_2x2), so are the bits.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256) max_pool2d_pairs_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                               int64_t* __restrict__ plane_idx,
                                                               uint8_t* __restrict__ codes, pool_detail::Dims<I> g,
                                                               bool relu, int64_t pairs) {
  using C = compute_t<T>;
  using Row = Pack<T, 4>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p0 < pairs; p0 += 2 * step) {
    pool_detail::Window<I> wo[2];
    Row r[2][2];
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t p = p0 + u * step;
      if (p >= pairs) break;
      wo[u] = pool_detail::window_of(I(2 * p), g);
      r[u][0] = load_vec<Row>(x + wo[u].offset);
      r[u][1] = load_vec<Row>(x + wo[u].offset + g.W);
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t p = p0 + u * step;
      if (p >= pairs) break;
      Pack<T, 2> out;
      Pack<uint8_t, 2> code;
      Pack<int64_t, 2> idx;
      EMBER_UNROLL
      for (int e = 0; e < 2; ++e) {
        const C v[4] = {widen(r[u][0].v[2 * e]), widen(r[u][0].v[2 * e + 1]), widen(r[u][1].v[2 * e]),
                        widen(r[u][1].v[2 * e + 1])};
        C best;
        const int k = pool_detail::scan_2x2(v, best);
        out.v[e] = round_to<T>(relu && best < C(0) ? C(0) : best);  // a NaN stays NaN
        code.v[e] = static_cast<uint8_t>(k);                      // i * kw + j with kw = 2
        idx.v[e] = int64_t((wo[u].h0 + I(k >> 1)) * g.W + wo[u].w0 + I(2 * e + (k & 1)));
      }
      const I o = I(2 * p);
      store_vec(y + o, out);
      if constexpr (K == pool_detail::MaxIndex::kCode) store_vec(codes + o, code);
      if constexpr (K == pool_detail::MaxIndex::kPlane) store_vec_global(plane_idx + o, idx);
    }
  }
}

// The backward of Note [Pool pairs]: gx (overwritten) from two gradients and indices a
// thread, two pairs a turn; the pixels of each window its gradient at the maximum, 0
// elsewhere, and below the last windows' row, 0.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256) max_pool2d_pairs_backward_kernel(const T* __restrict__ gy,
                                                                        const int64_t* __restrict__ plane_idx,
                                                                        const uint8_t* __restrict__ codes,
                                                                        T* __restrict__ gx, pool_detail::Dims<I> g,
                                                                        int64_t pairs) {
  using C = compute_t<T>;
  using Row = Pack<T, 4>;
  const T miss = round_to<T>(C(0));
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p0 < pairs; p0 += 2 * step) {
    Pack<T, 2> gv[2];
    I want[2][2];
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t p = p0 + u * step;
      if (p >= pairs) break;
      const I o = I(2 * p);
      gv[u] = load_vec<Pack<T, 2>>(gy + o);
      if constexpr (K == pool_detail::MaxIndex::kCode) {
        const Pack<uint8_t, 2> c = load_vec<Pack<uint8_t, 2>>(codes + o);
        want[u][0] = I(c.v[0]), want[u][1] = I(c.v[1]);
      } else {
        const Pack<int64_t, 2> q = load_vec<Pack<int64_t, 2>>(plane_idx + o);
        EMBER_UNROLL
        for (int e = 0; e < 2; ++e)
          want[u][e] = q.v[e] >= 0 && q.v[e] < int64_t(g.H) * g.W ? I(q.v[e]) : I(-1);  // -1 matches no tap
      }
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t p = p0 + u * step;
      if (p >= pairs) break;
      T hit[2];
      EMBER_UNROLL
      for (int e = 0; e < 2; ++e) hit[e] = round_to<T>(C(0) + widen(gv[u].v[e]));  // the general kernel's 0 + gy
      const pool_detail::Window<I> wo = pool_detail::window_of(I(2 * p), g);
      const I rows = (wo.oh == g.OH - 1 ? g.H : wo.h0 + 2) - wo.h0;
      T* out = gx + wo.offset;
      for (I i = 0; i < rows; ++i, out += g.W) {
        Row r;
        EMBER_UNROLL
        for (int c = 0; c < 4; ++c) {
          const int e = c / 2;
          const I key = K == pool_detail::MaxIndex::kCode ? i * 2 + I(c % 2) : (wo.h0 + i) * g.W + wo.w0 + I(c);
          r.v[c] = i < 2 && key == want[u][e] ? hit[e] : miss;
        }
        store_vec_global(out, r);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Host side: one configuration for every pooling kernel (a grid-stride loop over outputs
// or input pixels), checks, and the launchers.

inline LaunchConfig pool_config(int64_t items) {
  return LaunchConfig{dim3(grid_stride_blocks(items, kBlockThreads)), dim3(kBlockThreads), 0};
}

inline void check_pool_geometry(const PoolGeometry& g, const char* op, bool average) {
  EMBER_CHECK(g.N >= 0 && g.C >= 0 && g.H >= 0 && g.W >= 0 && g.OH >= 0 && g.OW >= 0, op, ": negative size (input [",
              g.N, ", ", g.C, ", ", g.H, ", ", g.W, "], output ", g.OH, " x ", g.OW, ")");
  EMBER_CHECK(g.kh > 0 && g.kw > 0 && g.sh > 0 && g.sw > 0 && g.dh > 0 && g.dw > 0, op, ": kernel [", g.kh, ", ", g.kw,
              "], stride [", g.sh, ", ", g.sw, "] and dilation [", g.dh, ", ", g.dw, "] must be positive");
  EMBER_CHECK(g.ph >= 0 && g.pw >= 0 && g.ph <= g.kh / 2 && g.pw <= g.kw / 2, op, ": padding [", g.ph, ", ", g.pw,
              "] must be between 0 and half the kernel size [", g.kh, ", ", g.kw, "]");
  EMBER_CHECK(!average || (g.dh == 1 && g.dw == 1), op, ": dilation is not supported");
  EMBER_CHECK(!average || g.divisor_override >= 0, op, ": divisor_override must be positive, got ", g.divisor_override);
}

// Whether the pairs kernels (Note [Pool pairs]) take g: `rows` the pointer of the side
// moved as rows of 4 pixels (x forward, gx backward), `outs` the side of two outputs a
// thread (y or gy), and the indices or codes.
template <class T>
bool pool_pairs(const PoolGeometry& g, const PoolKernelChoice& choice, const T* rows, const T* outs,
                const int64_t* plane_idx, const uint8_t* codes) {
  return choice.windows && choice.pairs && sizeof(T) <= 4 && pool_windows_tile(g) && g.kh == 2 && g.kw == 2 &&
         g.W == 2 * g.OW && g.OW % 2 == 0 && g.H >= 2 * g.OH && vec_aligned<4>(rows) && vec_aligned<2>(outs) &&
         vec_aligned<2>(plane_idx) && vec_aligned<2>(codes);
}

namespace pool_detail {
// f(dims<I>(g)) with I = int32_t where the choice allows it and every index fits.
template <class F>
void with_dims(const PoolGeometry& g, const PoolKernelChoice& choice, F&& f) {
  if (choice.int32 && pool_fits_int32(g))
    f(dims<int32_t>(g));
  else
    f(dims<int64_t>(g));
}
template <MaxIndex K>
using MaxIndexTag = std::integral_constant<MaxIndex, K>;
}  // namespace pool_detail

// y [N, C, OH, OW] = max over each window of x [N, C, H, W] (relu: max(0, .) of it, NaN
// kept), and where it was: plane_indices (int64, h * W + w) or codes (uint8, i * kw + j;
// needs kh * kw <= 256), at most one of them, or neither.
template <class T>
void max_pool2d_forward(const T* x, T* y, int64_t* plane_indices, uint8_t* codes, const PoolGeometry& g, bool relu,
                        cudaStream_t stream, const PoolKernelChoice& choice = {}) {
  using namespace pool_detail;
  check_pool_geometry(g, "max_pool2d", false);
  EMBER_CHECK(!(plane_indices && codes), "max_pool2d: asked for both int64 indices and uint8 codes");
  EMBER_CHECK(!codes || g.kh * g.kw <= 256, "max_pool2d: uint8 codes need kh * kw <= 256, got ", g.kh * g.kw);
  const int64_t total = g.N * g.C * g.OH * g.OW;
  const LaunchConfig cfg = pool_config(total);
  const bool windows = choice.windows && pool_windows_tile(g);
  const bool pairs = pool_pairs(g, choice, x, y, plane_indices, codes);
  const auto run = [&](auto d, auto tag) {
    using I = decltype(d.H);
    constexpr MaxIndex K = decltype(tag)::value;
    if constexpr (sizeof(T) <= 4) {  // (pool_pairs: no other instances, which would only spill unused)
      if (pairs)
        return launch<max_pool2d_pairs_kernel<T, K, I>>(pool_config((total / 2 + 1) / 2), stream, x, y, plane_indices,
                                                        codes, d, relu, total / 2);
    }
    if (windows)
      launch<max_pool2d_windows_kernel<T, K, I>>(cfg, stream, x, y, plane_indices, codes, d, relu, total);
    else
      launch<max_pool2d_kernel<T, K, I>>(cfg, stream, x, y, plane_indices, codes, d, relu, total);
  };
  with_dims(g, choice, [&](auto d) {
    if (plane_indices) run(d, MaxIndexTag<MaxIndex::kPlane>{});
    else if (codes) run(d, MaxIndexTag<MaxIndex::kCode>{});
    else run(d, MaxIndexTag<MaxIndex::kNone>{});
  });
}

// gx [N, C, H, W] (overwritten) from gy [N, C, OH, OW] and the forward's plane_indices
// or codes (exactly one).
template <class T>
void max_pool2d_backward(const T* gy, const int64_t* plane_indices, const uint8_t* codes, T* gx, const PoolGeometry& g,
                         cudaStream_t stream, const PoolKernelChoice& choice = {}) {
  using namespace pool_detail;
  check_pool_geometry(g, "max_pool2d_backward", false);
  EMBER_CHECK((plane_indices != nullptr) != (codes != nullptr),
              "max_pool2d_backward: needs exactly one of int64 indices and uint8 codes");
  const bool windows = choice.windows && pool_windows_tile(g);
  const bool pair_stores = windows && g.kw == 2 && g.OW * 2 == g.W && vec_aligned<2>(gx);
  const int64_t total = windows ? g.N * g.C * g.OH * g.OW : g.N * g.C * g.H * g.W;
  const LaunchConfig cfg = pool_config(windows ? (total + 1) / 2 : total);  // windows: two outputs a turn
  const bool pairs = pool_pairs(g, choice, gx, gy, plane_indices, codes);
  const auto run = [&](auto d, auto tag) {
    using I = decltype(d.H);
    constexpr MaxIndex K = decltype(tag)::value;
    if constexpr (sizeof(T) <= 4) {
      if (pairs)
        return launch<max_pool2d_pairs_backward_kernel<T, K, I>>(pool_config((total / 2 + 1) / 2), stream, gy,
                                                                 plane_indices, codes, gx, d, total / 2);
    }
    if (windows)
      launch<max_pool2d_windows_backward_kernel<T, K, I>>(cfg, stream, gy, plane_indices, codes, gx, d, pair_stores,
                                                           total);
    else
      launch<max_pool2d_backward_kernel<T, K, I>>(cfg, stream, gy, plane_indices, codes, gx, d, total);
  };
  with_dims(g, choice, [&](auto d) {
    if (plane_indices) run(d, MaxIndexTag<MaxIndex::kPlane>{});
    else run(d, MaxIndexTag<MaxIndex::kCode>{});
  });
}

// y [N, C, OH, OW] = mean over each window of x [N, C, H, W].
template <class T>
void avg_pool2d_forward(const T* x, T* y, const PoolGeometry& g, cudaStream_t stream,
                        const PoolKernelChoice& choice = {}) {
  check_pool_geometry(g, "avg_pool2d", true);
  const int64_t total = g.N * g.C * g.OH * g.OW;
  pool_detail::with_dims(g, choice, [&](auto d) {
    launch<avg_pool2d_kernel<T, decltype(d.H)>>(pool_config(total), stream, x, y, d, total);
  });
}

// gx [N, C, H, W] (overwritten) from gy [N, C, OH, OW].
template <class T>
void avg_pool2d_backward(const T* gy, T* gx, const PoolGeometry& g, cudaStream_t stream,
                         const PoolKernelChoice& choice = {}) {
  check_pool_geometry(g, "avg_pool2d_backward", true);
  const int64_t total = g.N * g.C * g.H * g.W;
  pool_detail::with_dims(g, choice, [&](auto d) {
    launch<avg_pool2d_backward_kernel<T, decltype(d.H)>>(pool_config(total), stream, gy, gx, d, total);
  });
}

}  // namespace ember::kernels::cuda
