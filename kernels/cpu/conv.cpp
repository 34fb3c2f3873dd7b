// CPU conv2d, NCHW with contiguous inputs (core ensures it), in two variants reachable by
// name (kernels/cpu/conv.h): im2col + GEMM, here, and Winograd F(4x4, 3x3)
// (kernels/cpu/winograd.cpp). conv2d does 2*N*O*OH*OW*(C/groups)*kh*kw flops; im2col
// writes C*kh*kw*OH*OW values per sample, which a 1x1 stride-1 unpadded conv skips.
//
// Note [Conv choice]. Auto takes Winograd for 3x3 stride-1 convolutions with at least
// kWinogradMinChannels input and output channels per group, im2col otherwise: measured
// with bench/bench_layers.cpp on the CNN's layers (see the README's table), Winograd's
// GEMMs do a third of im2col's work there, while with a handful of channels (the CNN's
// first layer has one) its transforms cost more than they save.
#include "kernels/cpu/conv.h"

#include <atomic>
#include <vector>

#include "base/error.h"
#include "kernels/common/unary_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/variant.h"
#include "kernels/cpu/winograd.h"

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kWinogradMinChannels = 16;

std::atomic<ConvVariant> g_variant{variant_from_env("EMBER_CONV", ConvVariant::Auto, parse_conv_variant)};

// Whether this convolution runs on the Winograd path; cin and cout are the channels per
// group of the convolution as computed (the backward of the input swaps them).
bool use_winograd(const Conv2dParams& p, int64_t kh, int64_t kw, int64_t cin, int64_t cout) {
  if (!winograd_supported(p, kh, kw)) return false;
  const ConvVariant v = g_variant.load();
  if (v == ConvVariant::Winograd) return true;
  return v == ConvVariant::Auto && cin >= kWinogradMinChannels && cout >= kWinogradMinChannels;
}


// Output columns [lo, hi) of a kernel tap at input offset `shift` whose input column
// ow * stride + shift lies inside [0, W).
inline void inside_columns(int64_t OW, int64_t W, int64_t stride, int64_t shift, int64_t& lo, int64_t& hi) {
  lo = 0;
  hi = OW;
  while (lo < OW && lo * stride + shift < 0) ++lo;
  while (hi > lo && (hi - 1) * stride + shift >= W) --hi;
}

// col [C * kh * kw, OH * OW] from one sample's x [C, H, W]; padding reads as zero.
// ld: the distance between col's rows (OH * OW, or more when samples share col's rows).
template <class T>
void im2col(const T* x, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t OH, int64_t OW,
            const Conv2dParams& p, T* col, int64_t ld = 0) {
  if (ld == 0) ld = OH * OW;
  const bool flat = p.stride[0] == 1 && p.stride[1] == 1 && OW == W;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ki = 0; ki < kh; ++ki)
      for (int64_t kj = 0; kj < kw; ++kj) {
        T* row = col + ((c * kh + ki) * kw + kj) * ld;
        const int64_t dh = ki * p.dilation[0] - p.padding[0], dw = kj * p.dilation[1] - p.padding[1];
        int64_t ow_lo, ow_hi;
        inside_columns(OW, W, p.stride[1], dw, ow_lo, ow_hi);
        if (flat) {
          // Stride 1 and OW == W (a "same" convolution): the tap's rows are the input
          // shifted by dh * W + dw, one copy for all of them, then the columns that
          // wrapped around a row edge are zeroed. Per-row copies of 14 floats spent
          // more time calling memmove than copying.
          int64_t oh_lo, oh_hi;
          inside_columns(OH, H, 1, dh, oh_lo, oh_hi);
          if (oh_lo >= oh_hi || ow_lo >= ow_hi) {
            std::fill(row, row + OH * OW, T(0));
            continue;
          }
          const int64_t first = oh_lo * OW + ow_lo, last = (oh_hi - 1) * OW + ow_hi;
          std::fill(row, row + first, T(0));
          std::copy(x + c * H * W + first + dh * W + dw, x + c * H * W + last + dh * W + dw, row + first);
          std::fill(row + last, row + OH * OW, T(0));
          for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
            T* r = row + oh * OW;
            for (int64_t ow = 0; ow < ow_lo; ++ow) r[ow] = T(0);
            for (int64_t ow = ow_hi; ow < OW; ++ow) r[ow] = T(0);
          }
          continue;
        }
        for (int64_t oh = 0; oh < OH; ++oh) {
          T* r = row + oh * OW;
          const int64_t ih = oh * p.stride[0] + dh;
          if (ih < 0 || ih >= H) {
            std::fill(r, r + OW, T(0));
            continue;
          }
          const T* xr = x + (c * H + ih) * W + dw;
          std::fill(r, r + ow_lo, T(0));
          if (p.stride[1] == 1) {
            std::copy(xr + ow_lo, xr + ow_hi, r + ow_lo);
          } else {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) r[ow] = xr[ow * p.stride[1]];
          }
          std::fill(r + ow_hi, r + OW, T(0));
        }
      }
}

