// Batch-norm statistics: per-channel mean, biased variance (what training normalizes
// with) and unbiased variance (what PyTorch puts in running_var) over N, H and W of a
// contiguous NCHW tensor ([N, C] is H = W = 1), optionally updating the running
// statistics in place: r = (1 - momentum) r + momentum * stat.
//
// Deterministic and stable: each channel's N * H * W values are cut into fixed segments of
// planes; a block folds its segments into one Welford (count, mean, M2) with Chan's merge
// (kernels/common/norm_ops.h), in an order fixed by the launch shape, and a second kernel
// merges each channel's partials in order. No atomics, no sum of squares.
//
// Note [Shifted statistics]
// The Welford states are of x - K, K the channel's first value: Chan's merge takes
// differences of means, and means near 1e3 would carry eps * 1e3 of rounding into every
// difference; shifted, they carry eps of the spread. x - K is exact within a factor of 2.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/rowwise.cuh"

namespace ember::kernels::cuda {


// Segments of one plane (H * W contiguous values) hold at most this many values.
inline constexpr int64_t kBatchNormSegment = 8192;

// Segments up to this long go to a warp each (several planes at once); longer ones to the block.
inline constexpr int64_t kBatchNormWarpSegment = 2048;

// Partial statistics: work item `item` = channel * splits + split folds segments
// [split * per, (split + 1) * per) of the channel's n * pieces segments (segment j: plane
// n = j / pieces, values [(j % pieces) * kBatchNormSegment, ...) of it), a segment per
// warp (warp_segments) or per block at a time. Memory-bound: reads s bytes per element
// (s = sizeof(T)), every segment peeled to 16-byte vectors.
template <class T>
__global__ void __launch_bounds__(256)
    batch_norm_stats_kernel(const T* __restrict__ x,  // [n, c, hw] input
                            int64_t n, int64_t c, int64_t hw, int64_t splits, int64_t per, int64_t pieces,
                            bool warp_segments,
                            int64_t* __restrict__ part_count,   // [c, splits] output
                            compute_t<T>* __restrict__ part_mean,   // [c, splits] output
                            compute_t<T>* __restrict__ part_m2) {   // [c, splits] output
  using namespace rowwise;
  using A = compute_t<T>;
  const int lanes = warp_segments ? 32 : int(blockDim.x);
  const int group = threadIdx.x / lanes, groups = blockDim.x / lanes, rank = threadIdx.x % lanes;
  for (int64_t item = blockIdx.x; item < c * splits; item += gridDim.x) {
    const int64_t ch = item / splits, split = item % splits;
    const int64_t first = split * per, last = (split + 1) * per < n * pieces ? (split + 1) * per : n * pieces;
    const A shift = widen(x[ch * hw]);  // Note [Shifted statistics]
    Welford<A> w = Welford<A>::empty();
    for (int64_t seg = first + group; seg < last; seg += groups) {
      const int64_t plane = seg / pieces, lo = (seg % pieces) * kBatchNormSegment;
      const int64_t len = hw - lo < kBatchNormSegment ? hw - lo : kBatchNormSegment;
      const T* p = x + (plane * c + ch) * hw + lo;
      for_each_chunk(p, len, rank, lanes, true, [&](int64_t col, auto width) {
        constexpr int k = decltype(width)::value;
        A v[k];
        load<k>(p + col, v);
        EMBER_UNROLL
        for (int i = 0; i < k; ++i) v[i] -= shift;
        w = w.merge(Welford<A>::of(v, k));
      });
    }
    w = block_welford(w);
    if (threadIdx.x == 0) {
      part_count[item] = w.count;
      part_mean[item] = w.mean;
      part_m2[item] = w.m2;
    }
  }
}

// Merges each channel's partials in split order and writes the statistics (NaN mean and
// variances for a channel without values, as PyTorch's mean of nothing). Reads 8 + 2
// sizeof(acc) bytes per partial.
template <class T, class A = compute_t<T>>
__global__ void batch_norm_stats_finish_kernel(const T* __restrict__ x,                 // [n, c, hw] input: the shifts
                                               int64_t hw,
                                               const int64_t* __restrict__ part_count,  // [c, splits] input
                                               const A* __restrict__ part_mean,        // [c, splits] input
                                               const A* __restrict__ part_m2,          // [c, splits] input
                                               int64_t c, int64_t splits, A momentum,
                                               A* __restrict__ mean,           // [c] output
                                               A* __restrict__ var,            // [c] output, biased
                                               A* __restrict__ var_unbiased,   // [c] output, or null
                                               A* __restrict__ running_mean,   // [c] in/out, or null
                                               A* __restrict__ running_var) {  // [c] in/out, or null
  using W = ops::Welford<A>;
  for (int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; ch < c; ch += int64_t(gridDim.x) * blockDim.x) {
    W w = W::empty();
    for (int64_t s = 0; s < splits; ++s) {
      const int64_t i = ch * splits + s;
      w = w.merge(W{part_count[i], part_mean[i], part_m2[i]});
    }
    const A m = w.count > 0 ? widen(x[ch * hw]) + w.mean : A(NAN), unbiased = w.variance(1);
    mean[ch] = m;
    var[ch] = w.variance(0);
    if (var_unbiased != nullptr) var_unbiased[ch] = unbiased;
    if (running_mean != nullptr) running_mean[ch] = (A(1) - momentum) * running_mean[ch] + momentum * m;
    if (running_var != nullptr) running_var[ch] = (A(1) - momentum) * running_var[ch] + momentum * unbiased;
  }
}

// --- Host side -----------------------------------------------------------------------------------

struct BatchNormStatsPlan {
  int64_t pieces = 1;  // segments per plane
  int64_t splits = 1;  // work items per channel
  int64_t per = 0;     // segments per work item
  bool warp_segments = false;
  LaunchConfig cfg;
};

// Enough work items to fill the device (8 blocks per SM) without cutting a channel finer
// than its segments.
inline BatchNormStatsPlan batch_norm_stats_config(int64_t n, int64_t c, int64_t hw) {
  EMBER_CHECK(n >= 0 && c >= 0 && hw >= 0, "batch_norm_stats: negative shape [", n, ", ", c, ", ", hw, "]");
  BatchNormStatsPlan p;
  p.pieces = hw > kBatchNormSegment ? (hw + kBatchNormSegment - 1) / kBatchNormSegment : 1;
  const int64_t segments = n * p.pieces;
  const int64_t target = int64_t(sm_count()) * 8;
  int64_t splits = c > 0 ? (target + c - 1) / c : 1;
  if (splits > segments) splits = segments;
  if (splits < 1) splits = 1;
  p.per = (segments + splits - 1) / splits;
  p.splits = p.per > 0 ? (segments + p.per - 1) / p.per : 1;  // no empty work items
  p.warp_segments = hw <= kBatchNormWarpSegment;
  p.cfg = {dim3(grid_stride_blocks(c * p.splits, 1)), dim3(256), 0};
  return p;
}

// The finishing kernel: a thread per channel.
inline LaunchConfig batch_norm_stats_finish_config(int64_t c) {
  return {dim3(grid_stride_blocks(c, kBlockThreads)), dim3(kBlockThreads), 0};
}

// Bytes of workspace batch_norm_stats needs (the partials: c * splits of 8 + 2 sizeof(acc)).
template <class T>
size_t batch_norm_stats_workspace_bytes(int64_t n, int64_t c, int64_t hw) {
  return size_t(c * batch_norm_stats_config(n, c, hw).splits) * (sizeof(int64_t) + 2 * sizeof(compute_t<T>));
}

// Per-channel statistics of x [n, c, hw] (contiguous; hw = H * W, 1 for [N, C]). T: float,
// double, __half, __nv_bfloat16; statistics in compute_t<T> (float, or double). var_unbiased,
// running_mean and running_var may be null; updating running_var needs n * hw > 1 (the
// unbiased variance of one value is undefined; PyTorch refuses to train on it too).
template <class T>
void batch_norm_stats(const T* x,                // [n, c, hw] input
                      int64_t n, int64_t c, int64_t hw,
                      compute_t<T>* mean,            // [c] output
                      compute_t<T>* var,             // [c] output: biased
                      compute_t<T>* var_unbiased,    // [c] output, or null
                      compute_t<T>* running_mean,    // [c] in/out, or null
                      compute_t<T>* running_var,     // [c] in/out, or null
                      double momentum,
                      void* workspace,           // batch_norm_stats_workspace_bytes<T>(n, c, hw) bytes
                      cudaStream_t stream) {
  using A = compute_t<T>;
  const BatchNormStatsPlan p = batch_norm_stats_config(n, c, hw);
  EMBER_CHECK(c == 0 || (mean && var && workspace), "batch_norm_stats: null mean, var or workspace for ", c,
              " channels");
  EMBER_CHECK(n * hw == 0 || c == 0 || x, "batch_norm_stats: null input");
  EMBER_CHECK(running_var == nullptr || n * hw > 1 || c == 0,
              "batch_norm_stats: updating running_var needs more than one value per channel, got input [", n, ", ",
              c, ", ", hw, "]");
  if (c == 0) return;
  auto* count = static_cast<int64_t*>(workspace);
  A* part_mean = reinterpret_cast<A*>(count + c * p.splits);
  A* part_m2 = part_mean + c * p.splits;
  if (n * hw > 0)
    launch<batch_norm_stats_kernel<T>>(p.cfg, stream, x, n, c, hw, p.splits, p.per, p.pieces, p.warp_segments, count,
                                       part_mean, part_m2);
  launch<batch_norm_stats_finish_kernel<T>>(batch_norm_stats_finish_config(c), stream, x, hw, count, part_mean,
                                            part_m2, c, n * hw > 0 ? p.splits : 0, A(momentum), mean, var,
                                            var_unbiased, running_mean, running_var);
}

}  // namespace ember::kernels::cuda
