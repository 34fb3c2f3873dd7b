// gather, scatter_add, index_add and topk along one dim, and the index check the index ops share.
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
enum class IndexOp : int { kIndexSelect, kGather, kScatterAdd, kIndexAdd, kFusedCheck };

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

// self [outer, n, inner] += src [outer, m, inner] at rows index [m] (Note [Deterministic
// index_add] in kernels/cpu/indexing.cpp): one thread per column (o, c) of self, adding the
// m source rows in order of i, so the sums are the CPU's, bit for bit, without atomics;
// neighbouring threads read and write neighbouring columns (coalesced). A bad index is
// skipped (check_indices has recorded it). Memory-bound: 8 bytes of index (cached), one
// sizeof(T) read of src and a read-modify-write of self per term.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    index_add_kernel(T* self, const int64_t* __restrict__ index, const T* __restrict__ src, int64_t outer, int64_t n,
                     int64_t m, int64_t inner) {
  using C = compute_t<T>;
  const int64_t columns = outer * inner;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < columns; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, c = t % inner;
    for (int64_t i = 0; i < m; ++i) {
      const int64_t v = index[i];
      if (v < 0 || v >= n) continue;
      T& y = self[(o * n + v) * inner + c];
      y = convert<T>(convert<C>(y) + convert<C>(src[(o * m + i) * inner + c]));
    }
  }
}
template <class T>
void index_add(T* self, const int64_t* index, const T* src, int64_t outer, int64_t n, int64_t m, int64_t inner,
               cudaStream_t stream) {
  const int64_t columns = outer * inner;
  if (columns > 0 && m > 0)
    launch<index_add_kernel<T>>(index_config(columns), stream, self, index, src, outer, n, m, inner);
}

// topk by rank: one thread per element of in [outer, n, inner] counts the elements of its
// row that come before it (largest: greater, NaN first; smallest: less, NaN last; ties by
// index, the CPU's order) and, when that rank is below k, writes itself to position rank.
// O(n) reads per element, so O(n^2) per row: right for the short rows of top-k accuracy
// and beam search; a sort-based kernel is the way for rows of many thousands.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    topk_rank_kernel(const T* __restrict__ in, T* __restrict__ values, int64_t* __restrict__ indices, int64_t outer,
                     int64_t n, int64_t inner, int64_t k, bool largest) {
  using C = compute_t<T>;
  const int64_t total = outer * n * inner;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / (n * inner), j = (t / inner) % n, c = t % inner;
    const T* row = in + o * n * inner + c;
    const C a = convert<C>(row[j * inner]);
    const bool an = a != a;
    int64_t rank = 0;
    for (int64_t i = 0; i < n && rank < k; ++i) {
      const C b = convert<C>(row[i * inner]);
      const bool bn = b != b;
      bool b_first;
      if (an || bn) b_first = bn && !an ? largest : (!bn && an ? !largest : i < j);
      else if (a != b) b_first = largest ? b > a : b < a;
      else b_first = i < j;
      rank += b_first ? 1 : 0;
    }
    if (rank < k) {
      values[(o * k + rank) * inner + c] = row[j * inner];
      indices[(o * k + rank) * inner + c] = j;
    }
  }
}
template <class T>
void topk(const T* in, T* values, int64_t* indices, int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest,
          cudaStream_t stream) {
  const int64_t total = outer * n * inner;
  if (total > 0 && k > 0)
    launch<topk_rank_kernel<T>>(index_config(total), stream, in, values, indices, outer, n, inner, k, largest);
}

}  // namespace ember::kernels::cuda