// x [C, H, W] += col [C * kh * kw, OH * OW]: the adjoint of im2col, with the same
// in-bounds column ranges (no test per element; contiguous adds at stride 1).
// ld: the distance between col's rows (OH * OW, or more when samples share col's rows).
template <class T>
void col2im(const T* col, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t OH, int64_t OW,
            const Conv2dParams& p, T* x, int64_t ld = 0) {
  if (ld == 0) ld = OH * OW;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ki = 0; ki < kh; ++ki)
      for (int64_t kj = 0; kj < kw; ++kj) {
        const T* row = col + ((c * kh + ki) * kw + kj) * ld;
        const int64_t dh = ki * p.dilation[0] - p.padding[0], dw = kj * p.dilation[1] - p.padding[1];
        int64_t ow_lo, ow_hi;
        inside_columns(OW, W, p.stride[1], dw, ow_lo, ow_hi);
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t ih = oh * p.stride[0] + dh;
          if (ih < 0 || ih >= H) continue;
          T* xr = x + (c * H + ih) * W + dw;
          const T* r = row + oh * OW;
          if (p.stride[1] == 1) {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) xr[ow] += r[ow];
          } else {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) xr[ow * p.stride[1]] += r[ow];
          }
        }
      }
}

// Scratch of one thread, reused from sample to sample: im2col's columns, and copies in
// the compute type of a sample's input, output and gradient when tensors are 16-bit.
template <class C>
struct SampleScratch {
  std::vector<C> col, in, out, grad;
};

// p[0..n) in the compute type C: the data itself when it is stored as C, else a copy.
template <class C, class T>
const C* as_compute(const T* p, int64_t n, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    return p;
  } else {
    buf.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf[i] = cast<C>(p[i]);
    return buf.data();
  }
}

// Runs sample(n, parallel, scratch) for n in [0, N): samples go to threads (with
// single-threaded GEMMs) when there are at least as many as threads, else they run one
// after another with threaded GEMMs.
template <class C, class F>
void for_each_sample(int64_t N, const F& sample) {
  if (N >= num_threads()) {
    parallel_for(0, N, 1, [&](int64_t b, int64_t e) {
      SampleScratch<C> s;
      for (int64_t n = b; n < e; ++n) sample(n, false, s);
    });
  } else {
    SampleScratch<C> s;
    for (int64_t n = 0; n < N; ++n) sample(n, true, s);
  }
}

// Note [Small planes]: with few output positions per sample (P = OH * OW), a GEMM per
// sample has P columns and reads the whole weight for them (conv_transpose2d's first DCGAN
// layer, [16, 100, 1, 1] -> [16, 512, 4, 4], runs conv2d's passes with P = 1: 16 passes
// over a 3.3 MB weight). There the samples of a chunk share one threaded GEMM of about
// kChunkColumns columns: each sample's im2col (or col2im) fills (or reads) its P columns
// of a shared col [KK, chunk * P] (threads over samples). Float32 and float64; 16-bit data
// keeps the per-sample path.
constexpr int64_t kSmallPlane = 64, kChunkColumns = 256;

// Samples per chunk of the small-plane kernels.
int64_t small_plane_chunk(int64_t N, int64_t P) {
  return std::max<int64_t>(1, std::min(N, kChunkColumns / std::max<int64_t>(P, 1)));
}

