// CPU conv2d forward (im2col + GEMM) and 2-D max/avg pooling forward, NCHW, contiguous
// inputs (core ensures it). conv2d does 2*N*O*OH*OW*(C/groups)*kh*kw flops; im2col
// writes C*kh*kw*OH*OW values per sample, which a 1x1 stride-1 unpadded conv skips.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

// Output columns [lo, hi) of a kernel tap at input offset `shift` whose input column
// ow * stride + shift lies inside [0, W).
inline void inside_columns(int64_t OW, int64_t W, int64_t stride, int64_t shift, int64_t& lo, int64_t& hi) {
  lo = 0;
  hi = OW;
  while (lo < OW && lo * stride + shift < 0) ++lo;
  while (hi > lo && (hi - 1) * stride + shift >= W) --hi;
}

// col [C * kh * kw, OH * OW] from one sample's x [C, H, W]; padding reads as zero.
template <class T>
void im2col(const T* x, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t OH, int64_t OW,
            const Conv2dParams& p, T* col) {
  const bool flat = p.stride[0] == 1 && p.stride[1] == 1 && OW == W;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ki = 0; ki < kh; ++ki)
      for (int64_t kj = 0; kj < kw; ++kj) {
        T* row = col + ((c * kh + ki) * kw + kj) * OH * OW;
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
template <class T>
void col2im(const T* col, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t OH, int64_t OW,
            const Conv2dParams& p, T* x) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ki = 0; ki < kh; ++ki)
      for (int64_t kj = 0; kj < kw; ++kj) {
        const T* row = col + ((c * kh + ki) * kw + kj) * OH * OW;
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

// Runs sample(n, parallel, col) for n in [0, N): samples go to threads (with
// single-threaded GEMMs) when there are at least as many as threads, else they run one
// after another with threaded GEMMs. `col` is the calling thread's scratch buffer.
template <class T, class F>
void for_each_sample(int64_t N, const F& sample) {
  if (N >= num_threads()) {
    parallel_for(0, N, 1, [&](int64_t b, int64_t e) {
      std::vector<T> col;
      for (int64_t n = b; n < e; ++n) sample(n, false, col);
    });
  } else {
    std::vector<T> col;
    for (int64_t n = 0; n < N; ++n) sample(n, true, col);
  }
}

template <class T>
void conv2d_typed(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  const int64_t N = in.shape()[0], C = in.shape()[1], H = in.shape()[2], W = in.shape()[3];
  const int64_t O = weight.shape()[0], kh = weight.shape()[2], kw = weight.shape()[3];
  const int64_t OH = out.shape()[2], OW = out.shape()[3], G = p.groups;
  const int64_t Cg = C / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW;
  const T* x = static_cast<const T*>(in.data_ptr());
  const T* w = static_cast<const T*>(weight.data_ptr());
  const T* bptr = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
  T* y = static_cast<T*>(out.data_ptr());
  const bool direct = kh == 1 && kw == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.padding[0] == 0 &&
                      p.padding[1] == 0;

  auto sample = [&](int64_t n, bool parallel, std::vector<T>& col) {
    for (int64_t g = 0; g < G; ++g) {
      const T* xg = x + (n * C + g * Cg) * H * W;
      T* yg = y + (n * O + g * Og) * P;
      const T* cols = xg;
      if (!direct) {
        col.resize(KK * P);
        im2col(xg, Cg, H, W, kh, kw, OH, OW, p, col.data());
        cols = col.data();
      }
      for (int64_t o = 0; o < Og; ++o) std::fill(yg + o * P, yg + (o + 1) * P, bptr ? bptr[g * Og + o] : T(0));
      gemm<T>(false, false, Og, P, KK, w + g * Og * KK, KK, cols, P, yg, P, true, parallel);
    }
  };
  for_each_sample<T>(N, sample);
}

void conv2d_kernel(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  if (in.dtype() == DType::Float32) return conv2d_typed<float>(out, in, weight, bias, p);
  if (in.dtype() == DType::Float64) return conv2d_typed<double>(out, in, weight, bias, p);
  EMBER_FAIL("conv2d kernel: dtype ", dtype_name(in.dtype()), " is not supported on the cpu");
}

// grad_x[n, g] = col2im(W_g^T [KK, Og] @ grad_y[n, g] [Og, P]); samples go to threads.
template <class T>
void conv2d_backward_input_typed(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p) {
  const int64_t N = gin.shape()[0], C = gin.shape()[1], H = gin.shape()[2], W = gin.shape()[3];
  const int64_t O = weight.shape()[0], kh = weight.shape()[2], kw = weight.shape()[3];
  const int64_t OH = gout.shape()[2], OW = gout.shape()[3], G = p.groups;
  const int64_t Cg = C / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW;
  const T* w = static_cast<const T*>(weight.data_ptr());
  const T* gy = static_cast<const T*>(gout.data_ptr());
  T* gx = static_cast<T*>(gin.data_ptr());
  std::fill(gx, gx + gin.numel(), T(0));
  auto sample = [&](int64_t n, bool parallel, std::vector<T>& col) {
    col.resize(KK * P);
    for (int64_t g = 0; g < G; ++g) {
      gemm<T>(true, false, KK, P, Og, w + g * Og * KK, KK, gy + (n * O + g * Og) * P, P, col.data(), P, false, parallel);
      col2im(col.data(), Cg, H, W, kh, kw, OH, OW, p, gx + (n * C + g * Cg) * H * W);
    }
  };
  for_each_sample<T>(N, sample);
}

// grad_W_g [Og, KK] = sum over samples of grad_y[n, g] [Og, P] @ im2col(x[n, g])^T [P, KK].
// Each thread sums its share of the samples into its own buffer; the buffers are added.
template <class T>
void conv2d_backward_weight_typed(const Tensor& gw, const Tensor& gout, const Tensor& in, const Conv2dParams& p) {
  const int64_t N = in.shape()[0], C = in.shape()[1], H = in.shape()[2], W = in.shape()[3];
  const int64_t O = gw.shape()[0], kh = gw.shape()[2], kw = gw.shape()[3];
  const int64_t OH = gout.shape()[2], OW = gout.shape()[3], G = p.groups;
  const int64_t Cg = C / G, Og = O / G, KK = Cg * kh * kw, P = OH * OW;
  const T* x = static_cast<const T*>(in.data_ptr());
  const T* gy = static_cast<const T*>(gout.data_ptr());
  const bool direct = kh == 1 && kw == 1 && p.stride[0] == 1 && p.stride[1] == 1 && p.padding[0] == 0 &&
                      p.padding[1] == 0;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(num_threads(), N));
  std::vector<std::vector<T>> partial(parts, std::vector<T>(gw.numel(), T(0)));
  parallel_for(0, parts, 1, [&](int64_t b, int64_t e) {
    std::vector<T> col;
    for (int64_t t = b; t < e; ++t)
      for (int64_t n = N * t / parts; n < N * (t + 1) / parts; ++n)
        for (int64_t g = 0; g < G; ++g) {
          const T* xg = x + (n * C + g * Cg) * H * W;
          const T* cols = xg;
          if (!direct) {
            col.resize(KK * P);
            im2col(xg, Cg, H, W, kh, kw, OH, OW, p, col.data());
            cols = col.data();
          }
          gemm<T>(false, true, Og, KK, P, gy + (n * O + g * Og) * P, P, cols, P, partial[t].data() + g * Og * KK, KK,
                  true, parts == 1);
        }
  });
  T* out = static_cast<T*>(gw.data_ptr());
  for (int64_t i = 0; i < gw.numel(); ++i) {
    T acc = 0;
    for (int64_t t = 0; t < parts; ++t) acc += partial[t][i];
    out[i] = acc;
  }
}

