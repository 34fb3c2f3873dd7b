// What the layer-norm kernels of norm.cuh (forward) and norm_backward.cuh share: their
// row plans' types, and the kBlock kernels' copies of gamma and beta in shared memory
// (Note [Parameter slots]) and blocks per SM (kPrefetchBlocks).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/rowwise.cuh"

namespace ember::kernels::cuda {

using rowwise::RowPlan;
using rowwise::RowVariant;

namespace norm_detail {

using namespace rowwise;

// Note [Parameter slots]. The kBlock kernels run each block over many rows, and every row
// multiplies by the same gamma (and adds the same beta). Read from global memory per row,
// as the warp kernels do, they were half of the forward's load requests (x, gamma, beta
// for one row of y) and a third of the backward's: cached in L1 or L2, but each a request
// and its sectors between L2 and the SM. So the block kernels copy the thread's columns
// of gamma and beta once, into its own slots of shared memory (slot k of thread t at
// k kMaxBlockThreads + t, as the backward's sums: a warp's 32 slots in 32 banks, immediate
// offsets from one register), and read them back each row. A thread reads and writes only
// its own slots, so they need no barrier; slots past cols hold 0 (read, never stored).
template <int kN, class T>
__device__ __forceinline__ void fill_param_slots(const T* p, compute_t<T>* slot, int64_t cols, bool vec) {
  using A = compute_t<T>;
  constexpr int kS = kMaxBlockThreads;
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) slot[k * kS] = A(0);
  if (p == nullptr) return;
  tile_for_each<kN, T>(cols, threadIdx.x, blockDim.x, vec, [&](int k, int64_t c, auto width) {
    constexpr int n = decltype(width)::value;
    A w[n];
    load<n>(p + c, w);
    EMBER_UNROLL
    for (int i = 0; i < n; ++i) slot[(k + i) * kS] = w[i];
  });
}

// Blocks of 512 threads per SM that layer_norm_block_kernel and its backward ask the
// compiler to fit (64 registers a thread): two, each with two rows' loads in flight, where
// the row and the prefetched one are 8 values a thread or fewer (ptxas sm_90, float32
// kN = 8: 74 registers uncapped, one block per SM); one for longer rows.
template <class T, int kN>
inline constexpr int kPrefetchBlocks = kN * sizeof(compute_t<T>) <= 32 ? 2 : 1;

}  // namespace norm_detail

}  // namespace ember::kernels::cuda
