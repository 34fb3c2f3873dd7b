// CPU 2-D max and average pooling, forward and backward, NCHW with contiguous inputs
// (core ensures it). Planes (one channel of one sample) go to threads.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

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

void register_pool() {
  max_pool2d_stub.set(DeviceType::CPU, max_pool2d_kernel);
  avg_pool2d_stub.set(DeviceType::CPU, avg_pool2d_kernel);
  avg_pool2d_backward_stub.set(DeviceType::CPU, avg_pool2d_backward_kernel);
  max_pool2d_backward_stub.set(DeviceType::CPU, max_pool2d_backward_kernel);
}

}  // namespace ember::kernels::cpu
