// 2-D resampling of NCHW planes (nearest and bilinear), forward and backward, with the
// CPU backend's source coordinates (kernels/common/upsample_ops.h, PyTorch's).
//
// Both are memory bound (nearest: sizeof(T) read and written per output; bilinear: four
// reads, mostly from L1, one write). The backward is a gather, not atomics: one thread
// per input pixel finds the output rows and columns that read it (the source index is
// non-decreasing in the output index, so a binary search bounds them) and sums their
// gradients in output order. Each pixel is written once; the bits do not depend on
// timing.
#pragma once

#include <cstdint>

#include "kernels/common/upsample_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

struct UpsampleGeometry {
  int64_t planes = 0, H = 0, W = 0, OH = 0, OW = 0;
  bool bilinear = false, align_corners = false;
  double scale_h = 1, scale_w = 1;
};

namespace upsample_detail {

// Output index d's taps along one dim (nearest: one tap of weight 1).
template <class C>
__device__ __forceinline__ ops::LinearTap<C> tap(int64_t d, int64_t in, double scale, bool bilinear, bool align) {
  if (bilinear) return ops::linear_source<C>(d, in, C(scale), align);
  return {ops::nearest_source(d, in, static_cast<float>(scale)), 0, C(1), C(0)};
}

// The first output index in [0, out) whose first tap is >= i (out when none).
template <class C>
__device__ __forceinline__ int64_t first_reading(int64_t i, int64_t in, int64_t out, double scale, bool bilinear,
                                                 bool align) {
  int64_t lo = 0, hi = out;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (tap<C>(mid, in, scale, bilinear, align).i0 >= i) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// The weight with which output d's taps read input i (both taps may name the last input).
template <class C>
__device__ __forceinline__ C weight_of(const ops::LinearTap<C>& t, int64_t i, bool bilinear) {
  if (!bilinear) return t.i0 == i ? C(1) : C(0);
  return (t.i0 == i ? t.w0 : C(0)) + (t.i1 == i ? t.w1 : C(0));
}

}  // namespace upsample_detail

// y [planes, OH, OW] from x [planes, H, W]; one thread per output.
template <class T>
__global__ void __launch_bounds__(256) upsample2d_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                         UpsampleGeometry g, int64_t total) {
  using C = compute_t<T>;
  using upsample_detail::tap;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total; o += step) {
    const int64_t ow = o % g.OW, oh = (o / g.OW) % g.OH, pl = o / (g.OW * g.OH);
    const ops::LinearTap<C> r = tap<C>(oh, g.H, g.scale_h, g.bilinear, g.align_corners);
    const ops::LinearTap<C> c = tap<C>(ow, g.W, g.scale_w, g.bilinear, g.align_corners);
    const T *x0 = x + (pl * g.H + r.i0) * g.W, *x1 = x + (pl * g.H + r.i1) * g.W;
    if (!g.bilinear) {
      y[o] = x0[c.i0];
      continue;
    }
    y[o] = round_to<T>(r.w0 * (c.w0 * widen(x0[c.i0]) + c.w1 * widen(x0[c.i1])) +
                       r.w1 * (c.w0 * widen(x1[c.i0]) + c.w1 * widen(x1[c.i1])));
  }
}

// gx [planes, H, W] (overwritten) from gy [planes, OH, OW]; one thread per input pixel.
template <class T>
__global__ void __launch_bounds__(256) upsample2d_backward_kernel(const T* __restrict__ gy, T* __restrict__ gx,
                                                                  UpsampleGeometry g, int64_t total) {
  using C = compute_t<T>;
  using namespace upsample_detail;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  // A bilinear output reads inputs i0 and i0 + 1: the outputs reading i have i0 in [i - 1, i].
  const int64_t reach = g.bilinear ? 1 : 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += step) {
    const int64_t w = i % g.W, h = (i / g.W) % g.H, pl = i / (g.W * g.H);
    const int64_t oh0 = first_reading<C>(h - reach, g.H, g.OH, g.scale_h, g.bilinear, g.align_corners);
    const int64_t oh1 = first_reading<C>(h + 1, g.H, g.OH, g.scale_h, g.bilinear, g.align_corners);
    const int64_t ow0 = first_reading<C>(w - reach, g.W, g.OW, g.scale_w, g.bilinear, g.align_corners);
    const int64_t ow1 = first_reading<C>(w + 1, g.W, g.OW, g.scale_w, g.bilinear, g.align_corners);
    C acc = C(0);
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const C wh = weight_of(tap<C>(oh, g.H, g.scale_h, g.bilinear, g.align_corners), h, g.bilinear);
      const T* row = gy + (pl * g.OH + oh) * g.OW;
      C racc = C(0);
      for (int64_t ow = ow0; ow < ow1; ++ow)
        racc += weight_of(tap<C>(ow, g.W, g.scale_w, g.bilinear, g.align_corners), w, g.bilinear) * widen(row[ow]);
      acc += wh * racc;
    }
    gx[i] = round_to<T>(acc);
  }
}

template <class T>
void upsample2d_forward(const T* x, T* y, const UpsampleGeometry& g, cudaStream_t stream) {
  const int64_t total = g.planes * g.OH * g.OW;
  if (total == 0) return;
  launch<upsample2d_kernel<T>>(LaunchConfig{dim3(grid_stride_blocks(total, kBlockThreads)), dim3(kBlockThreads), 0},
                               stream, x, y, g, total);
}

template <class T>
void upsample2d_backward(const T* gy, T* gx, const UpsampleGeometry& g, cudaStream_t stream) {
  const int64_t total = g.planes * g.H * g.W;
  if (total == 0) return;
  launch<upsample2d_backward_kernel<T>>(
      LaunchConfig{dim3(grid_stride_blocks(total, kBlockThreads)), dim3(kBlockThreads), 0}, stream, gy, gx, g, total);
}

}  // namespace ember::kernels::cuda
