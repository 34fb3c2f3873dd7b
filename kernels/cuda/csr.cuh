// Hand-written CSR kernels for sparse Linear weights (core/sparse.h): the product
// out [M, N] = x [M, K] @ A^T + bias with A [N, K] in CSR form (row_ptr [N + 1], col_idx
// [nnz], int32), and the values' gradient, the sampled product dvalues [nnz]. float and
// double. Every output is written by one thread that adds its terms in CSR order: no
// atomics, the same bits every run. cuSPARSE's SpMM is the fast variant on a GPU
// (ops_sparse.cu, csr_cusparse.cu); these run everywhere, the emulator included.
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

namespace csr_detail {
inline constexpr int kRowsPerBlock = 8;  // blockDim.y: rows of A per block, one warp each
}

// v1, the plain port. Block (32, 8): a lane per batch row m (32 consecutive m), a warp per
// row n of A. Each thread runs along row n: v[j] and col_idx[j] are the same address for
// the whole warp (one broadcast load), x[m, col] is one load per lane, K apart (uncoalesced:
// 32 sectors per entry; x is small enough to stay in L2 for a Linear's batch). Work:
// 2 M nnz flops; memory: about 32 bytes of sector traffic per multiply-add at worst.
template <class T>
__global__ void __launch_bounds__(256) csr_linear_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                         const int32_t* __restrict__ row_ptr,
                                                         const int32_t* __restrict__ col_idx,
                                                         const T* __restrict__ values, const T* __restrict__ bias,
                                                         int64_t M, int64_t K, int64_t N) {
  const int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  for (int64_t n = blockIdx.y * int64_t(blockDim.y) + threadIdx.y; n < N; n += int64_t(gridDim.y) * blockDim.y) {
    if (m >= M) continue;
    T acc = bias ? bias[n] : T(0);
    const T* xm = x + m * K;
    for (int32_t j = row_ptr[n]; j < row_ptr[n + 1]; ++j) acc += values[j] * xm[col_idx[j]];
    out[m * N + n] = acc;
  }
}

inline LaunchConfig csr_linear_config(int64_t M, int64_t N) {
  const unsigned mblocks = static_cast<unsigned>((M + 31) / 32);
  const int64_t nblocks = (N + csr_detail::kRowsPerBlock - 1) / csr_detail::kRowsPerBlock;
  const int64_t cap = 65535;  // gridDim.y's limit; the kernel strides over the rest
  return LaunchConfig{dim3(mblocks > 0 ? mblocks : 1, static_cast<unsigned>(nblocks < 1 ? 1 : (nblocks < cap ? nblocks : cap))),
                      dim3(32, csr_detail::kRowsPerBlock), 0};
}

// dvalues[j] = sum over m of dy [M, N] (m, n) * x [M, K] (m, col_idx[j]) for entry j of
// row n. Block (32, 8): a warp per row n, a lane per entry of that row (32 at a time),
// a loop over m: dy[m, n] is one broadcast load, x[m, col] nearby loads along the row of x
// (a row's columns increase). Work: 2 M nnz flops.
template <class T>
__global__ void __launch_bounds__(256) csr_sddmm_kernel(T* __restrict__ dvalues, const T* __restrict__ dy,
                                                        const T* __restrict__ x, const int32_t* __restrict__ row_ptr,
                                                        const int32_t* __restrict__ col_idx, int64_t M, int64_t K,
                                                        int64_t N) {
  const int64_t step = int64_t(gridDim.x) * blockDim.y;
  for (int64_t n = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; n < N; n += step) {
    for (int32_t j = row_ptr[n] + int32_t(threadIdx.x); j < row_ptr[n + 1]; j += 32) {
      const int64_t c = col_idx[j];
      T acc = T(0);
      for (int64_t m = 0; m < M; ++m) acc += dy[m * N + n] * x[m * K + c];
      dvalues[j] = acc;
    }
  }
}

inline LaunchConfig csr_sddmm_config(int64_t N) {
  return LaunchConfig{dim3(grid_stride_blocks(N, csr_detail::kRowsPerBlock)), dim3(32, csr_detail::kRowsPerBlock), 0};
}

// out [M, N] = bias [N] in every row: the addend of cuSPARSE's SpMM (beta = 1).
template <class T>
__global__ void __launch_bounds__(256) csr_bias_rows_kernel(T* __restrict__ out, const T* __restrict__ bias,
                                                            int64_t M, int64_t N) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < M * N; e += step) out[e] = bias[e % N];
}

inline LaunchConfig csr_bias_rows_config(int64_t n) {
  return LaunchConfig{dim3(grid_stride_blocks(n, kBlockThreads)), dim3(kBlockThreads), 0};
}

// Host side: out [M, N] (overwritten) = x [M, K] @ A^T + bias [N] (bias may be null).
template <class T>
void csr_linear(T* out, const T* x, const int32_t* row_ptr, const int32_t* col_idx, const T* values, const T* bias,
                int64_t M, int64_t K, int64_t N, cudaStream_t stream) {
  if (M == 0 || N == 0) return;
  launch<csr_linear_kernel<T>>(csr_linear_config(M, N), stream, out, x, row_ptr, col_idx, values, bias, M, K, N);
}

// dvalues [nnz] (overwritten), the sampled product above.
template <class T>
void csr_sddmm(T* dvalues, const T* dy, const T* x, const int32_t* row_ptr, const int32_t* col_idx, int64_t M,
               int64_t K, int64_t N, int64_t nnz, cudaStream_t stream) {
  if (N == 0 || nnz == 0) return;
  launch<csr_sddmm_kernel<T>>(csr_sddmm_config(N), stream, dvalues, dy, x, row_ptr, col_idx, M, K, N);
}

}  // namespace ember::kernels::cuda