// y[chunk, g] = W_g [Og, KK] @ col [KK, chunk * P] (+ bias, relu), written sample by sample.
template <class C>
void conv2d_batched(const Tensor& out, const Tensor& in, const C* w, const C* bias, int64_t kh, int64_t kw,
                    const Conv2dParams& p) {
  const int64_t N = in.shape()[0], Ch = in.shape()[1], H = in.shape()[2], W = in.shape()[3];
  const int64_t O = out.shape()[1], OH = out.shape()[2], OW = out.shape()[3], G = p.groups;
  const int64_t Cg = Ch / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW, nb = small_plane_chunk(N, P);
  const C* x = static_cast<const C*>(in.data_ptr());
  C* y = static_cast<C*>(out.data_ptr());
  std::vector<C> z(static_cast<size_t>(Og * nb * P)), col(static_cast<size_t>(KK * nb * P));
  for (int64_t n0 = 0; n0 < N; n0 += nb) {
    const int64_t b = std::min(nb, N - n0), cols = b * P;
    for (int64_t g = 0; g < G; ++g) {
      parallel_for(0, b, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; ++j)
          im2col(x + ((n0 + j) * Ch + g * Cg) * H * W, Cg, H, W, kh, kw, OH, OW, p, col.data() + j * P, cols);
      });
      gemm<C>(false, false, Og, cols, KK, w + g * Og * KK, KK, col.data(), cols, z.data(), cols, false, true);
      for (int64_t o = 0; o < Og; ++o) {
        const C bo = bias ? bias[g * Og + o] : C(0);
        for (int64_t j = 0; j < b; ++j) {
          const C* src = z.data() + o * cols + j * P;
          C* dst = y + ((n0 + j) * O + g * Og + o) * P;
          for (int64_t i = 0; i < P; ++i) dst[i] = p.relu ? ops::Relu{}(src[i] + bo) : src[i] + bo;
        }
      }
    }
  }
}

// T: the tensors' type; C: the type of the arithmetic (float for the 16-bit floats).
template <class T, class C = compute_t<T>>
void conv2d_typed(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const int64_t N = in.shape()[0], Ch = in.shape()[1], H = in.shape()[2], W = in.shape()[3];
  const int64_t O = weight.shape()[0], kh = weight.shape()[2], kw = weight.shape()[3];
  const int64_t OH = out.shape()[2], OW = out.shape()[3], G = p.groups;
  const int64_t Cg = Ch / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW;
  const T* x = static_cast<const T*>(in.data_ptr());
  std::vector<C> wbuf, bbuf;
  const C* w = as_compute<C>(static_cast<const T*>(weight.data_ptr()), weight.numel(), wbuf);
  const C* bptr = bias.defined() ? as_compute<C>(static_cast<const T*>(bias.data_ptr()), bias.numel(), bbuf) : nullptr;
  T* y = static_cast<T*>(out.data_ptr());
  const bool direct = kh == 1 && kw == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.padding[0] == 0 &&
                      p.padding[1] == 0;
  if constexpr (std::is_same_v<T, C>) {
    if (P < kSmallPlane && N > 1) return conv2d_batched<C>(out, in, w, bptr, kh, kw, p);
  }

  auto sample = [&](int64_t n, bool parallel, SampleScratch<C>& s) {
    for (int64_t g = 0; g < G; ++g) {
      const C* xg = as_compute<C>(x + (n * Ch + g * Cg) * H * W, Cg * H * W, s.in);
      T* yg = y + (n * O + g * Og) * P;
      C* acc;
      if constexpr (std::is_same_v<T, C>) {
        acc = yg;
      } else {
        s.out.resize(static_cast<size_t>(Og * P));
        acc = s.out.data();
      }
      const C* cols = xg;
      if (!direct) {
        s.col.resize(KK * P);
        im2col(xg, Cg, H, W, kh, kw, OH, OW, p, s.col.data());
        cols = s.col.data();
      }
      for (int64_t o = 0; o < Og; ++o) std::fill(acc + o * P, acc + (o + 1) * P, bptr ? bptr[g * Og + o] : C(0));
      gemm<C>(false, false, Og, P, KK, w + g * Og * KK, KK, cols, P, acc, P, true, parallel);
      if (p.relu)  // while the sample's output is in cache
        for (int64_t i = 0; i < Og * P; ++i) acc[i] = ops::Relu{}(acc[i]);
      if constexpr (!std::is_same_v<T, C>)
        for (int64_t i = 0; i < Og * P; ++i) yg[i] = cast<T>(acc[i]);
    }
  };
  for_each_sample<C>(N, sample);
}

