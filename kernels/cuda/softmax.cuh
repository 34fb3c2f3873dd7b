// softmax and log_softmax over the last dim of a contiguous [rows, cols] tensor, and their
// backward passes. (The fused cross-entropy loss is in cross_entropy.cuh.)
//
// Every kernel is memory-bound: its comment gives the bytes it moves per element (float32:
// s = 4; bfloat16 / float16: s = 2; float64: s = 8), the figure a benchmark divides by the
// time and compares with the bandwidth (H200: 4.8 TB/s). Rows use one of the three
// variants of Note [Row variants] (rowwise.cuh). Each row's max and normalizer come from
// one read as an online pair (kernels/common/softmax_ops.h), merged across lanes in a fixed
// order: results are deterministic. Compute is in float (double for float64).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/rowwise.cuh"

namespace ember::kernels::cuda {

using rowwise::RowPlan;
using rowwise::RowVariant;

namespace softmax_detail {

using namespace rowwise;

// One row held in registers by `lanes` threads (Red reduces over them): y = softmax(x),
// or log_softmax(x). A thread of a dead row (past the last) passes cols = 0.
template <bool kLog, int kN, class Red, class T>
__device__ __forceinline__ void softmax_row(const T* x, T* y, int64_t cols, int rank, int lanes, bool vec) {
  using A = compute_t<T>;
  A v[kN];
  tile_load<kN>(x, cols, rank, lanes, vec, v, A(-INFINITY));
  if constexpr (kLog) {
    OnlineSoftmax<A> st = OnlineSoftmax<A>::empty();
    st.add(v, kN);
    st = Red::merge(st);
    // (x - max) - log(sum), as PyTorch: x - max is exact near the max, where x - lse
    // would lose lse's rounding (ulp(|x|)) to cancellation.
    const A shift = OnlineSoftmax<A>::shift(st.max), log_sum = log_acc(st.sum);
    EMBER_UNROLL
    for (int k = 0; k < kN; ++k) v[k] = (v[k] - shift) - log_sum;
  } else {
    // The thread's exps are kept and rescaled: one exp per value, not two. Napkin math,
    // not measured: bfloat16 at 4.8 TB/s is 1.2e12 values/s; two exps each would be over
    // half of an H200's ~4e12 ex2/s.
    const OnlineSoftmax<A> mine = OnlineSoftmax<A>::of_exps(v, kN);
    const A scale = mine.exp_scale(Red::merge(mine));
    EMBER_UNROLL
    for (int k = 0; k < kN; ++k) v[k] *= scale;
  }
  tile_store<kN>(y, cols, rank, lanes, vec, v);
}

// dx from y = softmax(x) or log_softmax(x) and dy, the row in registers.
template <bool kLog, int kN, class Red, class T>
__device__ __forceinline__ void softmax_backward_row(const T* y, const T* dy, T* dx, int64_t cols, int rank, int lanes,
                                                     bool vec) {
  using A = compute_t<T>;
  A yv[kN], g[kN];
  tile_load<kN>(y, cols, rank, lanes, vec, yv, A(0));
  tile_load<kN>(dy, cols, rank, lanes, vec, g, A(0));
  A s = 0;  // log: sum dy; softmax: sum dy * y (padding adds zeros)
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) s += kLog ? g[k] : g[k] * yv[k];
  s = Red::sum(s);
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) g[k] = kLog ? g[k] - exp_acc(yv[k]) * s : yv[k] * (g[k] - s);
  tile_store<kN>(dx, cols, rank, lanes, vec, g);
}

}  // namespace softmax_detail

// --- softmax / log_softmax forward -----------------------------------------------------------

// kWarp: groups of kW = min(kP, 32) lanes, one row each, kP / kW registers a lane.
// Memory-bound: reads s and writes s bytes per element (2s).
template <class T, int kP, bool kLog>
__global__ void __launch_bounds__(rowwise::kWarpRowBlock)
    softmax_warp_kernel(const T* __restrict__ x,  // [rows, cols] input
                        T* __restrict__ y,        // [rows, cols] output
                        int64_t rows, int64_t cols, bool vec) {
  constexpr int kW = kP < 32 ? kP : 32, kN = kP / kW;
  rowwise::for_each_warp_row<kW>(rows, [&](int64_t row, bool live, int rank) {
    const int64_t at = row * cols;
    softmax_detail::softmax_row<kLog, kN, rowwise::SubWarp<kW>>(x + at, y + at, live ? cols : 0, rank, kW, vec);
  });
}