void conv2d_backward_input_kernel(const Tensor& gin, const Tensor& gout, const Tensor& weight, const Conv2dParams& p) {
  if (gin.dtype() == DType::Float32) return conv2d_backward_input_typed<float>(gin, gout, weight, p);
  if (gin.dtype() == DType::Float64) return conv2d_backward_input_typed<double>(gin, gout, weight, p);
  EMBER_FAIL("conv2d_backward_input kernel: dtype ", dtype_name(gin.dtype()), " is not supported on the cpu");
}

void conv2d_backward_weight_kernel(const Tensor& gw, const Tensor& gout, const Tensor& in, const Conv2dParams& p) {
  if (gw.dtype() == DType::Float32) return conv2d_backward_weight_typed<float>(gw, gout, in, p);
  if (gw.dtype() == DType::Float64) return conv2d_backward_weight_typed<double>(gw, gout, in, p);
  EMBER_FAIL("conv2d_backward_weight kernel: dtype ", dtype_name(gw.dtype()), " is not supported on the cpu");
}

// Runs f(plane_in, plane_out, plane_index) for every (n, c) plane in parallel.
template <class T, class F>
void for_each_plane(const Tensor& out, const Tensor& in, const F& f) {
  const int64_t planes = in.shape()[0] * in.shape()[1];
  const int64_t hw = in.shape()[2] * in.shape()[3], ohw = out.shape()[2] * out.shape()[3];
  const T* x = static_cast<const T*>(in.data_ptr());
  T* y = static_cast<T*>(out.data_ptr());
  parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(hw, 1)), [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) f(x + pl * hw, y + pl * ohw, pl);
  });
}