template <class F>
void by_float_dtype(DType dtype, const char* op, const F& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::BFloat16: return f(BFloat16{});
    case DType::Float16: return f(Half{});
    default: EMBER_FAIL(op, " kernel: dtype ", dtype_name(dtype), " is not supported on the cpu");
  }
}

void conv2d_kernel(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const int64_t G = p.groups;
  if (use_winograd(p, weight.shape()[2], weight.shape()[3], in.shape()[1] / G, weight.shape()[0] / G))
    return winograd_conv2d(out, in, weight, bias, p);
  by_float_dtype(in.dtype(), "conv2d", [&](auto v) { conv2d_typed<decltype(v)>(out, in, weight, bias, p); });
}

// The backward-input form of Note [Small planes]: col [KK, chunk * P] = W_g^T [KK, Og] @
// grad_y[chunk, g] [Og, chunk * P], then col2im sample by sample.
template <class C>
void conv2d_backward_input_batched(const Tensor& gin, const Tensor& gout, const C* w, int64_t kh, int64_t kw,
                                   const Conv2dParams& p) {
  const int64_t N = gin.shape()[0], Ch = gin.shape()[1], H = gin.shape()[2], W = gin.shape()[3];
  const int64_t O = gout.shape()[1], OH = gout.shape()[2], OW = gout.shape()[3], G = p.groups;
  const int64_t Cg = Ch / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW, nb = small_plane_chunk(N, P);
  const C* gy = static_cast<const C*>(gout.data_ptr());
  C* gx = static_cast<C*>(gin.data_ptr());
  std::fill(gx, gx + N * Ch * H * W, C(0));
  std::vector<C> ys(static_cast<size_t>(Og * nb * P)), col(static_cast<size_t>(KK * nb * P));
  for (int64_t n0 = 0; n0 < N; n0 += nb) {
    const int64_t b = std::min(nb, N - n0), cols = b * P;
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t o = 0; o < Og; ++o)
        for (int64_t j = 0; j < b; ++j) {
          const C* src = gy + ((n0 + j) * O + g * Og + o) * P;
          std::copy(src, src + P, ys.data() + o * cols + j * P);
        }
      gemm<C>(true, false, KK, cols, Og, w + g * Og * KK, KK, ys.data(), cols, col.data(), cols, false, true);
      parallel_for(0, b, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; ++j)
          col2im(col.data() + j * P, Cg, H, W, kh, kw, OH, OW, p, gx + ((n0 + j) * Ch + g * Cg) * H * W, cols);
      });
    }
  }
}

// grad_x[n, g] = col2im(W_g^T [KK, Og] @ grad_y[n, g] [Og, P]); samples go to threads.
template <class T, class C = compute_t<T>>
void conv2d_backward_input_typed(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p) {
  const int64_t N = gin.shape()[0], Ch = gin.shape()[1], H = gin.shape()[2], W = gin.shape()[3];
  const int64_t O = weight.shape()[0], kh = weight.shape()[2], kw = weight.shape()[3];
  const int64_t OH = gout.shape()[2], OW = gout.shape()[3], G = p.groups;
  const int64_t Cg = Ch / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW;
  std::vector<C> wbuf;
  const C* w = as_compute<C>(static_cast<const T*>(weight.data_ptr()), weight.numel(), wbuf);
  if constexpr (std::is_same_v<T, C>) {
    if (P < kSmallPlane && N > 1) return conv2d_backward_input_batched<C>(gin, gout, w, kh, kw, p);
  }
  const T* gy = static_cast<const T*>(gout.data_ptr());
  T* gx = static_cast<T*>(gin.data_ptr());
  auto sample = [&](int64_t n, bool parallel, SampleScratch<C>& s) {
    s.col.resize(KK * P);
    C* gxn;
    if constexpr (std::is_same_v<T, C>) {
      gxn = gx + n * Ch * H * W;
    } else {
      s.out.resize(static_cast<size_t>(Ch * H * W));
      gxn = s.out.data();
    }
    std::fill(gxn, gxn + Ch * H * W, C(0));
    const C* gyn = as_compute<C>(gy + n * O * P, O * P, s.grad);
    for (int64_t g = 0; g < G; ++g) {
      gemm<C>(true, false, KK, P, Og, w + g * Og * KK, KK, gyn + g * Og * P, P, s.col.data(), P, false, parallel);
      col2im(s.col.data(), Cg, H, W, kh, kw, OH, OW, p, gxn + g * Cg * H * W);
    }
    if constexpr (!std::is_same_v<T, C>)
      for (int64_t i = 0; i < Ch * H * W; ++i) gx[n * Ch * H * W + i] = cast<T>(gxn[i]);
  };
  for_each_sample<C>(N, sample);
}