// kBlock: a block per row, kN registers a thread. Memory-bound: 2s bytes per element.
template <class T, int kN, bool kLog>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads)
    softmax_block_kernel(const T* __restrict__ x,  // [rows, cols] input
                         T* __restrict__ y,        // [rows, cols] output
                         int64_t rows, int64_t cols, bool vec) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
    softmax_detail::softmax_row<kLog, kN, rowwise::BlockPerRow>(x + row * cols, y + row * cols, cols, threadIdx.x,
                                                                blockDim.x, vec);
}

// kStream: a block per row, the row read twice (the online pair, then the output; the
// second read often hits L2). Memory-bound: 3s bytes per element (2s from DRAM when the
// row stays in L2).
template <class T, bool kLog>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads)
    softmax_stream_kernel(const T* __restrict__ x,  // [rows, cols] input
                          T* __restrict__ y,        // [rows, cols] output
                          int64_t rows, int64_t cols, bool vec) {
  using namespace rowwise;
  using A = compute_t<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    OnlineSoftmax<A> st = OnlineSoftmax<A>::empty();
    for_each_chunk(xr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A v[n];
      load<n>(xr + c, v);
      st.add(v, n);
    });
    st = block_merge(st);
    const A shift = OnlineSoftmax<A>::shift(st.max), log_sum = log_acc(st.sum), inv = A(1) / st.sum;
    for_each_chunk(xr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A v[n];
      load<n>(xr + c, v);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) v[i] = kLog ? (v[i] - shift) - log_sum : exp_acc(v[i] - shift) * inv;
      store<n>(yr + c, v);
    });
  }
}

// --- softmax / log_softmax backward ------------------------------------------------------------
// softmax:     dx = y * (dy - sum(dy * y))
// log_softmax: dx = dy - exp(y) * sum(dy)

// kWarp (see softmax_warp_kernel). Memory-bound: reads y and dy, writes dx: 3s bytes per element.
template <class T, int kP, bool kLog>
__global__ void __launch_bounds__(rowwise::kWarpRowBlock)
    softmax_backward_warp_kernel(const T* __restrict__ y,   // [rows, cols] input: the forward's output
                                 const T* __restrict__ dy,  // [rows, cols] input
                                 T* __restrict__ dx,        // [rows, cols] output
                                 int64_t rows, int64_t cols, bool vec) {
  constexpr int kW = kP < 32 ? kP : 32, kN = kP / kW;
  rowwise::for_each_warp_row<kW>(rows, [&](int64_t row, bool live, int rank) {
    const int64_t at = row * cols;
    softmax_detail::softmax_backward_row<kLog, kN, rowwise::SubWarp<kW>>(y + at, dy + at, dx + at, live ? cols : 0,
                                                                          rank, kW, vec);
  });
}

// kBlock. Memory-bound: 3s bytes per element.
template <class T, int kN, bool kLog>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads)
    softmax_backward_block_kernel(const T* __restrict__ y,   // [rows, cols] input
                                  const T* __restrict__ dy,  // [rows, cols] input
                                  T* __restrict__ dx,        // [rows, cols] output
                                  int64_t rows, int64_t cols, bool vec) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
    softmax_detail::softmax_backward_row<kLog, kN, rowwise::BlockPerRow>(y + row * cols, dy + row * cols,
                                                                         dx + row * cols, cols, threadIdx.x,
                                                                         blockDim.x, vec);
}

// kStream: y and dy read twice. Memory-bound: 5s bytes per element (3s from DRAM when the
// row stays in L2).
template <class T, bool kLog>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads)
    softmax_backward_stream_kernel(const T* __restrict__ y,   // [rows, cols] input
                                   const T* __restrict__ dy,  // [rows, cols] input
                                   T* __restrict__ dx,        // [rows, cols] output
                                   int64_t rows, int64_t cols, bool vec) {
  using namespace rowwise;
  using A = compute_t<T>;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* yr = y + row * cols;
    const T* gr = dy + row * cols;
    T* dr = dx + row * cols;
    A s = 0;
    for_each_chunk(yr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A yv[n], g[n];
      load<n>(yr + c, yv);
      load<n>(gr + c, g);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) s += kLog ? g[i] : g[i] * yv[i];
    });
    s = block_sum(s);
    for_each_chunk(yr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A yv[n], g[n];
      load<n>(yr + c, yv);
      load<n>(gr + c, g);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) g[i] = kLog ? g[i] - exp_acc(yv[i]) * s : yv[i] * (g[i] - s);
      store<n>(dr + c, g);
    });
  }
}

// --- Host side -----------------------------------------------------------------------------------

