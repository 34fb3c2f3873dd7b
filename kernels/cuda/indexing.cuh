// gather and scatter_add along one dim, and the index check the index ops share.
// (index_select's row gather is embedding.cuh's index_select_rows.)
//
// Note [Index errors on the device]. Indices live on the device, so checking them on the
// host would cost a synchronization per op. Instead check_indices runs over the index
// (8 bytes read per index) and records the first bad index it meets in an IndexError,
// host memory the kernels write (pinned, so mapped for the device); the kernels that
// follow never follow a bad index (gather writes 0, scatter_add skips it). The backend
// raises the record as an ember::Error, naming the op, the index and the dim's size, at
// the next synchronization with the host (a blocking copy, .item(), a stream, event or
// device synchronize): kernels/cuda/device.cu.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

// The index ops, then the fused ops' checks (kFusedCheck + int(kernels::IndexCheck)).
enum class IndexOp : int { kIndexSelect, kGather, kScatterAdd, kFusedCheck };

struct IndexError {
  unsigned int claimed;  // 0: no error; set once, by the first thread to find one
  int op;                // an IndexOp, or kFusedCheck + an IndexCheck
  int64_t value, dim, size, position;
};

// Memory-bound: reads 8 bytes per index; writes only on an error. (A template, as every
// kernel in a header, so that every translation unit may include it.)
template <class I>
__global__ void __launch_bounds__(kBlockThreads)
    check_indices_kernel(const I* __restrict__ index, int64_t n, int64_t size, int64_t dim, int op, bool has_skip,
                         int64_t skip, IndexError* error) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = index[i];
    if ((v < 0 || v >= size) && !(has_skip && v == skip) && atomicCAS(&error->claimed, 0u, 1u) == 0u) {
      error->op = op;
      error->value = v;
      error->dim = dim;
      error->size = size;
      error->position = i;
    }
  }
}
inline LaunchConfig index_config(int64_t n) {
  return LaunchConfig{dim3(grid_stride_blocks(n, kBlockThreads)), dim3(kBlockThreads), 0};
}
// Values equal to `skip` (when has_skip) pass: cross entropy's ignore_index.
inline void check_indices(const int64_t* index, int64_t n, int64_t size, int64_t dim, int op, IndexError* error,
                          cudaStream_t stream, bool has_skip = false, int64_t skip = 0) {
  constexpr auto kernel = &check_indices_kernel<int64_t>;  // the address instantiates it (GCC bug 53164)
  if (n > 0) launch<kernel>(index_config(n), stream, index, n, size, dim, op, has_skip, skip, error);
}

// out[i] = in at position i of the index's shape with coordinate `dim` replaced by
// index[i] (out and index contiguous, of the index's shape). `view` is the index's sizes
// with the input's strides. Elements move as U (their bytes). Memory-bound: 8 bytes of
// index plus 2 sizeof(U) per element, the input read scattered along `dim`.
template <class U>
__global__ void __launch_bounds__(kBlockThreads)
    gather_kernel(const U* __restrict__ in, const int64_t* __restrict__ index, U* __restrict__ out, int64_t n,
                  Layout view, int dim, int64_t size) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = i, off = 0;
    for (int d = view.ndim - 1; d >= 0; --d) {
      if (d != dim) off += (rem % view.sizes[d]) * view.strides[d];
      rem /= view.sizes[d];
    }
    const int64_t v = index[i];
    out[i] = v >= 0 && v < size ? in[off + v * view.strides[dim]] : U{};
  }
}
template <class U>
void gather(const U* in, const int64_t* index, U* out, const Layout& view, int dim, int64_t size,
            cudaStream_t stream) {
  const int64_t n = numel(view);
  if (n > 0) launch<gather_kernel<U>>(index_config(n), stream, in, index, out, n, view, dim, size);
}

// self at (position of index with coordinate `dim` replaced by index[p]) += src at p, for
// every position p of the index (contiguous, sizes index_sizes). One thread per line of
// the index along `dim`: lines differ in another coordinate, so they never write the same
// element, and each element receives its terms in the order of p, as in the CPU
// backend's serial loop: the same sums, bit for bit, without atomics. Computed in
// compute_t<T>. Memory-bound: 8 bytes of index, sizeof(T) of src and 2 sizeof(T) of self
// per position; lines are strided by the line length, which a GPU pays for with
// uncoalesced index reads when `dim` is the last dim.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    scatter_add_kernel(T* self, Layout self_layout, const int64_t* __restrict__ index, Layout index_sizes,
                       const T* __restrict__ src, Layout src_layout, int dim, int64_t lines) {
  using C = compute_t<T>;
  const int64_t len = index_sizes.sizes[dim], size = self_layout.sizes[dim];
  for (int64_t l = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; l < lines; l += int64_t(gridDim.x) * blockDim.x) {
    int64_t rem = l, at = 0, so = 0, io = 0, istride = 1, idim = 0;
    for (int d = index_sizes.ndim - 1; d >= 0; --d) {
      if (d == dim) {
        idim = istride;
      } else {
        const int64_t c = rem % index_sizes.sizes[d];
        rem /= index_sizes.sizes[d];
        at += c * self_layout.strides[d];
        so += c * src_layout.strides[d];
        io += c * istride;
      }
      istride *= index_sizes.sizes[d];
    }
    for (int64_t j = 0; j < len; ++j) {
      const int64_t v = index[io + j * idim];
      if (v < 0 || v >= size) continue;
      T& y = self[at + v * self_layout.strides[dim]];
      y = convert<T>(convert<C>(y) + convert<C>(src[so + j * src_layout.strides[dim]]));
    }
  }
}
template <class T>
void scatter_add(T* self, const Layout& self_layout, const int64_t* index, const Layout& index_sizes, const T* src,
                 const Layout& src_layout, int dim, cudaStream_t stream) {
  const int64_t len = index_sizes.sizes[dim];
  if (len == 0) return;
  const int64_t lines = numel(index_sizes) / len;
  launch<scatter_add_kernel<T>>(index_config(lines), stream, self, self_layout, index, index_sizes, src, src_layout,
                                dim, lines);
}

}  // namespace ember::kernels::cuda
