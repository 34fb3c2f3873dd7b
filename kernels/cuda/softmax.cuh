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

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/rowwise.cuh"

namespace ember::kernels::cuda {

using rowwise::RowPlan;
using rowwise::RowVariant;

namespace softmax_detail {

using namespace rowwise;

// Threads of the kStream kernels: a block per row, often the only one on its SM when it
// keeps a long row in shared memory, so as many threads as a block may have (4 vectors a
// thread in flight: 64 KiB per SM).
inline constexpr int kStreamThreads = 1024;

// The kSplit form of the kStream forward (softmax_split_kernel): kSplitRegs<T> compute
// values a thread in registers, 512 threads, the rest of the row in shared memory.
template <class T>
inline constexpr int kSplitRegs = sizeof(compute_t<T>) == 8 ? 12 : 24;
inline constexpr int kSplitThreads = 512;

// The kSplit form of the kStream backward (softmax_backward_split_kernel): kSplitBwdRegs<T>
// compute values a thread of y and as many of dy in registers, kSplitBwdThreads threads
// (one block an SM, 64 registers a thread), the rest of both rows in shared memory.
template <class T>
inline constexpr int kSplitBwdRegs = sizeof(compute_t<T>) == 8 ? 6 : 16;
inline constexpr int kSplitBwdThreads = 1024;

// n values into the kept row (shared memory; rowwise::store is for global outputs).
template <int n, class T>
__device__ __forceinline__ void keep_store(T* p, const compute_t<T>* v) {
  if constexpr (n == 1) {
    p[0] = round_to<T>(v[0]);
  } else {
    Pack<T> pk;
    EMBER_UNROLL
    for (int i = 0; i < n; ++i) pk.v[i] = round_to<T>(v[i]);
    store_vec(p, pk);
  }
}

// Elements from row's 16-byte boundary: the kept row is stored from kept + this, so that
// its vectors are aligned where the row's are.
template <class T>
__device__ __forceinline__ int kept_shift(const T* row) {
  return int((reinterpret_cast<uintptr_t>(row) / sizeof(T)) % kVec<T>);
}

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

// kStream: a block per row of kStreamThreads, two passes over the row (the online pair,
// then the output). Where the row fits in shared memory (keep: the launch gives
// kept_row_bytes of it), the first pass leaves it there and the second reads it back, so
// global memory is read once: 2s bytes per element. Otherwise the second pass reads the
// row again (3s bytes per element, 2s from DRAM when the row stays in L2). Each thread
// reads back only the chunks it stored (the same for_each_chunk walk), so the kept row
// needs no barrier of its own.
// On an H200 (2026-12-04) the re-reading form ran [2048, 32768] float32 at 52% of the
// datasheet: 528 blocks held 69 MB of rows at once, more than the 50 MB L2.
template <class T, bool kLog>
__global__ void __launch_bounds__(softmax_detail::kStreamThreads)
    softmax_stream_kernel(const T* __restrict__ x,  // [rows, cols] input
                          T* __restrict__ y,        // [rows, cols] output
                          int64_t rows, int64_t cols, bool vec, bool keep) {
  using namespace rowwise;
  using A = compute_t<T>;
  EMBER_DYNAMIC_SHARED(T, kept);  // [cols + kVec<T>] when keep
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    // kept[c + shift] is 16-byte aligned wherever xr + c is.
    T* const kr = kept + softmax_detail::kept_shift(xr);
    OnlineSoftmax<A> st = OnlineSoftmax<A>::empty();
    for_each_chunk(xr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A v[n];
      load<n>(xr + c, v);
      if (keep) softmax_detail::keep_store<n>(kr + c, v);
      st.add(v, n);
    });
    st = block_merge(st);
    const A shift = OnlineSoftmax<A>::shift(st.max), log_sum = log_acc(st.sum), inv = A(1) / st.sum;
    for_each_chunk(xr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A v[n];
      load<n>((keep ? static_cast<const T*>(kr) : xr) + c, v);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) v[i] = kLog ? (v[i] - shift) - log_sum : exp_acc(v[i] - shift) * inv;
      store<n>(yr + c, v);
    });
  }
}

