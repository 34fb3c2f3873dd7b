// The launch plans of the reductions in reduce.cuh (Note [Reduction plans]): how the
// work of a reduction of x [outer, n, inner] over n is cut into groups of lanes, blocks
// and splits, with the workspace a split needs; and which [outer, n, inner] a reduction
// of a contiguous tensor over some of its dims is (reduce_dims). Host code, apart from
// the index helpers the kernels share; nothing here depends on the reducer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

// --- Note [Reduction plans] ------------------------------------------------------------
// Last dim: rows of up to kWarpRowMaxCols elements go to groups of lanes of one warp,
// about one 16-byte vector per lane up to 32 lanes (a [N, 3] tensor: a lane per row, 32
// rows per warp; [N, 1024]: a warp per row); no barrier. Longer rows get a block each. A
// block never reads more than kMaxBlockBytes for one output (kMaxUnsplitBytes where the
// rows alone give every SM 8 blocks: one launch, no merge pass), and when the rows are too
// few to give every SM several blocks (rows * splits < 8 * SMs), rows are split further,
// down to kMinSegmentBytes a block. A split reduction is two passes: each block writes its
// partial state to the workspace, laid out [splits, outputs], and reduce_middle_dim_kernel
// merges each output's splits in order (for reduce_all: one block merges all of them). No
// atomics, so every run gives the same bits. Splits are capped at kMaxSplitsPerSM * SMs
// per output, so the second pass stays a few microseconds.
// Middle dim: inner == 1 is the last dim. Short columns (n <= kThreadColumnMaxN) get a
// thread each: a warp reads 32 consecutive columns of a row. Longer ones: a block is 256
// threads seen as ny rows of `width` = min(inner, 32) threads, so a warp reads `width`
// consecutive elements of 32 / width consecutive rows, contiguous (inner < 32) or whole
// 128-byte lines (inner >= 32). Each thread keeps eight loads in flight down its column;
// the block's ny states per column merge in shared memory in a fixed tree. Long columns
// split across blocks as rows do.
// Where every row of the input starts on a 16-byte boundary (x aligned, inner a multiple of
// V = 16 / sizeof(T), 2- to 8-byte types), the 16-byte form takes the long columns
// instead (reduce_middle_dim_vec_kernel): `width` = min(inner / V, 8) threads a row each
// read V adjacent columns as one vector, so a warp's request is 16 sectors (32 / width
// rows of width * 16 bytes: whole 128-byte lines at width 8) instead of 4, a quarter of
// the requests, with kMiddleVecUnroll vectors in flight a thread (16 KiB a block). Its
// column tiles are narrow (8 vectors, 32 float columns) so that wide inner dims give many
// tiles: a column tile of at most kMaxUnsplitBytes in a grid of at least 8 blocks an SM
// is not split (one launch; [256, 1024, 256] float32: 2048 tiles of 128 KiB); a split
// would add a launch to shorten a tail of about one block's time.
// Not tuned (correct, slower): inner in [2, 32) with short columns, where a warp's loads
// spread over 32 / inner outputs' columns, and inner just above a multiple of 32 (of 8 V
// in the 16-byte form), whose last tile of columns is mostly idle. These need a GPU to
// measure.

struct ReducePlan {
  LaunchConfig main;         // the pass over the input
  LaunchConfig merge;        // the pass over the partial states (grid 0: none)
  int lanes_per_row = 0;      // last dim: a group of this many lanes per row (0: a block per row)
  bool thread_per_output = false;  // middle dim: short columns, one thread each
  int width = 0;             // middle dim: threads along inner (main pass)
  bool vec = false;          // middle dim: the 16-byte form, V columns a thread
  int merge_width = 0;       // threads along the outputs (merge pass)
  int64_t splits = 1;        // blocks that share one output
  int64_t segment = 0;       // elements of the reduced dim per block
  size_t workspace_bytes = 0;
};

namespace reduce_detail {

inline constexpr int64_t kWarpRowMaxCols = 1024;
inline constexpr int64_t kThreadColumnMaxN = 64;
inline constexpr int64_t kMaxBlockBytes = 64 << 10;
inline constexpr int64_t kMinSegmentBytes = 8 << 10;
inline constexpr int64_t kMaxSplitsPerSM = 16;
inline constexpr int kMiddleUnroll = 8;
inline constexpr int kMiddleVecUnroll = 4;
inline constexpr int kMiddleVecWidth = 8;
inline constexpr int64_t kMaxUnsplitBytes = 128 << 10;

__host__ __device__ __forceinline__ int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
inline unsigned grid_for(int64_t blocks) { return static_cast<unsigned>(blocks < INT32_MAX ? blocks : INT32_MAX); }

// Blocks per output, for `units` independent reductions of `bytes` each.
inline int64_t choose_splits(int64_t units, int64_t bytes) {
  const int64_t target = int64_t(sm_count()) * 8;  // 8 blocks of 256 threads fill an SM
  if (units >= target && bytes <= kMaxUnsplitBytes) return 1;  // the grid fills the SMs alone
  int64_t splits = ceil_div(bytes, kMaxBlockBytes);
  if (units * splits < target) {
    const int64_t want = ceil_div(target, units), most = ceil_div(bytes, kMinSegmentBytes);
    splits = max64(splits, min64(want, most));
  }
  return max64(1, min64(splits, int64_t(sm_count()) * kMaxSplitsPerSM));
}

// The merge pass of `splits` states for each of `outputs`.
inline void plan_merge(ReducePlan& p, int64_t outputs, size_t acc_bytes) {
  if (p.splits <= 1) return;
  p.merge_width = static_cast<int>(min64(outputs, 32));
  p.merge = LaunchConfig{dim3(grid_for(ceil_div(outputs, p.merge_width))), dim3(kBlockThreads), 0};
  p.workspace_bytes = size_t(p.splits) * size_t(outputs) * acc_bytes;
}

}  // namespace reduce_detail

