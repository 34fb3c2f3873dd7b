// CPU optimizer updates: one pass over each parameter applying the shared functors of
// kernels/common/optim_ops.h. Memory-bound: SGD with momentum reads p, g, buf and writes
// p, buf (20 bytes per float32 element); Adam reads p, g, m, v and writes p, m, v (28).
// The multi-tensor forms take a list of parameters in one call; the capturable ones read
// the learning rate and step from tensors.
#include "kernels/common/optim_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

template <class F>
void for_float(DType t, const char* op, F&& f) {
  if (t == DType::Float32) return f(Tag<float>{});
  if (t == DType::Float64) return f(Tag<double>{});
  EMBER_FAIL(op, " kernel: parameters must be float32 or float64, got ", dtype_name(t));
}

void sgd_kernel(const Tensor& param, const Tensor& grad, const Tensor& buf, const ops::SgdUpdate& u) {
  for_float(param.dtype(), "sgd_update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(param.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    T* b = buf.defined() ? static_cast<T*>(buf.data_ptr()) : nullptr;
    parallel_for(0, param.numel(), kGrainSize, [&](int64_t lo, int64_t hi) {
      T unused = 0;
      for (int64_t i = lo; i < hi; ++i) u(p[i], g[i], b ? b[i] : unused);
    });
  });
}

void adam_kernel(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v, const ops::AdamUpdate& u) {
  for_float(param.dtype(), "adam_update", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(param.data_ptr());
    const T* g = static_cast<const T*>(grad.data_ptr());
    T* pm = static_cast<T*>(m.data_ptr());
    T* pv = static_cast<T*>(v.data_ptr());
    const auto step = u.prepare<T>();
    parallel_for(0, param.numel(), kGrainSize, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) step(p[i], g[i], pm[i], pv[i]);
    });
  });
}

// The list's parameters one after another, each as the one-parameter kernels update it
// (so a multi-tensor step equals per-parameter steps bit for bit).
void multi_sgd_kernel(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> bufs,
                      const ops::SgdUpdate& u) {
  for (size_t i = 0; i < params.size(); ++i) sgd_kernel(params[i], grads[i], bufs[i], u);
}

void multi_adam_kernel(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> m,
                       std::span<const Tensor> v, const ops::AdamUpdate& u) {
  for (size_t i = 0; i < params.size(); ++i) adam_kernel(params[i], grads[i], m[i], v[i], u);
}

// The capturable forms read lr and step where they live (here, host memory), then are the
// forms above: the same numbers give the same bits.
double scalar_of(const Tensor& t) { return *static_cast<const double*>(t.data_ptr()); }

void multi_sgd_capturable_kernel(std::span<const Tensor> params, std::span<const Tensor> grads,
                                 std::span<const Tensor> bufs, const ops::SgdUpdate& u, const Tensor& lr) {
  ops::SgdUpdate at = u;
  at.lr = scalar_of(lr);
  multi_sgd_kernel(params, grads, bufs, at);
}

void multi_adam_capturable_kernel(std::span<const Tensor> params, std::span<const Tensor> grads,
                                  std::span<const Tensor> m, std::span<const Tensor> v, const ops::AdamUpdate& u,
                                  const Tensor& lr, const Tensor& step) {
  multi_adam_kernel(params, grads, m, v, u.at(scalar_of(step), scalar_of(lr)));
}

}  // namespace

void register_optim() {
  multi_sgd_update_capturable_stub.set(DeviceType::CPU, multi_sgd_capturable_kernel);
  multi_adam_update_capturable_stub.set(DeviceType::CPU, multi_adam_capturable_kernel);
  multi_sgd_update_stub.set(DeviceType::CPU, multi_sgd_kernel);
  multi_adam_update_stub.set(DeviceType::CPU, multi_adam_kernel);
  sgd_update_stub.set(DeviceType::CPU, sgd_kernel);
  adam_update_stub.set(DeviceType::CPU, adam_kernel);
}

}  // namespace ember::kernels::cpu
