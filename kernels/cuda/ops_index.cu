// The CUDA slots of index_select, gather, scatter_add, index_add and topk. Core passes contiguous int64
// indices (and, for index_select, a contiguous input); gather's input and scatter_add's
// src may be strided. Indices are checked on the device and a bad one is raised at the
// next synchronization (Note [Index errors on the device] in indexing.cuh): the kernels
// never follow it. index_select and gather move bytes, so they are instantiated per
// element size, not per dtype; scatter_add adds in each dtype's compute type.
#include "kernels/cuda/device.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/indexing.cuh"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

// Calls f(U{}) with the unsigned type of the element's size.
template <class F>
void visit_element_size(const Tensor& t, F&& f) {
  switch (t.element_size()) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
  }
  EMBER_FAIL("cuda index kernels: element size ", t.element_size(), " is not supported");
}

void check(const Tensor& index, int64_t size, int64_t dim, IndexOp op, cudaStream_t stream) {
  check_indices(static_cast<const int64_t*>(index.data_ptr()), index.numel(), size, dim, int(op),
                index_error_record(index.device().index), stream);
}

// The fused ops' checks: on the device, raised at the next synchronization.
void check_index_range_kernel(const Tensor& index, int64_t size, std::optional<int64_t> skip, IndexCheck kind) {
  const OpScope scope(index);
  check_indices(static_cast<const int64_t*>(index.data_ptr()), index.numel(), size, 0,
                int(IndexOp::kFusedCheck) + int(kind), index_error_record(index.device().index), scope.stream(),
                skip.has_value(), skip.value_or(0));
}

// out [outer, L, inner] = in [outer, n, inner] rows picked by index [L].
void index_select_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  const OpScope scope(out);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.shape()[d];
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.shape()[d];
  const int64_t n = in.shape()[dim];
  check(index, n, dim, IndexOp::kIndexSelect, scope.stream());
  visit_element_size(in, [&](auto u) {
    using U = decltype(u);
    index_select_rows(static_cast<const U*>(in.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
                      static_cast<U*>(out.data_ptr()), outer, n, index.numel(), inner, nullptr, scope.stream());
  });
}

void gather_kernel(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  const OpScope scope(out);
  const int64_t size = in.shape()[dim];
  check(index, size, dim, IndexOp::kGather, scope.stream());
  Layout view = layout_of(in);
  for (int d = 0; d < view.ndim; ++d) view.sizes[d] = index.shape()[d];
  visit_element_size(in, [&](auto u) {
    using U = decltype(u);
    gather(static_cast<const U*>(in.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
           static_cast<U*>(out.data_ptr()), view, int(dim), size, scope.stream());
  });
}

void scatter_add_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const OpScope scope(self);
  check(index, self.shape()[dim], dim, IndexOp::kScatterAdd, scope.stream());
  visit_cuda_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      scatter_add(static_cast<T*>(self.data_ptr()), layout_of(self), static_cast<const int64_t*>(index.data_ptr()),
                  layout_of(index), static_cast<const T*>(src.data_ptr()), layout_of(src), int(dim), scope.stream());
    } else {
      EMBER_FAIL("scatter_add kernel (cuda): dtype bool is not supported");
    }
  });
}

// self [outer, n, inner] += src [outer, m, inner] at rows index [m].
void index_add_kernel(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const OpScope scope(self);
  const int64_t outer = self.size(0), n = self.size(1), inner = self.size(2);
  check(index, n, dim, IndexOp::kIndexAdd, scope.stream());
  visit_cuda_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      index_add(static_cast<T*>(self.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
                static_cast<const T*>(src.data_ptr()), outer, n, index.numel(), inner, scope.stream());
    } else {
      EMBER_FAIL("index_add kernel (cuda): dtype bool is not supported");
    }
  });
}

void topk_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t k, bool largest) {
  const OpScope scope(values);
  visit_cuda_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      topk(static_cast<const T*>(in.data_ptr()), static_cast<T*>(values.data_ptr()),
           static_cast<int64_t*>(indices.data_ptr()), in.size(0), in.size(1), in.size(2), k, largest, scope.stream());
    } else {
      EMBER_FAIL("topk kernel (cuda): dtype bool is not supported");
    }
  });
}

}  // namespace

void register_index() {
  index_select_stub.set(DeviceType::CUDA, index_select_kernel);
  check_index_range_stub.set(DeviceType::CUDA, check_index_range_kernel);
  gather_stub.set(DeviceType::CUDA, gather_kernel);
  scatter_add_stub.set(DeviceType::CUDA, scatter_add_kernel);
  index_add_stub.set(DeviceType::CUDA, index_add_kernel);
  topk_stub.set(DeviceType::CUDA, topk_kernel);
}

}  // namespace ember::kernels::cuda