// One output row of the 2x2 / stride-2 max pool: y[ow] and the index in the plane of
// the first tap holding the maximum (base + offset). Every choice hangs on one ordered
// comparison and the index is chosen by arithmetic, so that GCC neither branches (the
// winning tap is random: a branch per tap made this 15% of a CNN epoch) nor refuses to
// vectorize. A NaN, which must win, is only counted; the caller redoes such a row.
template <class T, class C>
bool max_pool_2x2_row_fast(const T* r0, const T* r1, T* y, int64_t* idx, int64_t n, int64_t W, int64_t base) {
  int32_t nans = 0;
  for (int64_t ow = 0; ow < n; ++ow) {
    const C a = static_cast<C>(r0[2 * ow]), b = static_cast<C>(r0[2 * ow + 1]);
    const C c = static_cast<C>(r1[2 * ow]), d = static_cast<C>(r1[2 * ow + 1]);
    nans += (a != a) + (b != b) + (c != c) + (d != d);
    const bool tb = a < b, td = c < d;
    const C ab = tb ? b : a, cd = td ? d : c;
    const int64_t oab = tb, ocd = W + td;
    const bool tcd = ab < cd;
    y[ow] = static_cast<T>(tcd ? cd : ab);
    idx[ow] = base + 2 * ow + oab + (ocd - oab) * int64_t(tcd);
  }
  return nans == 0;
}

