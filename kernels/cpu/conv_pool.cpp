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
      for_each_plane<T>(out, in, [&](const T* x, T* y, int64_t pl) {
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
            C best = -std::numeric_limits<C>::infinity();
            int64_t arg = -1;
            for (int64_t i = 0; i < p.kernel[0]; ++i) {
              const int64_t h = h0 + i * p.dilation[0];
              if (h < 0 || h >= H) continue;
              for (int64_t j = 0; j < p.kernel[1]; ++j) {
                const int64_t w = w0 + j * p.dilation[1];
                if (w < 0 || w >= W) continue;
                const C v = static_cast<C>(x[h * W + w]);
                if (arg < 0 || v > best || (v != v && best == best)) {
                  best = v;
                  arg = h * W + w;
                }
              }
            }
            y[oh * OW + ow] = static_cast<T>(best);
            if (ind) ind[pl * OH * OW + oh * OW + ow] = arg;
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
  conv2d_backward_input_stub.set(DeviceType::CPU, conv2d_backward_input_kernel);
  conv2d_backward_weight_stub.set(DeviceType::CPU, conv2d_backward_weight_kernel);
}

}  // namespace ember::kernels::cpu