// The plan (variant, registers, vectors, launch configuration) of every softmax kernel.
inline RowPlan softmax_config(int64_t rows, int64_t cols, int elem_bytes, bool aligned, bool stream_vec,
                              RowVariant variant = RowVariant::kAuto) {
  // Backward keeps two arrays in registers: kN <= 32 still fits a 512-thread block.
  return rowwise::plan_rows("softmax", rows, cols, elem_bytes, aligned, stream_vec, variant);
}

namespace softmax_detail {

template <bool kLog, class T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream, RowVariant variant) {
  const char* op = kLog ? "log_softmax" : "softmax";
  EMBER_CHECK(rows >= 0 && cols >= 0, op, ": negative shape [", rows, ", ", cols, "]");
  EMBER_CHECK(rows == 0 || cols == 0 || (x != nullptr && y != nullptr), op, ": null pointer for a [", rows, ", ",
              cols, "] tensor");
  if (rows == 0 || cols == 0) return;
  const bool aligned = all_aligned16(x, y), stream_vec = same_alignment(x, y);
  const RowPlan p = softmax_config(rows, cols, sizeof(T), aligned, stream_vec, variant);
  switch (p.variant) {
    case RowVariant::kWarp:
      dispatch_pow2<1, kMaxWarpRow>(p.per_thread, [&](auto kp) {
        launch<softmax_warp_kernel<T, decltype(kp)::value, kLog>>(p.cfg, stream, x, y, rows, cols, p.vec);
      });
      break;
    case RowVariant::kBlock:
      dispatch_pow2<kMinBlockRegs, kMaxBlockRegs<T, 32>>(p.per_thread, [&](auto kn) {
        launch<softmax_block_kernel<T, decltype(kn)::value, kLog>>(p.cfg, stream, x, y, rows, cols, p.vec);
      });
      break;
    default:
      launch<softmax_stream_kernel<T, kLog>>(p.cfg, stream, x, y, rows, cols, p.vec);
  }
}

template <bool kLog, class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, cudaStream_t stream,
                      RowVariant variant) {
  const char* op = kLog ? "log_softmax_backward" : "softmax_backward";
  EMBER_CHECK(rows >= 0 && cols >= 0, op, ": negative shape [", rows, ", ", cols, "]");
  EMBER_CHECK(rows == 0 || cols == 0 || (y != nullptr && dy != nullptr && dx != nullptr), op,
              ": null pointer for a [", rows, ", ", cols, "] tensor");
  if (rows == 0 || cols == 0) return;
  const bool aligned = all_aligned16(y, dy, dx), stream_vec = same_alignment(y, dy, dx);
  const RowPlan p = softmax_config(rows, cols, sizeof(T), aligned, stream_vec, variant);
  switch (p.variant) {
    case RowVariant::kWarp:
      dispatch_pow2<1, kMaxWarpRow>(p.per_thread, [&](auto kp) {
        launch<softmax_backward_warp_kernel<T, decltype(kp)::value, kLog>>(p.cfg, stream, y, dy, dx, rows, cols,
                                                                          p.vec);
      });
      break;
    case RowVariant::kBlock:
      dispatch_pow2<kMinBlockRegs, kMaxBlockRegs<T, 32>>(p.per_thread, [&](auto kn) {
        launch<softmax_backward_block_kernel<T, decltype(kn)::value, kLog>>(p.cfg, stream, y, dy, dx, rows, cols,
                                                                           p.vec);
      });
      break;
    default:
      launch<softmax_backward_stream_kernel<T, kLog>>(p.cfg, stream, y, dy, dx, rows, cols, p.vec);
  }
}

}  // namespace softmax_detail

// y = softmax(x) over the last dim of contiguous [rows, cols] tensors. T: float, double,
// __half, __nv_bfloat16 (computed in float). Any alignment; variant forces a kernel
// (Note [Row variants]).
template <class T>
void softmax(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream,
             RowVariant variant = RowVariant::kAuto) {
  softmax_detail::softmax_forward<false>(x, y, rows, cols, stream, variant);
}
template <class T>
void log_softmax(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream,
                 RowVariant variant = RowVariant::kAuto) {
  softmax_detail::softmax_forward<true>(x, y, rows, cols, stream, variant);
}
// dx from the forward's output y and the gradient dy of y.
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, cudaStream_t stream,
                      RowVariant variant = RowVariant::kAuto) {
  softmax_detail::softmax_backward<false>(y, dy, dx, rows, cols, stream, variant);
}
template <class T>
void log_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols, cudaStream_t stream,
                          RowVariant variant = RowVariant::kAuto) {
  softmax_detail::softmax_backward<true>(y, dy, dx, rows, cols, stream, variant);
}

}  // namespace ember::kernels::cuda