// The launch plan of a last-dim reduction of x [rows, cols] (Note [Reduction plans]).
inline ReducePlan last_dim_plan(int64_t rows, int64_t cols, size_t elem_bytes, size_t acc_bytes) {
  using namespace reduce_detail;
  ReducePlan p;
  p.main.grid = dim3(0);
  p.merge.grid = dim3(0);
  if (rows == 0) return p;
  if (cols <= kWarpRowMaxCols) {
    // About one 16-byte vector or more per lane: short rows share a warp.
    const int64_t vectors = ceil_div(cols * int64_t(elem_bytes), 16);
    p.lanes_per_row = 1;
    while (p.lanes_per_row < 32 && p.lanes_per_row < vectors) p.lanes_per_row *= 2;
    const int64_t warps = min64(ceil_div(rows, 32 / p.lanes_per_row), kBlockThreads / 32);
    const int64_t rows_per_block = warps * (32 / p.lanes_per_row);
    p.main = LaunchConfig{dim3(grid_for(ceil_div(rows, rows_per_block))), dim3(unsigned(32 * warps)), 0};
    p.segment = cols;
    return p;
  }
  const int64_t splits = choose_splits(rows, cols * int64_t(elem_bytes));
  p.segment = ceil_div(ceil_div(cols, splits), 16) * 16;  // whole vectors, even for 1-byte types
  p.splits = ceil_div(cols, p.segment);
  p.main = LaunchConfig{dim3(grid_for(rows * p.splits)), dim3(kBlockThreads), 0};
  plan_merge(p, rows, acc_bytes);
  return p;
}

// Whether a middle-dim reduction of x [outer, n, inner] may take the 16-byte form: every
// row x[o, k, :] starts on a 16-byte boundary, T is 2 to 8 bytes (1-byte types would
// need 16 states a thread), and fewer than 2^31 elements (its 32-bit indices).
inline bool middle_dim_vec_ok(const void* x, int64_t outer, int64_t n, int64_t inner, size_t elem_bytes) {
  return elem_bytes >= 2 && elem_bytes <= 8 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         inner % int64_t(16 / elem_bytes) == 0 && outer * n * inner < INT32_MAX;
}

// The launch plan of a middle-dim reduction of x [outer, n, inner]; vec: the input passes
// middle_dim_vec_ok.
inline ReducePlan middle_dim_plan(int64_t outer, int64_t n, int64_t inner, size_t elem_bytes, size_t acc_bytes,
                                  bool vec = false) {
  using namespace reduce_detail;
  ReducePlan p;
  p.main.grid = dim3(0);
  p.merge.grid = dim3(0);
  if (outer == 0 || inner == 0) return p;
  if (inner == 1) return last_dim_plan(outer, n, elem_bytes, acc_bytes);  // rows: reduce_middle_dim delegates
  if (n <= kThreadColumnMaxN) {
    p.thread_per_output = true;
    p.main = LaunchConfig{dim3(grid_for(ceil_div(outer * inner, kBlockThreads))), dim3(kBlockThreads), 0};
    p.segment = n;
    return p;
  }
  const int64_t per_thread = vec ? int64_t(16 / elem_bytes) : 1;  // adjacent columns a thread reads
  p.vec = vec;
  p.width = static_cast<int>(vec ? min64(inner / per_thread, kMiddleVecWidth) : min64(inner, 32));
  const int64_t tile_cols = p.width * per_thread;
  const int64_t tiles = outer * ceil_div(inner, tile_cols);
  const int64_t splits = choose_splits(tiles, n * tile_cols * int64_t(elem_bytes));
  p.segment = ceil_div(n, splits);
  // The 16-byte form's segments: whole rounds of kMiddleVecUnroll loads for every thread.
  if (vec && splits > 1) p.segment = ceil_div(p.segment, kMiddleVecUnroll * (kBlockThreads / p.width)) *
                                     (kMiddleVecUnroll * (kBlockThreads / p.width));
  p.splits = p.segment == 0 ? 1 : ceil_div(n, p.segment);
  p.main = LaunchConfig{dim3(grid_for(tiles * p.splits)), dim3(kBlockThreads), 0};
  plan_merge(p, outer * inner, acc_bytes);
  return p;
}

// --- Shapes -----------------------------------------------------------------------------

// A reduction of a contiguous tensor of shape `sizes` over the dims set in `mask` (bit d:
// dim d, as core/dispatch.h's DimMask) seen as x [outer, n, inner] reduced over n, which
// reduce_middle_dim takes (inner == 1: the last dim; outer == inner == 1: all). Possible
// when the reduced dims are adjacent once size-1 dims are ignored; false otherwise.
struct ReduceDims {
  int64_t outer = 1, n = 1, inner = 1;
};
inline bool reduce_dims(const std::vector<int64_t>& sizes, uint64_t mask, ReduceDims& out) {
  ReduceDims d;
  int phase = 0;  // 0: kept dims before the reduced run, 1: in it, 2: after it
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1) continue;
    const bool reduced = i < 64 && ((mask >> i) & 1);
    if (reduced && phase == 2) return false;
    if (reduced) phase = 1;
    else if (phase == 1) phase = 2;
    (reduced ? d.n : phase == 0 ? d.outer : d.inner) *= sizes[i];
  }
  out = d;
  return true;
}

}  // namespace ember::kernels::cuda