// The same row with NaNs: the first NaN wins.
template <class T, class C>
void max_pool_2x2_row_nan(const T* r0, const T* r1, T* y, int64_t* idx, int64_t n, int64_t W, int64_t base) {
  for (int64_t ow = 0; ow < n; ++ow) {
    const C v[4] = {static_cast<C>(r0[2 * ow]), static_cast<C>(r0[2 * ow + 1]), static_cast<C>(r1[2 * ow]),
                    static_cast<C>(r1[2 * ow + 1])};
    const int64_t at[4] = {0, 1, W, W + 1};
    int k = 0;
    for (int j = 1; j < 4; ++j)
      if (v[k] == v[k] && (v[j] != v[j] || v[j] > v[k])) k = j;
    y[ow] = static_cast<T>(v[k]);
    idx[ow] = base + 2 * ow + at[k];
  }
}

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& in, const Pool2dParams& p) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("max_pool2d kernel: dtype ", dtype_name(in.dtype()), " is not supported");
    } else {
      using C = compute_t<T>;
      const int64_t H = in.shape()[2], W = in.shape()[3], OH = out.shape()[2], OW = out.shape()[3];
      int64_t* ind = indices.defined() ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
      // The taps of a window that fall inside the input: [lo, hi) of i with
      // 0 <= start + i * dilation < size (no division in the common dilation-1 case).
      auto taps = [](int64_t start, int64_t k, int64_t d, int64_t size, int64_t& lo, int64_t& hi) {
        if (d == 1) {
          lo = std::max<int64_t>(0, -start);
          hi = std::min<int64_t>(k, size - start);
        } else {
          lo = start >= 0 ? 0 : (-start + d - 1) / d;
          hi = std::min<int64_t>(k, start < size ? (size - start + d - 1) / d : 0);
        }
      };
      const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
      const int64_t ph = p.padding[0], pw = p.padding[1], dh = p.dilation[0], dw = p.dilation[1];
      const bool two_by_two = kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && dh == 1 && dw == 1;
      if (two_by_two) {
        // The CNNs' 2x2 / stride-2 pool: four loads per output, no window arithmetic.
        for_each_plane<T>(out, in, [&](const T* x, T* y, int64_t pl) {
          std::vector<int64_t> scratch(ind ? 0 : OW);  // indices nobody asked for
          for (int64_t oh = 0; oh < OH; ++oh) {
            int64_t* ir = ind ? ind + (pl * OH + oh) * OW : scratch.data();
            const T *r0 = x + 2 * oh * W, *r1 = r0 + W;
            if (!max_pool_2x2_row_fast<T, C>(r0, r1, y + oh * OW, ir, OW, W, 2 * oh * W))
              max_pool_2x2_row_nan<T, C>(r0, r1, y + oh * OW, ir, OW, W, 2 * oh * W);
          }
        });
        return;
      }
      for_each_plane<T>(out, in, [&](const T* x, T* y, int64_t pl) {
        int64_t* plane_ind = ind ? ind + pl * OH * OW : nullptr;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t h0 = oh * sh - ph;
          int64_t i0, i1;
          taps(h0, kh, dh, H, i0, i1);
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t w0 = ow * sw - pw;
            int64_t j0, j1;
            taps(w0, kw, dw, W, j0, j1);
            if (i0 >= i1 || j0 >= j1) {  // no tap inside the input (core's checks prevent it)
              y[oh * OW + ow] = static_cast<T>(-std::numeric_limits<C>::infinity());
              if (plane_ind) plane_ind[oh * OW + ow] = 0;
              continue;
            }
            // Pass 1: the maximum (max instructions, no branches: which tap wins is
            // unpredictable, and a mispredicted branch per tap made this 4x slower) and
            // whether a NaN is present. Pass 2: the first tap holding it.
            C best = -std::numeric_limits<C>::infinity();
            bool nan = false;
            for (int64_t i = i0; i < i1; ++i) {
              const T* row = x + (h0 + i * dh) * W + w0;
              for (int64_t j = j0; j < j1; ++j) {
                const C v = static_cast<C>(row[j * dw]);
                best = v > best ? v : best;
                nan |= v != v;
              }
            }
            int64_t arg = -1;
            for (int64_t i = i0; i < i1 && arg < 0; ++i) {
              const T* row = x + (h0 + i * dh) * W + w0;
              for (int64_t j = j0; j < j1; ++j) {
                const C v = static_cast<C>(row[j * dw]);
                if (nan ? v != v : v == best) {
                  arg = (h0 + i * dh) * W + w0 + j * dw;
                  break;
                }
              }
            }
            if (nan) best = std::numeric_limits<C>::quiet_NaN();
            y[oh * OW + ow] = static_cast<T>(best);
            if (plane_ind) plane_ind[oh * OW + ow] = arg;
          }
        }
      });
    }
  });
}

// grad_input [N, C, H, W] = gradients of the outputs added at their argmax positions;
// planes go to threads (no two planes share an element).
void max_pool2d_backward_kernel(const Tensor& gin, const Tensor& gout, const Tensor& indices) {
  visit_dtype(gin.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("max_pool2d_backward kernel: dtype ", dtype_name(gin.dtype()), " is not supported");
    } else {
      using C = compute_t<T>;
      const int64_t planes = gin.shape()[0] * gin.shape()[1], hw = gin.shape()[2] * gin.shape()[3];
      const int64_t ohw = gout.shape()[2] * gout.shape()[3];
      const T* gy = static_cast<const T*>(gout.data_ptr());
      const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
      T* gx = static_cast<T*>(gin.data_ptr());
      parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(hw, 1)), [&](int64_t b, int64_t e) {
        for (int64_t pl = b; pl < e; ++pl) {
          T* x = gx + pl * hw;
          std::fill(x, x + hw, T(0));
          for (int64_t o = 0; o < ohw; ++o) {
            T& dst = x[idx[pl * ohw + o]];
            dst = static_cast<T>(static_cast<C>(dst) + static_cast<C>(gy[pl * ohw + o]));
          }
        }
      });
    }
  });
}

