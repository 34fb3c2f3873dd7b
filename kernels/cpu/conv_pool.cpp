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

// col [C * kh * kw, OH * OW] from one sample's x [C, H, W]; padding reads as zero.
template <class T>
void im2col(const T* x, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t OH, int64_t OW,
            const Conv2dParams& p, T* col) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ki = 0; ki < kh; ++ki)
      for (int64_t kj = 0; kj < kw; ++kj) {
        T* row = col + ((c * kh + ki) * kw + kj) * OH * OW;
        const int64_t dh = ki * p.dilation[0] - p.padding[0], dw = kj * p.dilation[1] - p.padding[1];
        // Output columns whose input column lies inside [0, W).
        int64_t ow_lo = 0, ow_hi = OW;
        while (ow_lo < OW && ow_lo * p.stride[1] + dw < 0) ++ow_lo;
        while (ow_hi > ow_lo && (ow_hi - 1) * p.stride[1] + dw >= W) --ow_hi;
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

// x [C, H, W] += col [C * kh * kw, OH * OW]: the adjoint of im2col.
template <class T>
void col2im(const T* col, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t OH, int64_t OW,
            const Conv2dParams& p, T* x) {
  for (int64_t c = 0; c < C; ++c)
    for (int64_t ki = 0; ki < kh; ++ki)
      for (int64_t kj = 0; kj < kw; ++kj) {
        const T* row = col + ((c * kh + ki) * kw + kj) * OH * OW;
        const int64_t dh = ki * p.dilation[0] - p.padding[0], dw = kj * p.dilation[1] - p.padding[1];
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t ih = oh * p.stride[0] + dh;
          if (ih < 0 || ih >= H) continue;
          T* xr = x + (c * H + ih) * W;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t iw = ow * p.stride[1] + dw;
            if (iw >= 0 && iw < W) xr[iw] += row[oh * OW + ow];
          }
        }
      }
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
      if (two_by_two && ind) {
        // The CNNs' 2x2 / stride-2 pool: four loads per output, no window arithmetic.
        for_each_plane<T>(out, in, [&](const T* x, T* y, int64_t pl) {
          int64_t* plane_ind = ind + pl * OH * OW;
          for (int64_t oh = 0; oh < OH; ++oh) {
            const T* r0 = x + 2 * oh * W;
            const T* r1 = r0 + W;
            for (int64_t ow = 0; ow < OW; ++ow) {
              const int64_t base = 2 * oh * W + 2 * ow;
              const C v[4] = {static_cast<C>(r0[2 * ow]), static_cast<C>(r0[2 * ow + 1]), static_cast<C>(r1[2 * ow]),
                              static_cast<C>(r1[2 * ow + 1])};
              const int64_t at[4] = {base, base + 1, base + W, base + W + 1};
              C best = v[0];
              int64_t arg = at[0];
              for (int k = 1; k < 4; ++k) {
                const bool take = v[k] > best || (v[k] != v[k] && best == best);
                best = take ? v[k] : best;
                arg = take ? at[k] : arg;
              }
              y[oh * OW + ow] = static_cast<T>(best);
              plane_ind[oh * OW + ow] = arg;
            }
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
