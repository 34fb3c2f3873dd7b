// The CUDA slots of the ops that move and set values: copy (any strides, any dtypes) and
// fill. Every kernel runs on the current stream of the tensors' device.
#include "kernels/cuda/device.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/layout.cuh"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

void copy_kernel(const Tensor& dst, const Tensor& src) {
  const OpScope scope(dst);
  const Layout dst_layout = layout_of(dst), src_layout = layout_of(src);
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && !dst.shares_storage_with(src)) {
    // Bytes only: the layout kernels pick a tiled transpose or a plain copy for the view.
    permute_contiguous_bytes(src.data_ptr(), dst.data_ptr(), src_layout, static_cast<int>(dst.element_size()),
                             scope.stream());
    return;
  }
  visit_cuda_dtype(dst.dtype(), [&](auto to) {
    visit_cuda_dtype(src.dtype(), [&](auto from) {
      using To = typename decltype(to)::type;
      using From = typename decltype(from)::type;
      cast<To, From>(static_cast<const From*>(src.data_ptr()), src_layout, static_cast<To*>(dst.data_ptr()),
                     dst_layout, scope.stream());
    });
  });
}

void fill_kernel(const Tensor& dst, Scalar value) {
  const OpScope scope(dst);
  visit_cuda_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    // As the CPU converts: integral scalars exactly, others through double.
    const T v = value.is_integral() ? convert<T>(value.to_int()) : convert<T>(value.to_double());
    fill<T>(static_cast<T*>(dst.data_ptr()), layout_of(dst), v, scope.stream());
  });
}

}  // namespace

void register_copy() {
  copy_stub.set(DeviceType::CUDA, copy_kernel);
  fill_stub.set(DeviceType::CUDA, fill_kernel);
}

}  // namespace ember::kernels::cuda
