// CPU 2-D max and average pooling, forward and backward, NCHW with contiguous inputs
// (core ensures it). Planes (one channel of one sample) go to threads.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/common/pool_ops.h"
#include "kernels/common/unary_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vec.h"

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

// Note [Max-pool indices]. max_pool2d's kernel records where each maximum came from in
// one of two forms: int64 indices into the input plane (PyTorch's, for
// max_pool2d_with_indices), or a uint8 code per output, the tap's position i * kw + j in
// its window, which is all its backward needs when nobody asked for the indices: one
// byte instead of eight per output saved for backward. Without either (no gradient
// needed) only the values are computed.
enum class Argmax { kNone, kCode, kPlane };

// Where each tap goes: the first maximum in the window's row-major order wins, and a NaN
// beats everything but an earlier NaN (PyTorch's rule, shared with the CUDA kernels).
template <class C>
inline bool replaces(C v, C best) {
  return ops::pool_replaces(v, best);
}

// One output row of the 2x2 / stride-2 pool from input rows r0, r1. Branch-free: which
// tap wins is random, and a branch per tap made this 15% of a CNN epoch; selects let GCC
// vectorize the row.
template <class T, class C, Argmax K>
void max_pool_2x2_row(const T* r0, const T* r1, T* y, uint8_t* code, int64_t* plane_idx, int64_t n, int64_t W,
                      int64_t base, bool relu) {
  for (int64_t ow = 0; ow < n; ++ow) {
    const C a = static_cast<C>(r0[2 * ow]), b = static_cast<C>(r0[2 * ow + 1]);
    const C c = static_cast<C>(r1[2 * ow]), d = static_cast<C>(r1[2 * ow + 1]);
    C m = a;
    int32_t k = 0;
    bool t = replaces(b, m);
    m = t ? b : m;
    k = t ? 1 : k;
    t = replaces(c, m);
    m = t ? c : m;
    k = t ? 2 : k;
    t = replaces(d, m);
    m = t ? d : m;
    k = t ? 3 : k;
    y[ow] = static_cast<T>(relu ? ops::Relu{}(m) : m);
    if constexpr (K == Argmax::kCode) code[ow] = static_cast<uint8_t>(k);
    if constexpr (K == Argmax::kPlane) plane_idx[ow] = base + 2 * ow + (k & 1) + (k >> 1) * W;
  }
}

#if EMBER_CPU_VEC
// The float32 2x2 rows with the vector type (kernels/cpu/vec.h; 16 lanes on AVX-512, 8 on
// AVX2): kLanes outputs per step from two loads per input row, split into even and odd
// taps. A row's end is a last whole vector overlapping the one before (chunk_start), or
// masked loads and stores in a row shorter than a vector (the CNN's rows are 14 and 7
// outputs long). Only moves, compares and selects (and relu's max), so both widths give
// the bits of max_pool_2x2_row. Before the AVX2 build had this path it ran that scalar
// loop: on the project's AMD EPYC (Zen 4) with -march=x86-64-v3, bench_layers' pool1
// (the CNN's first pool, 1 thread, alternating runs) took 1.9 ms forward and 5.7 ms
// backward against 0.5 and 0.55 ms here, and the pools' share of a CNN epoch fell from
// 34% to 11% (--profile --limit-train 12800 --threads 1).
template <Argmax K>
void max_pool_2x2_row_vec(const float* r0, const float* r1, float* y, uint8_t* code, int64_t n, bool relu) {
  using namespace simd;
  for (int64_t c0 = 0; c0 < n; c0 += kLanes) {
    const int64_t c = chunk_start(c0, n), m = std::min<int64_t>(kLanes, n - c);
    const Vec a0 = load_n(r0 + 2 * c, 2 * m), a1 = load_n(r0 + 2 * c + kLanes, 2 * m - kLanes);
    const Vec b0 = load_n(r1 + 2 * c, 2 * m), b1 = load_n(r1 + 2 * c + kLanes, 2 * m - kLanes);
    const Vec taps[4] = {even(a0, a1), odd(a0, a1), even(b0, b1), odd(b0, b1)};
    Vec best = taps[0];
    IVec k = iset1(0);
    for (int t = 1; t < 4; ++t) {
      // replaces(): greater, or a NaN over a number
      const Mask r = greater(taps[t], best) | and_not(is_nan(taps[t]), is_nan(best));
      best = select(r, taps[t], best);
      k = select(r, iset1(t), k);
    }
    if (relu) best = max(zero(), best);  // ops::Relu: a NaN (second operand) passes
    store_n(y + c, best, m);
    if constexpr (K == Argmax::kCode) store_u8(code + c, k, m);
  }
}

