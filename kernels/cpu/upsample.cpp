// CPU upsample2d (nearest and bilinear, PyTorch's source coordinates from
// kernels/common/upsample_ops.h) forward and backward over [N, C, H, W] planes. Planes go
// to threads; each output row and column's taps are computed once per call. The backward
// adds each output's gradient into its plane in raster order, one thread per plane, so
// the sums do not depend on the thread count; 16-bit planes accumulate in float.
#include <vector>

#include "kernels/common/upsample_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/parallel.h"

namespace ember::kernels::cpu {
namespace {

template <class C>
std::vector<ops::LinearTap<C>> taps(int64_t in, int64_t out, double scale, const Upsample2dParams& p) {
  std::vector<ops::LinearTap<C>> t(static_cast<size_t>(out));
  for (int64_t d = 0; d < out; ++d)
    if (p.bilinear)
      t[d] = ops::linear_source<C>(d, in, C(scale), p.align_corners);
    else
      t[d] = {ops::nearest_source(d, in, static_cast<float>(scale)), 0, C(1), C(0)};
  return t;
}

template <class F>
void for_floating(DType t, const char* op, F&& f) {
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>)
      EMBER_FAIL(op, " kernel: expects a floating tensor, got ", dtype_name(t));
    else
      f(tag);
  });
}

int64_t plane_grain(int64_t plane) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(plane, 1)); }

void upsample2d_kernel(const Tensor& out, const Tensor& in, const Upsample2dParams& p) {
  for_floating(in.dtype(), "upsample2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const int64_t planes = in.size(0) * in.size(1), H = in.size(2), W = in.size(3);
    const int64_t OH = out.size(2), OW = out.size(3);
    const auto th = taps<C>(H, OH, p.scale_h, p), tw = taps<C>(W, OW, p.scale_w, p);
    const T* x = static_cast<const T*>(in.data_ptr());
    T* y = static_cast<T*>(out.data_ptr());
    parallel_for(0, planes, plane_grain(OH * OW), [&](int64_t lo, int64_t hi) {
      for (int64_t pl = lo; pl < hi; ++pl) {
        const T* xp = x + pl * H * W;
        T* yp = y + pl * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const ops::LinearTap<C> r = th[oh];
          const T *x0 = xp + r.i0 * W, *x1 = xp + r.i1 * W;
          T* yr = yp + oh * OW;
          if (!p.bilinear) {
            for (int64_t ow = 0; ow < OW; ++ow) yr[ow] = x0[tw[ow].i0];
            continue;
          }
          for (int64_t ow = 0; ow < OW; ++ow) {
            const ops::LinearTap<C> c = tw[ow];
            yr[ow] = cast<T>(r.w0 * (c.w0 * cast<C>(x0[c.i0]) + c.w1 * cast<C>(x0[c.i1])) +
                             r.w1 * (c.w0 * cast<C>(x1[c.i0]) + c.w1 * cast<C>(x1[c.i1])));
          }
        }
      }
    });
  });
}

void upsample2d_backward_kernel(const Tensor& grad_in, const Tensor& grad_out, const Upsample2dParams& p) {
  for_floating(grad_in.dtype(), "upsample2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const int64_t planes = grad_in.size(0) * grad_in.size(1), H = grad_in.size(2), W = grad_in.size(3);
    const int64_t OH = grad_out.size(2), OW = grad_out.size(3);
    const auto th = taps<C>(H, OH, p.scale_h, p), tw = taps<C>(W, OW, p.scale_w, p);
    const T* gy = static_cast<const T*>(grad_out.data_ptr());
    T* gx = static_cast<T*>(grad_in.data_ptr());
    parallel_for(0, planes, plane_grain(OH * OW), [&](int64_t lo, int64_t hi) {
      std::vector<C> acc(static_cast<size_t>(H * W));
      for (int64_t pl = lo; pl < hi; ++pl) {
        std::fill(acc.begin(), acc.end(), C(0));
        const T* gp = gy + pl * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const ops::LinearTap<C> r = th[oh];
          C *a0 = acc.data() + r.i0 * W, *a1 = acc.data() + r.i1 * W;
          const T* gr = gp + oh * OW;
          if (!p.bilinear) {
            for (int64_t ow = 0; ow < OW; ++ow) a0[tw[ow].i0] += cast<C>(gr[ow]);
            continue;
          }
          for (int64_t ow = 0; ow < OW; ++ow) {
            const ops::LinearTap<C> c = tw[ow];
            const C g = cast<C>(gr[ow]);
            a0[c.i0] += r.w0 * c.w0 * g;
            a0[c.i1] += r.w0 * c.w1 * g;
            a1[c.i0] += r.w1 * c.w0 * g;
            a1[c.i1] += r.w1 * c.w1 * g;
          }
        }
        T* out = gx + pl * H * W;
        for (int64_t i = 0; i < H * W; ++i) out[i] = cast<T>(acc[i]);
      }
    });
  });
}

}  // namespace

void register_upsample() {
  upsample2d_stub.set(DeviceType::CPU, upsample2d_kernel);
  upsample2d_backward_stub.set(DeviceType::CPU, upsample2d_backward_kernel);
}

}  // namespace ember::kernels::cpu
