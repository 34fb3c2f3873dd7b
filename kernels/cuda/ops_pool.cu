// The CUDA slots of 2-D max and average pooling, forward and backward (pool.cuh), on the
// current stream of the tensors' device. NCHW, contiguous (core ensures it); floating
// dtypes, 16-bit ones computed in float32 as on the CPU.
#include "kernels/cuda/device.h"
#include "kernels/cuda/pool.cuh"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

// The geometry of input `in` [N, C, H, W] pooled into `out` [N, C, OH, OW].
PoolGeometry geometry(const Tensor& in, const Tensor& out, const Pool2dParams& p) {
  PoolGeometry g;
  g.N = in.shape()[0], g.C = in.shape()[1], g.H = in.shape()[2], g.W = in.shape()[3];
  g.OH = out.shape()[2], g.OW = out.shape()[3];
  g.kh = p.kernel[0], g.kw = p.kernel[1], g.sh = p.stride[0], g.sw = p.stride[1];
  g.ph = p.padding[0], g.pw = p.padding[1], g.dh = p.dilation[0], g.dw = p.dilation[1];
  g.count_include_pad = p.count_include_pad;
  g.divisor_override = p.divisor_override;
  return g;
}

template <class F>
void for_float(DType t, const char* op, F&& f) {
  visit_cuda_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_16bit_float_v<T>)
      f(tag);
    else
      EMBER_FAIL(op, " kernel: dtype ", dtype_name(t), " is not supported on cuda");
  });
}

void max_pool2d_kernel(const Tensor& out, const Tensor& indices, const Tensor& in, const Pool2dParams& p) {
  const OpScope scope(out);
  for_float(in.dtype(), "max_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool codes = indices.defined() && indices.dtype() == DType::UInt8;
    int64_t* plane = indices.defined() && !codes ? static_cast<int64_t*>(indices.data_ptr()) : nullptr;
    max_pool2d_forward<T>(static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), plane,
                          codes ? static_cast<uint8_t*>(indices.data_ptr()) : nullptr, geometry(in, out, p), p.relu,
                          scope.stream());
  });
}

void max_pool2d_backward_kernel(const Tensor& gin, const Tensor& gout, const Tensor& indices, const Pool2dParams& p) {
  const OpScope scope(gin);
  for_float(gin.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool codes = indices.dtype() == DType::UInt8;
    max_pool2d_backward<T>(static_cast<const T*>(gout.data_ptr()),
                           codes ? nullptr : static_cast<const int64_t*>(indices.data_ptr()),
                           codes ? static_cast<const uint8_t*>(indices.data_ptr()) : nullptr,
                           static_cast<T*>(gin.data_ptr()), geometry(gin, gout, p), scope.stream());
  });
}

void avg_pool2d_kernel(const Tensor& out, const Tensor& in, const Pool2dParams& p) {
  const OpScope scope(out);
  for_float(in.dtype(), "avg_pool2d", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool2d_forward<T>(static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), geometry(in, out, p),
                          scope.stream());
  });
}

void avg_pool2d_backward_kernel(const Tensor& gin, const Tensor& gout, const Pool2dParams& p) {
  const OpScope scope(gin);
  for_float(gin.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    avg_pool2d_backward<T>(static_cast<const T*>(gout.data_ptr()), static_cast<T*>(gin.data_ptr()),
                           geometry(gin, gout, p), scope.stream());
  });
}

}  // namespace

void register_pool() {
  max_pool2d_stub.set(DeviceType::CUDA, max_pool2d_kernel);
  max_pool2d_backward_stub.set(DeviceType::CUDA, max_pool2d_backward_kernel);
  avg_pool2d_stub.set(DeviceType::CUDA, avg_pool2d_kernel);
  avg_pool2d_backward_stub.set(DeviceType::CUDA, avg_pool2d_backward_kernel);
}

}  // namespace ember::kernels::cuda
