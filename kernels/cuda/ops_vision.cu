// The CUDA slots of the vision ops: upsample2d forward and backward (upsample.cuh) and
// group norm forward and backward (group_norm.cuh). Core has checked shapes and dtypes
// (core/ops_vision.cpp); the backward's per-plane sums live in a stream-ordered scratch.
#include "kernels/cuda/device.h"
#include "kernels/cuda/group_norm.cuh"
#include "kernels/cuda/upsample.cuh"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

template <class F>
void visit_floating(DType t, const char* op, F&& f) {
  const bool ok = t == kFloat32 || t == kFloat64 || t == kFloat16 || t == kBFloat16;
  EMBER_CHECK(ok, op, " (cuda): dtype ", dtype_name(t), " is not supported");
  visit_cuda_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_16bit_float_v<T>) f(tag);
  });
}

UpsampleGeometry geometry(const Tensor& in, const Tensor& out, const Upsample2dParams& p) {
  UpsampleGeometry g;
  g.planes = in.size(0) * in.size(1), g.H = in.size(2), g.W = in.size(3), g.OH = out.size(2), g.OW = out.size(3);
  g.bilinear = p.bilinear, g.align_corners = p.align_corners, g.scale_h = p.scale_h, g.scale_w = p.scale_w;
  return g;
}

void upsample2d_slot(const Tensor& out, const Tensor& in, const Upsample2dParams& p) {
  const OpScope scope(out);
  visit_floating(in.dtype(), "upsample2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    upsample2d_forward<T>(ptr<const T>(in), ptr<T>(out), geometry(in, out, p), scope.stream());
  });
}

void upsample2d_backward_slot(const Tensor& grad_in, const Tensor& grad_out, const Upsample2dParams& p) {
  const OpScope scope(grad_in);
  visit_floating(grad_in.dtype(), "upsample2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    upsample2d_backward<T>(ptr<const T>(grad_out), ptr<T>(grad_in), geometry(grad_in, grad_out, p), scope.stream());
  });
}

void group_norm_slot(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     const Tensor& bias, int64_t groups, double eps) {
  const OpScope scope(x);
  visit_floating(x.dtype(), "group_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    group_norm_forward<T>(ptr<const T>(x), ptr<const T>(weight), ptr<const T>(bias), ptr<T>(y), ptr<A>(mean),
                          ptr<A>(rstd), x.size(0), x.size(1), x.size(2), groups, eps, scope.stream());
  });
}

void group_norm_backward_slot(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                              const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                              int64_t groups) {
  const OpScope scope(x);
  visit_floating(x.dtype(), "group_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    const int64_t N = x.size(0), C = x.size(1);
    const Tensor sums = empty({2, N * C}, {mean.dtype(), x.device()});
    group_norm_backward<T>(ptr<const T>(dy), ptr<const T>(x), ptr<const A>(mean), ptr<const A>(rstd),
                           ptr<const T>(weight), ptr<T>(dx), ptr<T>(dweight), ptr<T>(dbias), ptr<A>(sums),
                           ptr<A>(sums) + N * C, N, C, x.size(2), groups, scope.stream());
  });
}

}  // namespace

void register_vision() {
  upsample2d_stub.set(DeviceType::CUDA, upsample2d_slot);
  upsample2d_backward_stub.set(DeviceType::CUDA, upsample2d_backward_slot);
  group_norm_stub.set(DeviceType::CUDA, group_norm_slot);
  group_norm_backward_stub.set(DeviceType::CUDA, group_norm_backward_slot);
}

}  // namespace ember::kernels::cuda
