// The CUDA slots of softmax and log_softmax over one dim of a contiguous input (core
// makes it so) seen as [outer, n, inner]. softmax.cuh's kernels take rows (inner == 1);
// any other dim is transposed to [outer, inner, n] in workspace, softmaxed there and
// transposed back (layout.cuh's tiled kernel): two extra reads and writes of the tensor,
// where a strided-column kernel would need none; worth writing once a model needs a
// softmax over an inner dim on a GPU. Floating dtypes only, as on the CPU; 16-bit ones
// computed in float.
#include "kernels/cuda/device.h"
#include "kernels/cuda/layout.cuh"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/softmax.cuh"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

template <bool kLog>
void softmax_kernel(const Tensor& out, const Tensor& in, int64_t dim) {
  const OpScope scope(out);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.shape()[d];
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.shape()[d];
  const int64_t n = in.shape()[dim];
  visit_cuda_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_16bit_float_v<T>) {
      const T* x = static_cast<const T*>(in.data_ptr());
      T* y = static_cast<T*>(out.data_ptr());
      auto rows = [&](const T* src, T* dst) {
        if constexpr (kLog) log_softmax(src, dst, outer * inner, n, scope.stream());
        else softmax(src, dst, outer * inner, n, scope.stream());
      };
      if (inner == 1) return rows(x, y);
      const int device = out.device().index;
      const size_t bytes = size_t(in.numel()) * sizeof(T);
      const DeviceScratch a(device, scope.stream(), bytes), b(device, scope.stream(), bytes);
      transpose_batched(x, a.get<T>(), outer, n, inner, scope.stream());
      rows(a.get<const T>(), b.get<T>());
      transpose_batched(b.get<const T>(), y, outer, inner, n, scope.stream());
    } else {
      EMBER_FAIL(kLog ? "log_softmax" : "softmax", " kernel (cuda): dtype ", dtype_name(in.dtype()), " is not supported");
    }
  });
}

}  // namespace

void register_softmax() {
  softmax_stub.set(DeviceType::CUDA, softmax_kernel<false>);
  log_softmax_stub.set(DeviceType::CUDA, softmax_kernel<true>);
}

}  // namespace ember::kernels::cuda