// kSplit: the kStream forward for rows too long for two kept rows an SM (float32 past
// ~28000 columns: [*, 32768] kept whole is 128 KiB, one 1024-thread block per SM, which
// reads its row, stalls at the block reduction, then writes, with nothing else on the SM
// to fill the bubbles). Here each of 512 threads keeps kR values of the row's head in
// registers (the kBlock tile layout: 12288 float32 values, 48 KiB a block) and the rest
// (from column kR * 512) in shared memory, 80 KiB at 32768 float32; two blocks fit an SM
// (64 registers a thread, 2 x 82 KiB of shared memory), so one block's loads are in
// flight while the other reduces or stores. Rows 16-byte aligned with cols % kVec == 0 and
// cols > kR * blockDim.x (the host's plan). Each thread reads back only the shared
// chunks it stored, so the kept part needs no barrier of its own (as kStream).
// Memory-bound: 2s bytes per element.
template <class T, bool kLog>
__global__ void __launch_bounds__(softmax_detail::kSplitThreads, 2)
    softmax_split_kernel(const T* __restrict__ x,  // [rows, cols] input
                         T* __restrict__ y,        // [rows, cols] output
                         int64_t rows, int64_t cols) {
  using namespace rowwise;
  using A = compute_t<T>;
  constexpr int kR = softmax_detail::kSplitRegs<T>, V = kVec<T>;
  EMBER_DYNAMIC_SHARED(T, kept);  // [cols - kR * blockDim.x]: the row past the registers' part
  const int64_t head = int64_t(kR) * blockDim.x, step = int64_t(blockDim.x) * V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    T* yr = y + row * cols;
    A v[kR];
    tile_load<kR>(xr, cols, threadIdx.x, blockDim.x, true, v, A(-INFINITY));
    // softmax: v becomes exp(v - mine.max), scaled at the end (one exp a value, as kBlock).
    const OnlineSoftmax<A> mine = kLog ? OnlineSoftmax<A>::empty() : OnlineSoftmax<A>::of_exps(v, kR);
    OnlineSoftmax<A> st = mine;
    if (kLog) st.add(v, kR);
    EMBER_UNROLL_BY(4)
    for (int64_t c = head + int64_t(threadIdx.x) * V; c < cols; c += step) {
      A w[V];
      load<V>(xr + c, w);
      softmax_detail::keep_store<V>(kept + (c - head), w);
      st.add(w, V);
    }
    st = block_merge(st);
    const A shift = OnlineSoftmax<A>::shift(st.max), log_sum = log_acc(st.sum), inv = A(1) / st.sum;
    if (kLog) {
      EMBER_UNROLL
      for (int k = 0; k < kR; ++k) v[k] = (v[k] - shift) - log_sum;
    } else {
      const A scale = mine.exp_scale(st);
      EMBER_UNROLL
      for (int k = 0; k < kR; ++k) v[k] *= scale;
    }
    tile_store<kR>(yr, cols, threadIdx.x, blockDim.x, true, v);
    EMBER_UNROLL_BY(4)
    for (int64_t c = head + int64_t(threadIdx.x) * V; c < cols; c += step) {
      A w[V];
      load<V>(kept + (c - head), w);
      EMBER_UNROLL
      for (int i = 0; i < V; ++i) w[i] = kLog ? (w[i] - shift) - log_sum : exp_acc(w[i] - shift) * inv;
      store<V>(yr + c, w);
    }
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

// kStream: y and dy read in two passes; y kept in shared memory between them where it fits
// (keep, as the forward), dy read again. Memory-bound: 3s bytes per element from DRAM
// when dy's second read hits L2 (with a row kept, one or two blocks per SM hold their
// rows: 132 rows of [*, 32768] float32 dy are 17 MB), 5s at worst.
template <class T, bool kLog>
__global__ void __launch_bounds__(softmax_detail::kStreamThreads)
    softmax_backward_stream_kernel(const T* __restrict__ y,   // [rows, cols] input
                                   const T* __restrict__ dy,  // [rows, cols] input
                                   T* __restrict__ dx,        // [rows, cols] output
                                   int64_t rows, int64_t cols, bool vec, bool keep) {
  using namespace rowwise;
  using A = compute_t<T>;
  EMBER_DYNAMIC_SHARED(T, kept);  // [cols + kVec<T>] when keep
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* yr = y + row * cols;
    const T* gr = dy + row * cols;
    T* dr = dx + row * cols;
    T* const kr = kept + softmax_detail::kept_shift(yr);
    A s = 0;
    for_each_chunk(yr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A yv[n], g[n];
      load<n>(yr + c, yv);
      load<n>(gr + c, g);
      if (keep) softmax_detail::keep_store<n>(kr + c, yv);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) s += kLog ? g[i] : g[i] * yv[i];
    });
    s = block_sum(s);
    for_each_chunk(yr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A yv[n], g[n];
      load<n>((keep ? static_cast<const T*>(kr) : yr) + c, yv);
      load<n>(gr + c, g);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) g[i] = kLog ? g[i] - exp_acc(yv[i]) * s : yv[i] * (g[i] - s);
      store<n>(dr + c, g);
    });
  }
}