// Gradient rows 2oh and 2oh+1 of the 2x2 pool: each output's gradient at the tap its code
// names, zero at the other three.
void max_pool_2x2_backward_row_vec(const float* g, const uint8_t* code, float* r0, float* r1, int64_t n) {
  using namespace simd;
  for (int64_t c0 = 0; c0 < n; c0 += kLanes) {
    const int64_t c = chunk_start(c0, n), m = std::min<int64_t>(kLanes, n - c);
    const Vec v = load_n(g + c, m);
    const IVec k = load_u8(code + c, m);
    Vec tap[4];
    for (int t = 0; t < 4; ++t) tap[t] = select(equal(k, iset1(t)), v, zero());
    store_n(r0 + 2 * c, interleave_lo(tap[0], tap[1]), 2 * m);
    store_n(r0 + 2 * c + kLanes, interleave_hi(tap[0], tap[1]), 2 * m - kLanes);
    store_n(r1 + 2 * c, interleave_lo(tap[2], tap[3]), 2 * m);
    store_n(r1 + 2 * c + kLanes, interleave_hi(tap[2], tap[3]), 2 * m - kLanes);
  }
}
#endif

template <class T, Argmax K>
void max_pool_typed(const Tensor& out, const Tensor& indices, const Tensor& in, const Pool2dParams& p) {
  using C = compute_t<T>;
  const int64_t H = in.shape()[2], W = in.shape()[3], OH = out.shape()[2], OW = out.shape()[3];
  uint8_t* codes = K == Argmax::kCode ? static_cast<uint8_t*>(indices.data_ptr()) : nullptr;
  int64_t* plane_idx = K == Argmax::kPlane ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1], dh = p.dilation[0], dw = p.dilation[1];
  // The fast path needs every window inside the input: with ceil_mode, an odd H or W
  // gives a last row or column of windows that hang over the edge (they take the
  // general path's clipped windows).
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && dh == 1 && dw == 1 && 2 * OH <= H &&
      2 * OW <= W) {
    // The CNNs' 2x2 / stride-2 pool: four loads per output, no window arithmetic.
    for_each_plane<T>(out, in, [&](const T* x, T* y, int64_t pl) {
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t o = (pl * OH + oh) * OW;
#if EMBER_CPU_VEC
        if constexpr (std::is_same_v<T, float> && K != Argmax::kPlane) {
          max_pool_2x2_row_vec<K>(x + 2 * oh * W, x + (2 * oh + 1) * W, y + oh * OW, codes ? codes + o : nullptr, OW,
                                     p.relu);
          continue;
        }
#endif
        max_pool_2x2_row<T, C, K>(x + 2 * oh * W, x + (2 * oh + 1) * W, y + oh * OW, codes ? codes + o : nullptr,
                                  plane_idx ? plane_idx + o : nullptr, OW, W, 2 * oh * W, p.relu);
      }
    });
    return;
  }
  // The taps of a window inside the input: [lo, hi) of i with 0 <= start + i * d < size.
  auto taps = [](int64_t start, int64_t k, int64_t d, int64_t size, int64_t& lo, int64_t& hi) {
    lo = start >= 0 ? 0 : (-start + d - 1) / d;
    hi = std::min<int64_t>(k, start < size ? (size - start + d - 1) / d : 0);
  };
  for_each_plane<T>(out, in, [&](const T* x, T* y, int64_t pl) {
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = oh * sh - ph;
      int64_t i0, i1;
      taps(h0, kh, dh, H, i0, i1);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = ow * sw - pw, o = (pl * OH + oh) * OW + ow;
        int64_t j0, j1;
        taps(w0, kw, dw, W, j0, j1);
        C best = -std::numeric_limits<C>::infinity();
        int64_t bi = i0, bj = j0;  // core's checks leave every window at least one tap
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) {
            const C v = static_cast<C>(x[(h0 + i * dh) * W + w0 + j * dw]);
            if ((i == i0 && j == j0) || replaces(v, best)) {
              best = v;
              bi = i;
              bj = j;
            }
          }
        y[oh * OW + ow] = static_cast<T>(p.relu ? ops::Relu{}(best) : best);
        if constexpr (K == Argmax::kCode) codes[o] = static_cast<uint8_t>(bi * kw + bj);
        if constexpr (K == Argmax::kPlane) plane_idx[o] = (h0 + bi * dh) * W + w0 + bj * dw;
      }
    }
  });
}

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& in, const Pool2dParams& p) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("max_pool2d kernel: dtype ", dtype_name(in.dtype()), " is not supported");
    } else if (!indices.defined()) {
      max_pool_typed<T, Argmax::kNone>(out, indices, in, p);
    } else if (indices.dtype() == kUInt8) {
      max_pool_typed<T, Argmax::kCode>(out, indices, in, p);
    } else {
      max_pool_typed<T, Argmax::kPlane>(out, indices, in, p);
    }
  });
}

