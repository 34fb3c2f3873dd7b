// The CUDA slots of the Philox draws: uniform, normal and randint (random.cuh). Core
// reserves the blocks of each draw (PhiloxState) for both backends alike, and the
// kernels map element i to the CPU's counter block and lane, so a seeded draw gives the
// same integers on both devices (normals agree to a few ulp: the device's log/sin/cos).
// Outputs are contiguous, on the current stream of their device.
#include "kernels/cuda/device.h"
#include "kernels/cuda/random.cuh"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

// Core draws uniform and normal values in floating dtypes only.
template <class F>
void visit_floating(const Tensor& out, const char* op, F&& f) {
  visit_cuda_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_16bit_float_v<T>)
      f(tag);
    else
      EMBER_FAIL(op, " kernel (cuda): dtype ", dtype_name(out.dtype()), " is not supported");
  });
}

void uniform_kernel(const Tensor& out, PhiloxState st, double lo, double hi) {
  const OpScope scope(out);
  visit_floating(out, "uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    uniform<T>(static_cast<T*>(out.data_ptr()), out.numel(), st.seed, st.offset, lo, hi, scope.stream());
  });
}

void normal_kernel(const Tensor& out, PhiloxState st, double mean, double stddev) {
  const OpScope scope(out);
  visit_floating(out, "normal", [&](auto tag) {
    using T = typename decltype(tag)::type;
    normal<T>(static_cast<T*>(out.data_ptr()), out.numel(), st.seed, st.offset, mean, stddev, scope.stream());
  });
}

// The bounds come as doubles, exact up to 2^53 (core checks).
void randint_kernel(const Tensor& out, PhiloxState st, double low, double high) {
  const OpScope scope(out);
  visit_cuda_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>)
      randint<T>(static_cast<T*>(out.data_ptr()), out.numel(), st.seed, st.offset, static_cast<int64_t>(low),
                 static_cast<int64_t>(high), scope.stream());
    else
      EMBER_FAIL("randint kernel (cuda): dtype bool is not supported");
  });
}

}  // namespace

void register_random() {
  uniform_stub.set(DeviceType::CUDA, uniform_kernel);
  normal_stub.set(DeviceType::CUDA, normal_kernel);
  randint_stub.set(DeviceType::CUDA, randint_kernel);
}

}  // namespace ember::kernels::cuda