// kSplit backward: kStream's backward kept y and read dy twice (the second time from L2,
// when it was still there). Here nothing is read twice: each of 1024 threads keeps kR
// values of y and kR of dy of the row's head in registers (the kBlock tile layout: 16384
// float32 columns, 128 KiB of y and dy a block) and the rest of both (from column
// kR * 1024) in shared memory, 128 KiB at [*, 32768] float32; one block an SM (all of its
// 64K registers). Rows 16-byte aligned with cols % kVec == 0 and cols > kR * blockDim.x
// (the host's plan). Each thread reads back only the shared chunks it stored, so the kept
// part needs no barrier of its own (as kStream). Memory-bound: 3s bytes per element.
template <class T, bool kLog>
__global__ void __launch_bounds__(softmax_detail::kSplitBwdThreads, 1)
    softmax_backward_split_kernel(const T* __restrict__ y,   // [rows, cols] input
                                  const T* __restrict__ dy,  // [rows, cols] input
                                  T* __restrict__ dx,        // [rows, cols] output
                                  int64_t rows, int64_t cols) {
  using namespace rowwise;
  using A = compute_t<T>;
  constexpr int kR = softmax_detail::kSplitBwdRegs<T>, V = kVec<T>;
  EMBER_DYNAMIC_SHARED(T, kept);  // [2][cols - kR * blockDim.x]: y's and dy's rows past the registers' part
  const int64_t head = int64_t(kR) * blockDim.x, step = int64_t(blockDim.x) * V, rest = cols - head;
  T* const kept_y = kept;
  T* const kept_g = kept + rest;  // rest % V == 0: 16-byte aligned
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* yr = y + row * cols;
    const T* gr = dy + row * cols;
    T* dr = dx + row * cols;
    A yv[kR], g[kR];
    tile_load<kR>(yr, cols, threadIdx.x, blockDim.x, true, yv, A(0));
    tile_load<kR>(gr, cols, threadIdx.x, blockDim.x, true, g, A(0));
    A s = 0;  // log: sum dy; softmax: sum dy * y
    EMBER_UNROLL_BY(2)
    for (int64_t c = head + int64_t(threadIdx.x) * V; c < cols; c += step) {
      A w[V], h[V];
      load<V>(yr + c, w);
      load<V>(gr + c, h);
      softmax_detail::keep_store<V>(kept_y + (c - head), w);
      softmax_detail::keep_store<V>(kept_g + (c - head), h);
      EMBER_UNROLL
      for (int i = 0; i < V; ++i) s += kLog ? h[i] : h[i] * w[i];
    }
    A t = 0;  // the registers' part last, so that its loads overlap the streamed part
    EMBER_UNROLL
    for (int k = 0; k < kR; ++k) t += kLog ? g[k] : g[k] * yv[k];
    s = block_sum(s + t);
    EMBER_UNROLL
    for (int k = 0; k < kR; ++k) g[k] = kLog ? g[k] - exp_acc(yv[k]) * s : yv[k] * (g[k] - s);
    tile_store<kR>(dr, cols, threadIdx.x, blockDim.x, true, g);
    EMBER_UNROLL_BY(2)
    for (int64_t c = head + int64_t(threadIdx.x) * V; c < cols; c += step) {
      A w[V], h[V];
      load<V>(kept_y + (c - head), w);
      load<V>(kept_g + (c - head), h);
      EMBER_UNROLL
      for (int i = 0; i < V; ++i) h[i] = kLog ? h[i] - exp_acc(w[i]) * s : w[i] * (h[i] - s);
      store<V>(dr + c, h);
    }
  }
}