// The weight-gradient form of Note [Small planes]: grad_W_g [Og, KK] = the sum over chunks
// of grad_y[chunk, g] [Og, chunk * P] @ im2col(x[chunk, g])^T [chunk * P, KK], one GEMM a
// chunk instead of a rank-P update of the whole gradient a sample.
template <class C>
void conv2d_backward_weight_batched(const Tensor& gw, const Tensor& gb, const Tensor& gout, const Tensor& in,
                                    const Conv2dParams& p) {
  const int64_t N = in.shape()[0], Ch = in.shape()[1], H = in.shape()[2], W = in.shape()[3];
  const int64_t O = gw.shape()[0], kh = gw.shape()[2], kw = gw.shape()[3];
  const int64_t OH = gout.shape()[2], OW = gout.shape()[3], G = p.groups;
  const int64_t Cg = Ch / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW, nb = small_plane_chunk(N, P);
  const C* x = static_cast<const C*>(in.data_ptr());
  const C* gy = static_cast<const C*>(gout.data_ptr());
  C* out = static_cast<C*>(gw.data_ptr());
  std::vector<C> ys(static_cast<size_t>(Og * nb * P)), col(static_cast<size_t>(KK * nb * P));
  for (int64_t n0 = 0; n0 < N; n0 += nb) {
    const int64_t b = std::min(nb, N - n0), cols = b * P;
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t o = 0; o < Og; ++o)
        for (int64_t j = 0; j < b; ++j) {
          const C* src = gy + ((n0 + j) * O + g * Og + o) * P;
          std::copy(src, src + P, ys.data() + o * cols + j * P);
        }
      parallel_for(0, b, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; ++j)
          im2col(x + ((n0 + j) * Ch + g * Cg) * H * W, Cg, H, W, kh, kw, OH, OW, p, col.data() + j * P, cols);
      });
      gemm<C>(false, true, Og, KK, cols, ys.data(), cols, col.data(), cols, out + g * Og * KK, KK, n0 > 0, true);
    }
  }
  if (gb.defined()) {
    C* bias = static_cast<C*>(gb.data_ptr());
    for (int64_t o = 0; o < O; ++o) {
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) acc = sum_run<double>(gy + (n * O + o) * P, P, acc);
      bias[o] = C(acc);
    }
  }
}

