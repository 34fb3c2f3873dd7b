// The CUDA slots of the reductions: sum, amax, amin over any set of dims, and max_dim /
// min_dim (values and int64 indices over one dim), through reduce.cuh's kernels, which
// reduce the middle dim of a contiguous [outer, n, inner]. A contiguous input whose
// reduced dims are adjacent (size-1 dims aside) is reduced where it lies; any other input
// is first copied, by layout.cuh's permute kernel, into workspace as [kept..., reduced...]
// (one extra read and write of the input), then reduced over its last dim.
//
// dtypes as on the CPU backend: float sums keep their dtype (16-bit ones summed in
// float); integer and bool sums are int64; extrema take every dtype (bool read as uint8,
// whose values it shares); NaN propagates, and max_dim / min_dim give the first
// extremum, a NaN before everything. Float sums accumulate in double, as the CPU's do, in
// a fixed tree (deterministic), and are rounded once: off by at most u |S| +
// gamma_n(2^-53) sum |x|, the CPU's bound.
#include "kernels/cuda/device.h"
#include "kernels/cuda/scratch.h"
#include "kernels/cuda/layout.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/scratch.h"

#include <optional>

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

// bool is reduced as uint8: the same bytes, the same order of 0 < 1.
template <class T>
using stored_t = std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>;

// The input as a contiguous [outer, n, inner] reduced over n: `in` itself when it already
// is one, else a copy into scratch with the reduced dims last (inner = 1).
struct ReduceInput {
  const void* data;
  ReduceDims dims;
};
ReduceInput prepare(const Tensor& in, DimMask mask, std::optional<DeviceScratch>& copy, cudaStream_t stream) {
  ReduceDims d;
  if (in.is_contiguous() && reduce_dims(in.shape(), mask, d)) return {in.data_ptr(), d};
  const Layout l = layout_of(in);
  Layout permuted;
  permuted.ndim = l.ndim;
  int k = 0;
  d = ReduceDims{};
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < l.ndim; ++i) {
      const bool reduced = (mask >> i) & 1;
      if (reduced != (pass == 1)) continue;
      permuted.sizes[k] = l.sizes[i];
      permuted.strides[k++] = l.strides[i];
      (reduced ? d.n : d.outer) *= l.sizes[i];
    }
  copy.emplace(in.device().index, stream, size_t(in.numel()) * in.element_size());
  if (in.numel() > 0) permute_contiguous_bytes(in.data_ptr(), copy->get(), permuted, int(in.element_size()), stream);
  return {copy->get(), d};
}

template <class R>
void run(const R& r, const ReduceInput& x, typename R::Out out, int device, cudaStream_t stream) {
  const ReduceDims& d = x.dims;
  DeviceScratch ws(device, stream, reduce_middle_dim_workspace<R>(d.outer, d.n, d.inner));
  reduce_middle_dim(r, static_cast<const typename R::Elem*>(x.data), out, d.outer, d.n, d.inner, ws.get(), ws.size(),
                    stream);
}

void sum_kernel(const Tensor& out, const Tensor& in, DimMask mask) {
  const OpScope scope(out);
  std::optional<DeviceScratch> copy;
  const ReduceInput x = prepare(in, mask, copy, scope.stream());
  visit_cuda_dtype(in.dtype(), [&](auto tag) {
    using T = stored_t<typename decltype(tag)::type>;
    if constexpr (std::is_integral_v<T>)
      run(IntSumReduce<T>{}, x, static_cast<int64_t*>(out.data_ptr()), out.device().index, scope.stream());
    else
      run(SumReduce<T, double>{}, x, static_cast<T*>(out.data_ptr()), out.device().index, scope.stream());
  });
}

template <bool kMax>
void extremum_kernel(const Tensor& out, const Tensor& in, DimMask mask) {
  const OpScope scope(out);
  std::optional<DeviceScratch> copy;
  const ReduceInput x = prepare(in, mask, copy, scope.stream());
  visit_cuda_dtype(in.dtype(), [&](auto tag) {
    using T = stored_t<typename decltype(tag)::type>;
    run(ExtremumReduce<T, kMax>{}, x, static_cast<T*>(out.data_ptr()), out.device().index, scope.stream());
  });
}

template <bool kMax>
void extremum_dim_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim) {
  const OpScope scope(values);
  std::optional<DeviceScratch> copy;
  ReduceInput x = prepare(in, DimMask(1) << dim, copy, scope.stream());
  visit_cuda_dtype(in.dtype(), [&](auto tag) {
    using T = stored_t<typename decltype(tag)::type>;
    const IndexedOut<T> out{static_cast<T*>(values.data_ptr()), static_cast<int64_t*>(indices.data_ptr())};
    run(ArgExtremumReduce<T, kMax>{}, x, out, values.device().index, scope.stream());
  });
}

}  // namespace

void register_reduce() {
  constexpr DeviceType cuda = DeviceType::CUDA;
  sum_stub.set(cuda, sum_kernel);
  amax_stub.set(cuda, extremum_kernel<true>);
  amin_stub.set(cuda, extremum_kernel<false>);
  max_dim_stub.set(cuda, extremum_dim_kernel<true>);
  min_dim_stub.set(cuda, extremum_dim_kernel<false>);
}

}  // namespace ember::kernels::cuda