// --- Host side -----------------------------------------------------------------------------------

namespace softmax_detail {

// The device's shared memory: what one block may opt in to, and what an SM holds.
inline size_t block_shared_optin() {
#if defined(__CUDACC__)
  int device = 0, bytes = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return size_t(bytes);
#else
  return ::ember::emu::device_properties().max_dynamic_shared_optin;
#endif
}
inline size_t sm_shared() {
#if defined(__CUDACC__)
  int device = 0, bytes = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  return size_t(bytes);
#else
  return ::ember::emu::device_properties().max_dynamic_shared_optin + 1024;
#endif
}

// Room left for the kernels' static shared memory (block_merge's, block_sum's) and the
// block's reserved kilobyte.
inline constexpr size_t kStaticShared = 2048;

// Dynamic shared bytes a kStream kernel keeps a row of `cols` elements in; 0 where the
// row does not fit in a block's shared memory.
inline size_t kept_row_bytes(int64_t cols, int elem_bytes) {
  const size_t bytes = size_t(cols + 16 / elem_bytes) * size_t(elem_bytes);
  return bytes + kStaticShared <= block_shared_optin() ? bytes : 0;
}

}  // namespace softmax_detail

// The plan (variant, registers, vectors, launch configuration) of every softmax kernel.
// kStream takes blocks of up to kStreamThreads, as many per SM as their kept rows leave
// room for (one for a [*, 32768] float32 row of 128 KiB), and the kept row's shared bytes.
// forward: the plan of softmax / log_softmax (which may take kSplit: per_thread is then
// its kSplitRegs, 0 for the other kStream forms), else of their backward (whose kSplit
// has per_thread kSplitBwdRegs).
inline RowPlan softmax_config(int64_t rows, int64_t cols, int elem_bytes, bool aligned, bool stream_vec,
                              RowVariant variant = RowVariant::kAuto, bool forward = false) {
  // Backward keeps two arrays in registers: kN <= 32 still fits a 512-thread block.
  RowPlan p = rowwise::plan_rows("softmax", rows, cols, elem_bytes, aligned, stream_vec, variant);
  if (p.variant == RowVariant::kStream) {
    using namespace softmax_detail;
    const int64_t V = 16 / elem_bytes;
    int64_t threads = rowwise::round_up((cols + 4 * V - 1) / (4 * V), 32);  // 4 vectors a thread at least
    threads = threads < 32 ? 32 : (threads > kStreamThreads ? kStreamThreads : threads);
    const size_t kept = kept_row_bytes(cols, elem_bytes);
    int64_t per_sm = 2048 / threads;
    if (kept > 0) {
      const int64_t fit = int64_t(sm_shared() / (kept + kStaticShared));
      per_sm = std::max<int64_t>(1, std::min(per_sm, fit));
    }
    p.per_thread = 0;
    p.cfg = {dim3(grid_stride_blocks(rows, 1, int(per_sm))), dim3(unsigned(threads)), kept};
    // kSplit where a kept row leaves one block an SM and two split ones fit.
    const int regs = elem_bytes == 8 ? kSplitRegs<double> : kSplitRegs<float>;
    const int64_t head = int64_t(regs) * kSplitThreads;
    if (forward && per_sm < 2 && aligned && cols % V == 0 && cols > head) {
      const size_t rest = size_t(cols - head) * size_t(elem_bytes);
      if (2 * (rest + kStaticShared) <= sm_shared()) {
        p.per_thread = regs;
        p.vec = true;
        p.cfg = {dim3(grid_stride_blocks(rows, 1, 2)), dim3(kSplitThreads), rest};
      }
    }
    // The backward's kSplit where a kept y leaves one block an SM (kStream would read dy twice).
    const int bwd_regs = elem_bytes == 8 ? kSplitBwdRegs<double> : kSplitBwdRegs<float>;
    const int64_t bwd_head = int64_t(bwd_regs) * kSplitBwdThreads;
    if (!forward && per_sm < 2 && aligned && cols % V == 0 && cols > bwd_head) {
      const size_t rest = 2 * size_t(cols - bwd_head) * size_t(elem_bytes);
      if (rest + kStaticShared <= block_shared_optin()) {
        p.per_thread = bwd_regs;
        p.vec = true;
        p.cfg = {dim3(grid_stride_blocks(rows, 1, 1)), dim3(kSplitBwdThreads), rest};
      }
    }
  }
  return p;
}

