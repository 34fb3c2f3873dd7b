// CPU softmax and log_softmax over one dim of a contiguous input viewed as
// [outer, n, inner]. Per row: max, sum of exp(x - max), then the normalized values, so
// large logits never overflow. Three passes over n values (reads 3n, writes n).
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

template <bool kLog>
void softmax_kernel(const Tensor& out, const Tensor& in, int64_t dim) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!is_float_v<T>) {
      EMBER_FAIL("softmax kernel: dtype ", dtype_name(in.dtype()), " is not supported");
    } else {
      using C = compute_t<T>;
      const Shape& s = in.shape();
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < dim; ++d) outer *= s[d];
      for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= s[d];
      const int64_t n = s[dim];
      const T* x = static_cast<const T*>(in.data_ptr());
      T* y = static_cast<T*>(out.data_ptr());
      parallel_for(0, outer * inner, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
        for (int64_t row = b; row < e; ++row) {
          const int64_t o = row / inner, i = row % inner;
          const T* xr = x + o * n * inner + i;
          T* yr = y + o * n * inner + i;
          C mx = -INFINITY;
          for (int64_t j = 0; j < n; ++j) mx = std::max<C>(mx, static_cast<C>(xr[j * inner]));
          if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf: keep exp(x - mx) = 0, not NaN
          C sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<C>(xr[j * inner]) - mx);
          if constexpr (kLog) {
            const C lse = mx + std::log(sum);
            for (int64_t j = 0; j < n; ++j) yr[j * inner] = static_cast<T>(static_cast<C>(xr[j * inner]) - lse);
          } else {
            const C inv = C(1) / sum;
            for (int64_t j = 0; j < n; ++j) yr[j * inner] = static_cast<T>(std::exp(static_cast<C>(xr[j * inner]) - mx) * inv);
          }
        }
      });
    }
  });
}

}  // namespace

void register_softmax() {
  softmax_stub.set(DeviceType::CPU, softmax_kernel<false>);
  log_softmax_stub.set(DeviceType::CPU, softmax_kernel<true>);
}

}  // namespace ember::kernels::cpu
