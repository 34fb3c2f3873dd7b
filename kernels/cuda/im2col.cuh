// im2col and col2im for NCHW convolutions with stride, padding and dilation, in PyTorch's
// layout (and the CPU backend's, kernels/cpu/conv.cpp): per image, the columns are a
// [C * kh * kw, OH * OW] matrix whose row (c * kh + i) * kw + j holds, for every output
// position (oh, ow), the input x[c, oh * sh - ph + i * dh, ow * sw - pw + j * dw] (zero in
// the padding). A batch of N images gives col [N, C * kh * kw, OH * OW].
//
// col2im is its adjoint: x[c, h, w] = the sum of the column entries that im2col read from
// (c, h, w). Deterministic: each input pixel gathers its own contributions, in the order
// (i, j), the CPU backend's; no atomics.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/types.cuh"
#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

struct Im2colGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input [N, C, H, W]
  int64_t kh = 1, kw = 1;              // kernel
  int64_t sh = 1, sw = 1;              // stride
  int64_t ph = 0, pw = 0;              // zero padding on each side
  int64_t dh = 1, dw = 1;              // dilation
  int64_t OH = 0, OW = 0;              // output, from im2col_geometry()
};

// The geometry with its output size, PyTorch's: (in + 2p - d (k - 1) - 1) / s + 1.
inline Im2colGeometry im2col_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t sh,
                                      int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
  Im2colGeometry g{N, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, 0, 0};
  EMBER_CHECK(N >= 0 && C >= 0 && H >= 0 && W >= 0, "im2col: negative input size [", N, ", ", C, ", ", H, ", ", W, "]");
  EMBER_CHECK(kh >= 1 && kw >= 1 && sh >= 1 && sw >= 1 && dh >= 1 && dw >= 1 && ph >= 0 && pw >= 0,
              "im2col: kernel (", kh, ", ", kw, "), stride (", sh, ", ", sw, ") and dilation (", dh, ", ", dw,
              ") must be positive, padding (", ph, ", ", pw, ") non-negative");
  g.OH = (H + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
  g.OW = (W + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
  EMBER_CHECK(H + 2 * ph - dh * (kh - 1) - 1 >= 0 && W + 2 * pw - dw * (kw - 1) - 1 >= 0, "im2col: input ", H, " x ", W,
              " padded by (", ph, ", ", pw, ") is smaller than the dilated kernel (", dh * (kh - 1) + 1, ", ",
              dw * (kw - 1) + 1, ")");
  return g;
}

// col [N, C*kh*kw, OH*OW] from x [N, C, H, W]: the same bits (U a carrier, V = U), or
// 16-bit floats widened to float32 columns (V = float). One thread per (n, c, oh, ow)
// writes the kh * kw entries of its column (consecutive threads write consecutive
// addresses). Memory bound: sizeof(V) bytes written per column entry; the input, read
// kh * kw times, mostly from cache, costs sizeof(U) per input element from DRAM.
template <class U, class V>
__global__ void __launch_bounds__(256) im2col_kernel(const U* __restrict__ x, V* __restrict__ col, Im2colGeometry g,
                                                     int64_t total) {
  const int64_t plane = g.OH * g.OW, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += step) {
    int64_t t = i / g.OW;
    const int64_t ow = i - t * g.OW, oh = t % g.OH;
    t /= g.OH;  // n * C + c
    const U* xp = x + t * g.H * g.W;
    V* cp = col + t * g.kh * g.kw * plane + oh * g.OW + ow;  // (n * C + c) * kh * kw rows before
    const int64_t h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t h = h0 + ki * g.dh;
      const bool row_in = h >= 0 && h < g.H;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t w = w0 + kj * g.dw;
        *cp = row_in && w >= 0 && w < g.W ? V(widen(xp[h * g.W + w])) : V(0);
        cp += plane;
      }
    }
  }
}

// x [N, C, H, W] (overwritten) = col2im(col [N, C*kh*kw, OH*OW]), col in T or in T's
// compute type (float32 columns of a 16-bit x). One thread per input pixel gathers the
// entries of the windows that cover it. Memory bound: sizeof(S) bytes read per column
// entry, sizeof(T) written per pixel; kh * kw additions per pixel.
template <class S, class T>
__global__ void __launch_bounds__(256) col2im_kernel(const S* __restrict__ col, T* __restrict__ x, Im2colGeometry g,
                                                     int64_t total) {
  using C = compute_t<T>;
  const int64_t plane = g.OH * g.OW, step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += step) {
    int64_t t = i / g.W;
    const int64_t w = i - t * g.W, h = t % g.H;
    t /= g.H;  // n * C + c
    const S* cp = col + t * g.kh * g.kw * plane;
    C acc = C(0);
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t hs = h + g.ph - ki * g.dh;  // oh * sh if output row oh reads h with tap ki
      if (hs < 0) break;                       // and for every larger ki
      const int64_t oh = hs / g.sh;
      if (oh * g.sh != hs || oh >= g.OH) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t ws = w + g.pw - kj * g.dw;
        if (ws < 0) break;
        const int64_t ow = ws / g.sw;
        if (ow * g.sw != ws || ow >= g.OW) continue;
        acc += widen(cp[(ki * g.kw + kj) * plane + oh * g.OW + ow]);
      }
    }
    x[i] = round_to<T>(acc);
  }
}

inline LaunchConfig im2col_config(int64_t threads) {
  return LaunchConfig{dim3(grid_stride_blocks(threads, kBlockThreads)), dim3(kBlockThreads), 0};
}

// col [N, C*kh*kw, OH*OW] = im2col(x [N, C, H, W]); g from im2col_geometry(). Any element
// type of 1, 2, 4 or 8 bytes copied as it is (C = T; padding writes all-zero bits: +0.0),
// or __half / __nv_bfloat16 widened to float32 columns (C = float), so that a 16-bit
// input needs no float32 copy before the float32 GEMM.
template <class T, class C>
void im2col(const T* x, C* col, const Im2colGeometry& g, cudaStream_t stream) {
  const int64_t total = g.N * g.C * g.OH * g.OW;
  if constexpr (std::is_same_v<T, C>) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                  "elements of 1, 2, 4 or 8 bytes");
    using U = carrier_t<int(sizeof(T))>;
    launch<im2col_kernel<U, U>>(im2col_config(total), stream, reinterpret_cast<const U*>(x), reinterpret_cast<U*>(col),
                                g, total);
  } else {
    static_assert(is_16bit_float_v<T> && std::is_same_v<C, float>, "im2col widens 16-bit floats to float32 only");
    launch<im2col_kernel<T, float>>(im2col_config(total), stream, x, col, g, total);
  }
}

// x [N, C, H, W] (overwritten) = col2im(col [N, C*kh*kw, OH*OW]). T: float, double, __half,
// __nv_bfloat16 (summed in float, rounded once); col in T, or float32 for a 16-bit x.
template <class S, class T>
void col2im(const S* col, T* x, const Im2colGeometry& g, cudaStream_t stream) {
  static_assert(std::is_same_v<S, T> || std::is_same_v<S, compute_t<T>>, "col2im: columns in T or its compute type");
  const int64_t total = g.N * g.C * g.H * g.W;
  launch<col2im_kernel<S, T>>(im2col_config(total), stream, col, x, g, total);
}

}  // namespace ember::kernels::cuda