namespace softmax_detail {

// Launches a kStream kernel with the plan's shared memory (keep when it has some).
template <auto Kernel, class... Args>
void launch_stream(const RowPlan& p, cudaStream_t stream, Args&&... args) {
  if (p.cfg.shared_bytes > 0) allow_dynamic_shared<Kernel>(p.cfg.shared_bytes);
  launch<Kernel>(p.cfg, stream, static_cast<Args&&>(args)..., p.cfg.shared_bytes > 0);
}

template <bool kLog, class T>
void softmax_forward(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream, RowVariant variant) {
  const char* op = kLog ? "log_softmax" : "softmax";
  EMBER_CHECK(rows >= 0 && cols >= 0, op, ": negative shape [", rows, ", ", cols, "]");
  EMBER_CHECK(rows == 0 || cols == 0 || (x != nullptr && y != nullptr), op, ": null pointer for a [", rows, ", ",
              cols, "] tensor");
  if (rows == 0 || cols == 0) return;
  const bool aligned = all_aligned16(x, y), stream_vec = same_alignment(x, y);
  const RowPlan p = softmax_config(rows, cols, sizeof(T), aligned, stream_vec, variant, /*forward=*/true);
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
      if (p.per_thread > 0) {  // kSplit
        allow_dynamic_shared<softmax_split_kernel<T, kLog>>(p.cfg.shared_bytes);
        launch<softmax_split_kernel<T, kLog>>(p.cfg, stream, x, y, rows, cols);
      } else {
        launch_stream<softmax_stream_kernel<T, kLog>>(p, stream, x, y, rows, cols, p.vec);
      }
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
      if (p.per_thread > 0) {  // kSplit
        allow_dynamic_shared<softmax_backward_split_kernel<T, kLog>>(p.cfg.shared_bytes);
        launch<softmax_backward_split_kernel<T, kLog>>(p.cfg, stream, y, dy, dx, rows, cols);
      } else {
        launch_stream<softmax_backward_stream_kernel<T, kLog>>(p, stream, y, dy, dx, rows, cols, p.vec);
      }
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

