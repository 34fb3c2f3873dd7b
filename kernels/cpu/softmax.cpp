// CPU softmax and log_softmax over one dim of a contiguous input viewed as
// [outer, n, inner]. Per row, the online normalizer of kernels/common/softmax_ops.h (the
// CUDA kernels' too) gives the row's max and the sum of exp(x - max), so large logits
// never overflow. A row is taken in chunks of up to kChunk values, converted to the
// compute type in a buffer: the first chunk's exps are kept there (of_exps), the later
// chunks are absorbed (add). So softmax of a row that fits one chunk costs one read, one
// exp per value and one write (the kept exps times 1 / sum), where recomputing the exps
// cost twice the time on [1024, 1000] float32; a longer row is read again for its
// output. log_softmax keeps no exps: a contiguous float32 / float64 row is absorbed where
// it lies, without the copy.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/common/softmax_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

// Values per chunk: the buffer (8 KiB of double) stays in L1, and a longer row pays one
// extra exp per chunk to rescale its running sum.
constexpr int64_t kChunk = 1024;

// The stride of a contiguous row, known at compile time so that its loops vectorize.
using Unit = std::integral_constant<int64_t, 1>;

// One row of n values, `stride` apart (an int64_t, or Unit). buf holds kChunk values of C.
template <bool kLog, class T, class C, class Stride>
void softmax_row(const T* x, T* y, int64_t n, Stride stride, C* buf) {
  using Online = ops::OnlineSoftmax<C>;
  Online st = Online::empty();
  for (int64_t j = 0; j < n; j += kChunk) {
    const int k = static_cast<int>(std::min(kChunk, n - j));
    if constexpr (kLog && std::is_same_v<T, C> && std::is_same_v<Stride, Unit>) {
      st.add(x + j, k);  // log_softmax keeps no exps: absorb the row where it lies
      continue;
    }
    for (int q = 0; q < k; ++q) buf[q] = static_cast<C>(x[(j + q) * stride]);
    if (j == 0)
      st = Online::of_exps(buf, k);
    else
      st.add(buf, k);
  }
  if constexpr (kLog) {
    const C lse = st.log_sum_exp();
    for (int64_t j = 0; j < n; ++j) y[j * stride] = static_cast<T>(static_cast<C>(x[j * stride]) - lse);
  } else {
    const C inv = C(1) / st.sum;
    if (n <= kChunk) {
      for (int64_t j = 0; j < n; ++j) y[j * stride] = static_cast<T>(buf[j] * inv);
    } else {
      const C shift = Online::shift(st.max);
      for (int64_t j = 0; j < n; ++j) y[j * stride] = static_cast<T>(std::exp(static_cast<C>(x[j * stride]) - shift) * inv);
    }
  }
}

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
        C buf[kChunk];
        for (int64_t row = b; row < e; ++row) {
          const int64_t o = row / inner, i = row % inner;
          const T* xr = x + o * n * inner + i;
          T* yr = y + o * n * inner + i;
          if (inner == 1)
            softmax_row<kLog>(xr, yr, n, Unit{}, buf);
          else
            softmax_row<kLog>(xr, yr, n, inner, buf);
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
