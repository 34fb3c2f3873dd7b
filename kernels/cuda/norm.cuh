// Layer norm over the last dim of a contiguous [rows, cols] tensor: the forward, saving
// each row's mean and rstd, here; the backward (dx and, reduced over rows, dgamma and
// dbeta) in norm_backward.cuh; what both use in norm_common.cuh. (Batch-norm statistics:
// batch_norm.cuh.)
//
// All are memory-bound; each comment gives bytes moved per element (s = sizeof(T): 4 for
// float32, 2 for bfloat16 / float16, 8 for float64) to compare with the bandwidth (H200:
// 4.8 TB/s). Rows use the variants of Note [Row variants] (rowwise.cuh). Compute is in
// float (double for float64); statistics are PyTorch's: biased variance for the
// normalization, rstd = 1 / sqrt(var + eps).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/norm_backward.cuh"
#include "kernels/cuda/norm_common.cuh"
#include "kernels/cuda/rowwise.cuh"

namespace ember::kernels::cuda {

namespace norm_detail {

using namespace rowwise;

// One row of layer norm held in registers by `lanes` threads (Red reduces over them).
// Mean first, then the sum of squared deviations from it (two passes over registers, no
// cancellation). A thread of a dead row passes cols = 0 and writes nothing.
// The row's values v come loaded (tile_load, zeros past cols).
// affine(v) applies gamma and beta to the normalized values.
template <int kN, class Red, class T, class Affine>
__device__ __forceinline__ void layer_norm_loaded_row(compute_t<T> (&v)[kN], Affine&& affine, T* y,
                                                      compute_t<T>* mean_out, compute_t<T>* rstd_out, int64_t cols,
                                                      int rank, int lanes, bool vec, compute_t<T> eps) {
  using A = compute_t<T>;
  A s = 0;
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) s += v[k];
  const A mean = Red::sum(s) / A(cols);
  A q = 0;
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) {
    const A d = tile_col<T>(k, rank, lanes, vec) < cols ? v[k] - mean : A(0);
    q += d * d;
  }
  const A rstd = rsqrt_acc(Red::sum(q) / A(cols) + eps);
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) v[k] = (v[k] - mean) * rstd;
  affine(v);
  tile_store<kN>(y, cols, rank, lanes, vec, v);
  if (rank == 0 && cols > 0) {
    *mean_out = mean;
    *rstd_out = rstd;
  }
}
template <int kN, class Red, class T>
__device__ __forceinline__ void layer_norm_row(const T* x, const T* gamma, const T* beta, T* y, compute_t<T>* mean_out,
                                               compute_t<T>* rstd_out, int64_t cols, int rank, int lanes, bool vec,
                                               compute_t<T> eps) {
  using A = compute_t<T>;
  A v[kN];
  tile_load<kN>(x, cols, rank, lanes, vec, v, A(0));
  // gamma and beta a chunk at a time from global memory (cached: every row reads them).
  const auto affine = [&](A(&u)[kN]) {
    tile_for_each<kN, T>(cols, rank, lanes, vec, [&](int k, int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A g[n] = {}, b[n] = {};  // read only where gamma and beta exist
      if (gamma != nullptr) load<n>(gamma + c, g);
      if (beta != nullptr) load<n>(beta + c, b);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) {
        if (gamma != nullptr) u[k + i] *= g[i];
        if (beta != nullptr) u[k + i] += b[i];
      }
    });
  };
  layer_norm_loaded_row<kN, Red, T>(v, affine, y, mean_out, rstd_out, cols, rank, lanes, vec, eps);
}

// Dynamic shared bytes of layer_norm_block_kernel<T, kN>: gamma's and beta's slots.
template <class A>
inline size_t block_shared_bytes(int kn) {
  return size_t(2 * kn) * rowwise::kMaxBlockThreads * sizeof(A);
}

}  // namespace norm_detail

// --- Layer norm forward ----------------------------------------------------------------------
// y = (x - mean) * rstd * gamma + beta; gamma and beta [cols] may be null (no affine).

