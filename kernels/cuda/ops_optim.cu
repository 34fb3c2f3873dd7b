// The CUDA slots of the in-place optimizer updates of one parameter (optim.cuh, the
// CPU's per-element functors), on the current stream of the parameter's device.
// float32 and float64, as on the CPU.
#include "kernels/cuda/device.h"
#include "kernels/cuda/optim.cuh"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

template <class F>
void for_float(DType t, const char* op, F&& f) {
  if (t == DType::Float32) return f(Tag<float>{});
  if (t == DType::Float64) return f(Tag<double>{});
  EMBER_FAIL(op, " kernel: parameters must be float32 or float64, got ", dtype_name(t));
}

void sgd_kernel(const Tensor& param, const Tensor& grad, const Tensor& buf, const ops::SgdUpdate& u) {
  const OpScope scope(param);
  for_float(param.dtype(), "sgd_update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const SgdTensor<T> t{static_cast<T*>(param.data_ptr()), static_cast<const T*>(grad.data_ptr()),
                         buf.defined() ? static_cast<T*>(buf.data_ptr()) : nullptr, param.numel()};
    sgd_update<T>({&t, 1}, u, scope.stream());
  });
}

void adam_kernel(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const ops::AdamUpdate& u) {
  const OpScope scope(param);
  for_float(param.dtype(), "adam_update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const AdamTensor<T> t{static_cast<T*>(param.data_ptr()), static_cast<const T*>(grad.data_ptr()),
                          static_cast<T*>(m.data_ptr()), static_cast<T*>(v.data_ptr()), param.numel()};
    adam_update<T>({&t, 1}, u, scope.stream());
  });
}

}  // namespace

void register_optim() {
  sgd_update_stub.set(DeviceType::CUDA, sgd_kernel);
  adam_update_stub.set(DeviceType::CUDA, adam_kernel);
}

}  // namespace ember::kernels::cuda