// grad_input [N, C, H, W] = each output's gradient added at its maximum's position;
// planes go to threads (no two planes share an element). With codes of a 2x2 / stride-2
// pool every input element is written once, with no zeroing pass.
void max_pool2d_backward_kernel(const Tensor& gin, const Tensor& gout, const Tensor& indices, const Pool2dParams& p) {
  visit_dtype(gin.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("max_pool2d_backward kernel: dtype ", dtype_name(gin.dtype()), " is not supported");
    } else {
      using C = compute_t<T>;
      const int64_t planes = gin.shape()[0] * gin.shape()[1], H = gin.shape()[2], W = gin.shape()[3];
      const int64_t OH = gout.shape()[2], OW = gout.shape()[3], ohw = OH * OW;
      const T* gy = static_cast<const T*>(gout.data_ptr());
      T* gx = static_cast<T*>(gin.data_ptr());
      const bool codes = indices.dtype() == kUInt8;
      const bool two_by_two = codes && p.kernel[0] == 2 && p.kernel[1] == 2 && p.stride[0] == 2 && p.stride[1] == 2 &&
                              p.padding[0] == 0 && p.padding[1] == 0 && p.dilation[0] == 1 && p.dilation[1] == 1 &&
                              2 * OH <= H && 2 * OW <= W;  // no window hangs over (ceil_mode)
      parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(H * W, 1)), [&](int64_t b, int64_t e) {
        for (int64_t pl = b; pl < e; ++pl) {
          T* x = gx + pl * H * W;
          const T* g = gy + pl * ohw;
          if (two_by_two) {
            const uint8_t* k = static_cast<const uint8_t*>(indices.data_ptr()) + pl * ohw;
            for (int64_t oh = 0; oh < OH; ++oh) {
              T* r0 = x + 2 * oh * W;
              T* r1 = r0 + W;
#if EMBER_CPU_VEC
              if constexpr (std::is_same_v<T, float>) {
                max_pool_2x2_backward_row_vec(g + oh * OW, k + oh * OW, r0, r1, OW);
                if (W > 2 * OW) r0[W - 1] = r1[W - 1] = T(0);
                continue;
              }
#endif
              for (int64_t ow = 0; ow < OW; ++ow) {
                const T v = g[oh * OW + ow], z = T(0);
                const uint8_t c = k[oh * OW + ow];
                r0[2 * ow] = c == 0 ? v : z;
                r0[2 * ow + 1] = c == 1 ? v : z;
                r1[2 * ow] = c == 2 ? v : z;
                r1[2 * ow + 1] = c == 3 ? v : z;
              }
              if (W > 2 * OW) r0[W - 1] = r1[W - 1] = T(0);  // an odd last column no window covers
            }
            if (H > 2 * OH) std::fill(x + 2 * OH * W, x + H * W, T(0));
            continue;
          }
          std::fill(x, x + H * W, T(0));
          for (int64_t o = 0; o < ohw; ++o) {
            int64_t at;
            if (codes) {
              const int64_t c = static_cast<const uint8_t*>(indices.data_ptr())[pl * ohw + o];
              const int64_t oh = o / OW, ow = o % OW, i = c / p.kernel[1], j = c % p.kernel[1];
              at = (oh * p.stride[0] - p.padding[0] + i * p.dilation[0]) * W + ow * p.stride[1] - p.padding[1] +
                   j * p.dilation[1];
            } else {
              at = static_cast<const int64_t*>(indices.data_ptr())[pl * ohw + o];
            }
            x[at] = static_cast<T>(static_cast<C>(x[at]) + static_cast<C>(g[o]));
          }
        }
      });
    }
  });
}

// The clipped window [h0, h1) x [w0, w1) of output (oh, ow) and its divisor, PyTorch's
// rule (kernels/common/pool_ops.h, shared with the CUDA kernels).
ops::AvgPoolWindow avg_window(int64_t oh, int64_t ow, int64_t H, int64_t W, const Pool2dParams& p) {
  return ops::avg_pool_window(oh, ow, H, W, p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0],
                              p.padding[1], p.count_include_pad, p.divisor_override);
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
              const ops::AvgPoolWindow win = avg_window(oh, ow, H, W, p);
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
            const ops::AvgPoolWindow win = avg_window(oh, ow, H, W, p);
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