// kWarp: groups of kW = min(kP, 32) lanes, one row each. Memory-bound: reads s and writes
// s bytes per element (2s), plus gamma and beta (cached) and 2 sizeof(acc) per row.
template <class T, int kP>
__global__ void __launch_bounds__(rowwise::kWarpRowBlock)
    layer_norm_warp_kernel(const T* __restrict__ x,      // [rows, cols] input
                           const T* __restrict__ gamma,  // [cols] input, or null
                           const T* __restrict__ beta,   // [cols] input, or null
                           T* __restrict__ y,            // [rows, cols] output
                           compute_t<T>* __restrict__ mean,  // [rows] output, saved for backward
                           compute_t<T>* __restrict__ rstd,  // [rows] output, saved for backward
                           int64_t rows, int64_t cols, compute_t<T> eps, bool vec) {
  constexpr int kW = kP < 32 ? kP : 32, kN = kP / kW;
  rowwise::for_each_warp_row<kW>(rows, [&](int64_t r, bool live, int rank) {
    norm_detail::layer_norm_row<kN, rowwise::SubWarp<kW>>(x + r * cols, gamma, beta, y + r * cols, mean + r, rstd + r,
                                                          live ? cols : 0, rank, kW, vec, eps);
  });
}

// kBlock: a block per row. Memory-bound: 2s bytes per element. The block's next row is
// loaded before this one's two block reductions, so its loads are in flight across their
// barriers: [16384, 4096] float32 ran at 65% of the datasheet on an H200 (2026-12-04)
// with one row's loads in flight per block, four blocks per SM.
template <class T, int kN>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads, norm_detail::kPrefetchBlocks<T, kN>)
    layer_norm_block_kernel(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                            T* __restrict__ y, compute_t<T>* __restrict__ mean, compute_t<T>* __restrict__ rstd,
                            int64_t rows, int64_t cols, compute_t<T> eps, bool vec) {  // shapes: layer_norm_warp_kernel
  using A = compute_t<T>;
  constexpr int kS = rowwise::kMaxBlockThreads;
  EMBER_DYNAMIC_SHARED(A, slots);  // [2 kN, kS]: Note [Parameter slots] (norm_common.cuh)
  A* const gs = slots + threadIdx.x;
  A* const bs = slots + kN * kS + threadIdx.x;
  norm_detail::fill_param_slots<kN>(gamma, gs, cols, vec);
  norm_detail::fill_param_slots<kN>(beta, bs, cols, vec);
  const auto affine = [&](A(&u)[kN]) {
    EMBER_UNROLL
    for (int k = 0; k < kN; ++k) {
      if (gamma != nullptr) u[k] *= gs[k * kS];
      if (beta != nullptr) u[k] += bs[k * kS];
    }
  };
  A v[kN], next[kN] = {};  // (copied into v after the last row too, unused)
  int64_t row = blockIdx.x;
  if (row < rows) rowwise::tile_load<kN>(x + row * cols, cols, threadIdx.x, blockDim.x, vec, v, A(0));
  for (; row < rows; row += gridDim.x) {
    const int64_t after = row + gridDim.x;
    if (after < rows) rowwise::tile_load<kN>(x + after * cols, cols, threadIdx.x, blockDim.x, vec, next, A(0));
    norm_detail::layer_norm_loaded_row<kN, rowwise::BlockPerRow, T>(v, affine, y + row * cols, mean + row, rstd + row,
                                                                    cols, threadIdx.x, blockDim.x, vec, eps);
    EMBER_UNROLL
    for (int k = 0; k < kN; ++k) v[k] = next[k];
  }
}

// kStream: a block per row; Welford/Chan statistics of x - x[0] in one read, then a second
// read that writes y (often from L2). Memory-bound: 3s bytes per element (2s from DRAM
// when the row stays in L2).
template <class T>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads)
    layer_norm_stream_kernel(const T* __restrict__ x, const T* __restrict__ gamma, const T* __restrict__ beta,
                             T* __restrict__ y, compute_t<T>* __restrict__ mean, compute_t<T>* __restrict__ rstd,
                             int64_t rows, int64_t cols, compute_t<T> eps, bool vec) {  // shapes: layer_norm_warp_kernel
  using namespace rowwise;
  using A = compute_t<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    // Statistics of x - x[0]: the shift keeps the means Welford merges small, so a row far
    // from 0 loses no more than eps of its spread (x - x[0] is exact within a factor of 2).
    const A shift = widen(xr[0]);
    Welford<A> w = Welford<A>::empty();
    for_each_chunk(xr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A v[n];
      load<n>(xr + c, v);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) v[i] -= shift;
      w = w.merge(Welford<A>::of(v, n));
    });
    w = block_welford(w);
    const A m = shift + w.mean, r = rsqrt_acc(w.variance(0) + eps);
    for_each_chunk(xr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A v[n];
      load<n>(xr + c, v);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) {
        A o = (v[i] - m) * r;
        if (gamma != nullptr) o *= widen(gamma[c + i]);  // gamma, beta: scalar loads, cached
        if (beta != nullptr) o += widen(beta[c + i]);
        v[i] = o;
      }
      store<n>(yr + c, v);
    });
    if (threadIdx.x == 0) {
      mean[row] = m;
      rstd[row] = r;
    }
  }
}