// grad_W_g [Og, KK] = sum over samples of grad_y[n, g] [Og, P] @ im2col(x[n, g])^T [P, KK],
// and grad_b[o] = sum of grad_y[n, o] over samples and positions. Each thread sums its
// share of the samples into its own buffer (weight, then bias); the buffers are added.
template <class T, class C = compute_t<T>>
void conv2d_backward_weight_typed(const Tensor& gw, const Tensor& gb, const Tensor& gout, const Tensor& in,
                                  const Conv2dParams& p) {
  const int64_t N = in.shape()[0], Ch = in.shape()[1], H = in.shape()[2], W = in.shape()[3];
  const int64_t O = gw.shape()[0], kh = gw.shape()[2], kw = gw.shape()[3];
  const int64_t OH = gout.shape()[2], OW = gout.shape()[3], G = p.groups;
  const int64_t Cg = Ch / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW;
  if constexpr (std::is_same_v<T, C>) {
    if (P < kSmallPlane && N > 1) return conv2d_backward_weight_batched<C>(gw, gb, gout, in, p);
  }
  const T* x = static_cast<const T*>(in.data_ptr());
  const T* gy = static_cast<const T*>(gout.data_ptr());
  const bool direct = kh == 1 && kw == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.padding[0] == 0 &&
                      p.padding[1] == 0;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(num_threads(), N));
  const int64_t nw = gw.numel();
  std::vector<std::vector<C>> partial(parts, std::vector<C>(nw + O, C(0)));
  parallel_for(0, parts, 1, [&](int64_t b, int64_t e) {
    SampleScratch<C> s;
    for (int64_t t = b; t < e; ++t)
      for (int64_t n = N * t / parts; n < N * (t + 1) / parts; ++n) {
        const C* gyn = as_compute<C>(gy + n * O * P, O * P, s.grad);
        for (int64_t g = 0; g < G; ++g) {
          const C* xg = as_compute<C>(x + (n * Ch + g * Cg) * H * W, Cg * H * W, s.in);
          const C* cols = xg;
          if (!direct) {
            s.col.resize(KK * P);
            im2col(xg, Cg, H, W, kh, kw, OH, OW, p, s.col.data());
            cols = s.col.data();
          }
          gemm<C>(false, true, Og, KK, P, gyn + g * Og * P, P, cols, P, partial[t].data() + g * Og * KK, KK, true,
                  parts == 1);
          if (gb.defined())
            for (int64_t o = g * Og; o < (g + 1) * Og; ++o) partial[t][nw + o] += C(sum_run<double>(gyn + o * P, P));
        }
      }
  });
  T* out = static_cast<T*>(gw.data_ptr());
  T* bias = gb.defined() ? static_cast<T*>(gb.data_ptr()) : nullptr;
  for (int64_t i = 0; i < nw + (bias ? O : 0); ++i) {
    C acc = 0;
    for (int64_t t = 0; t < parts; ++t) acc += partial[t][i];
    (i < nw ? out[i] : bias[i - nw]) = cast<T>(acc);
  }
}

void conv2d_backward_input_kernel(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p) {
  const int64_t G = p.groups;
  if (use_winograd(p, weight.shape()[2], weight.shape()[3], weight.shape()[0] / G, gin.shape()[1] / G))
    return winograd_conv2d_backward_input(gin, gout, weight, p);
  by_float_dtype(gin.dtype(), "conv2d_backward_input",
                 [&](auto v) { conv2d_backward_input_typed<decltype(v)>(gin, gout, weight, p); });
}

void conv2d_backward_weight_kernel(const Tensor& gw, const Tensor& gb, const Tensor& gout, const Tensor& in,
                                   const Conv2dParams& p) {
  const int64_t G = p.groups;
  if (use_winograd(p, gw.shape()[2], gw.shape()[3], in.shape()[1] / G, gw.shape()[0] / G))
    return winograd_conv2d_backward_weight(gw, gb, gout, in, p);
  by_float_dtype(gw.dtype(), "conv2d_backward_weight",
                 [&](auto v) { conv2d_backward_weight_typed<decltype(v)>(gw, gb, gout, in, p); });
}

}  // namespace

void set_conv_variant(ConvVariant v) { g_variant.store(v); }
ConvVariant conv_variant() { return g_variant.load(); }

ConvVariant parse_conv_variant(std::string_view name) {
  if (name == "auto") return ConvVariant::Auto;
  if (name == "im2col") return ConvVariant::Im2col;
  if (name == "winograd") return ConvVariant::Winograd;
  EMBER_FAIL("conv2d: unknown variant '", name, "' (expected auto, im2col or winograd)");
}

void register_conv() {
  conv2d_stub.set(DeviceType::CPU, conv2d_kernel);
  conv2d_backward_input_stub.set(DeviceType::CPU, conv2d_backward_input_kernel);
  conv2d_backward_weight_stub.set(DeviceType::CPU, conv2d_backward_weight_kernel);
}

}  // namespace ember::kernels::cpu

namespace ember::kernels {

// im2col's scratch is per-thread std::vectors, outside the allocator: only Winograd's counts.
std::vector<std::size_t> cpu_conv2d_scratch(ConvPass pass, const Shape& in, const Shape& weight, const Shape& out,
                                            DType dtype, bool bias, const Conv2dParams& p) {
  const int64_t G = p.groups, cin = in[1] / G, cout = weight[0] / G;
  const bool swapped = pass == ConvPass::kBackwardInput;  // it convolves from the outputs to the inputs
  if (!cpu::use_winograd(p, weight[2], weight[3], swapped ? cout : cin, swapped ? cin : cout)) return {};
  return cpu::winograd_scratch(pass, in, weight, out, dtype, p);
}

}  // namespace ember::kernels
