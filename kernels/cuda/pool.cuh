// 2-D max and average pooling of NCHW tensors, forward and backward, with the CPU
// backend's semantics (kernels/cpu/pool.cpp, PyTorch's): padding, dilation (max),
// ceil_mode (through the output size), count_include_pad and divisor_override (average),
// NaN handling and tie-breaking from kernels/common/pool_ops.h.
//
// Two families of kernels (Note [Pool kernels] in pool_windows.cuh): the general ones,
// here, take any geometry; the windows ones (max pooling, pool_windows.cuh) take windows
// that tile the input without overlap, the CNNs' 2x2 / stride 2. The general backwards
// are gathers: one thread per input pixel visits the windows that contain it, in output
// order (the CPU backend's order of additions, so float results match it bit for bit),
// and writes the pixel once. The windows backward has one thread per output write its
// window. No atomics, no zeroing pass, and every kernel gives the bits of the general one.
//
// Max-pool indices come in the two forms of Note [Max-pool indices] (kernels/cpu/pool.cpp):
// int64 h * W + w within the input plane (PyTorch's), or a uint8 code i * kw + j of the
// winning tap in its window. The backward counts a gradient for the pixel its index
// names when that pixel lies in the output's window; an index naming a pixel outside
// its window (never written by the forward) is ignored, never followed.
//
// PoolGeometry, the choice of kernels and the kernels' index helpers: pool_geometry.cuh.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/pool_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/pool_geometry.cuh"
#include "kernels/cuda/pool_windows.cuh"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

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