// --- Host side -----------------------------------------------------------------------------------

// The plan of the layer-norm forward kernels: kBlock holds at most 16 values a thread
// (rows up to 8192); at 32, the row, gamma's and beta's chunks and their addresses
// outgrow the 128 registers a 512-thread block allows, and spill.
inline RowPlan layer_norm_config(int64_t rows, int64_t cols, int elem_bytes, bool aligned, bool stream_vec,
                                 RowVariant variant = RowVariant::kAuto) {
  return rowwise::plan_rows("layer_norm", rows, cols, elem_bytes, aligned, stream_vec, variant,
                            /*max_block_regs=*/16);
}

// y = layer_norm(x) over the last dim of contiguous [rows, cols] tensors, and each row's
// mean and rstd = 1 / sqrt(biased var + eps) for backward. T: float, double, __half,
// __nv_bfloat16 (mean and rstd in compute_t<T>: float, or double). gamma and beta may be null.
template <class T>
void layer_norm(const T* x,          // [rows, cols] input
                const std::type_identity_t<T>* gamma,  // [cols] input, or null
                const std::type_identity_t<T>* beta,   // [cols] input, or null
                T* y,                // [rows, cols] output
                compute_t<T>* mean,      // [rows] output
                compute_t<T>* rstd,      // [rows] output
                int64_t rows, int64_t cols, double eps, cudaStream_t stream, RowVariant variant = RowVariant::kAuto) {
  using namespace rowwise;
  EMBER_CHECK(rows >= 0 && cols >= 0, "layer_norm: negative shape [", rows, ", ", cols, "]");
  EMBER_CHECK(rows == 0 || cols > 0, "layer_norm: ", rows, " rows of 0 elements have no mean");
  EMBER_CHECK(rows == 0 || (x && y && mean && rstd), "layer_norm: null pointer for a [", rows, ", ", cols, "] tensor");
  EMBER_CHECK(eps >= 0, "layer_norm: eps must be >= 0, got ", eps);
  if (rows == 0) return;
  const bool aligned = all_aligned16(x, gamma, beta, y), stream_vec = same_alignment(x, y);
  const RowPlan p = layer_norm_config(rows, cols, sizeof(T), aligned, stream_vec, variant);
  const compute_t<T> e = compute_t<T>(eps);
  switch (p.variant) {
    case RowVariant::kWarp:
      dispatch_pow2<1, kMaxWarpRow>(p.per_thread, [&](auto kp) {
        launch<layer_norm_warp_kernel<T, decltype(kp)::value>>(p.cfg, stream, x, gamma, beta, y, mean, rstd, rows,
                                                               cols, e, p.vec);
      });
      break;
    case RowVariant::kBlock:
      dispatch_pow2<kMinBlockRegs, kMaxBlockRegs<T, 16>>(p.per_thread, [&](auto kn) {
        constexpr int kN = decltype(kn)::value;
        LaunchConfig cfg = p.cfg;
        cfg.shared_bytes = norm_detail::block_shared_bytes<compute_t<T>>(kN);
        if (cfg.shared_bytes > 48 * 1024) allow_dynamic_shared<layer_norm_block_kernel<T, kN>>(cfg.shared_bytes);
        launch<layer_norm_block_kernel<T, kN>>(cfg, stream, x, gamma, beta, y, mean, rstd, rows, cols, e, p.vec);
      });
      break;
    default:
      launch<layer_norm_stream_kernel<T>>(p.cfg, stream, x, gamma, beta, y, mean, rstd, rows, cols, e, p.vec);
  }
}

}  // namespace ember::kernels::cuda