// The clipped window [h0, h1) x [w0, w1) of output (oh, ow) and its divisor, PyTorch's
// rule: the window clipped to the padded input for count_include_pad, else to the input.
struct AvgWindow {
  int64_t h0, h1, w0, w1, divisor;
};
AvgWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const Pool2dParams& p) {
  int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
  int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]), w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H);
  w1 = std::min(w1, W);
  const int64_t div = p.divisor_override ? p.divisor_override : p.count_include_pad ? padded : (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, div};
}

void avg_pool2d_backward_kernel(const Tensor& gin, const Tensor& gout, const Pool2dParams& p) {
  visit_dtype(gin.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("avg_pool2d_backward kernel: dtype ", dtype_name(gin.dtype()), " is not supported");
    } else {
      using C = compute_t<T>;
      const int64_t H = gin.shape()[2], W = gin.shape()[3], OH = gout.shape()[2], OW = gout.shape()[3];
      const int64_t planes = gin.shape()[0] * gin.shape()[1];
      const T* gy = static_cast<const T*>(gout.data_ptr());
      T* gx = static_cast<T*>(gin.data_ptr());
      parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(H * W, 1)), [&](int64_t b, int64_t e) {
        for (int64_t pl = b; pl < e; ++pl) {
          T* x = gx + pl * H * W;
          const T* y = gy + pl * OH * OW;
          std::vector<C> acc(H * W, C(0));
          for (int64_t oh = 0; oh < OH; ++oh)
            for (int64_t ow = 0; ow < OW; ++ow) {
              const AvgWindow win = avg_window(oh, ow, H, W, p);
              if (win.divisor <= 0) continue;
              const C v = static_cast<C>(y[oh * OW + ow]) / static_cast<C>(win.divisor);
              for (int64_t h = win.h0; h < win.h1; ++h)
                for (int64_t w = win.w0; w < win.w1; ++w) acc[h * W + w] += v;
            }
          for (int64_t i = 0; i < H * W; ++i) x[i] = static_cast<T>(acc[i]);
        }
      });
    }
  });
}

void avg_pool2d_kernel(const Tensor& out, const Tensor& in, const Pool2dParams& p) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("avg_pool2d kernel: dtype ", dtype_name(in.dtype()), " is not supported");
    } else {
      using C = compute_t<T>;
      const int64_t H = in.shape()[2], W = in.shape()[3], OH = out.shape()[2], OW = out.shape()[3];
      for_each_plane<T>(out, in, [&](const T* x, T* y, int64_t) {
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const AvgWindow win = avg_window(oh, ow, H, W, p);
            C sum = 0;
            for (int64_t h = win.h0; h < win.h1; ++h)
              for (int64_t w = win.w0; w < win.w1; ++w) sum += static_cast<C>(x[h * W + w]);
            y[oh * OW + ow] = static_cast<T>(win.divisor > 0 ? sum / static_cast<C>(win.divisor) : C(0));
          }
      });
    }
  });
}

}  // namespace

void register_conv_pool() {
  conv2d_stub.set(DeviceType::CPU, conv2d_kernel);
  max_pool2d_stub.set(DeviceType::CPU, max_pool2d_kernel);
  avg_pool2d_stub.set(DeviceType::CPU, avg_pool2d_kernel);
  avg_pool2d_backward_stub.set(DeviceType::CPU, avg_pool2d_backward_kernel);
  max_pool2d_backward_stub.set(DeviceType::CPU, max_pool2d_backward_kernel);
  conv2d_backward_input_stub.set(DeviceType::CPU, conv2d_backward_input_kernel);
  conv2d_backward_weight_stub.set(DeviceType::CPU, conv2d_backward_weight_kernel);
}

}  // namespace ember::kernels::cpu
