// Reductions of contiguous tensors: sum, mean, max, min, var (Welford, Bessel's
// `correction`) and argmax/argmin (the first extremum; NaN wins, as in PyTorch), in the
// three layouts any reduction over one run of adjacent dims becomes once dims are merged:
//
//   last dim    x [rows, cols]           -> out [rows]          reduce_last_dim
//   middle dim  x [outer, n, inner]      -> out [outer, inner]  reduce_middle_dim
//   all         x [n]                    -> out [1]             reduce_all
//
// and one that keeps the middle dim: x [outer, n, inner] -> out [n], reduce_outer_inner
// (a conv's bias gradient: NCHW summed over N, H and W).
//
// float32/float64 compute in their own type; bfloat16/float16 are read as such and
// computed in float. Outputs have the input's dtype (argmax/argmin: int64 indices, and
// optionally the values), rounded once, as the CPU backend does.
//
// All kernels here are memory-bound: each input element is read once, sizeof(T) bytes per
// element (4 B float32, 2 B bfloat16/float16, 8 B float64), and each output written once.
// A split reduction (Note [Reduction plans], reduce_plan.cuh) also writes and rereads one
// partial state of at most 24 B per block that has read at least 8 KiB: under 0.6% more
// traffic. So the ceiling is bytes / 4.8 TB/s on an H200; the plans aim for >= 94% of it
// on large tensors.
//
// Results are deterministic: the order of every combination depends only on the sizes
// and the device's SM count, never on timing; there are no atomics.
//
// The reductions themselves (SumReduce, VarReduce, ArgMaxReduce, ...) are in reducers.cuh,
// the launch plans (ReducePlan, Note [Reduction plans]) and reduce_dims in reduce_plan.cuh.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/reduce_plan.cuh"
#include "kernels/cuda/reducers.cuh"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

namespace reduce_detail {

// --- Warp and block merges of any Acc --------------------------------------------------
// Scalar states use block_reduce.cuh; the Welford and argmax states shuffle field by field.

__device__ __forceinline__ int shfl_xor(int v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ double shfl_xor(double v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ int64_t shfl_xor(int64_t v, int m) {
  return static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v), m));
}
template <class C>
__device__ __forceinline__ ops::Welford<C> shfl_xor(ops::Welford<C> a, int m) {
  return ops::Welford<C>{shfl_xor(a.count, m), shfl_xor(a.mean, m), shfl_xor(a.m2, m)};
}
template <class C>
__device__ __forceinline__ ArgAcc<C> shfl_xor(ArgAcc<C> a, int m) {
  return ArgAcc<C>{shfl_xor(a.value, m), shfl_xor(a.index, m)};
}

template <class R>
struct MergeOp {
  R r;
  template <class A>
  __device__ __forceinline__ A operator()(A a, A b) const { return r.merge(a, b); }
};

// The merge of the 32 lanes' states (a full warp); every lane gets it.
template <class R>
__device__ __forceinline__ typename R::Acc warp_merge(const R& r, typename R::Acc a) {
  if constexpr (std::is_arithmetic_v<typename R::Acc>) {
    return warp_reduce(a, MergeOp<R>{r});
  } else {
    for (int m = 16; m > 0; m /= 2) a = r.merge(a, shfl_xor(a, m));
    return a;
  }
}

// The merge over aligned groups of `lanes` lanes (a power of two up to 32): every lane
// gets its group's result. Every lane of the warp must call it.
template <class R>
__device__ __forceinline__ typename R::Acc group_merge(const R& r, typename R::Acc a, int lanes) {
  if (lanes == 32) return warp_merge(r, a);
  for (int m = lanes / 2; m > 0; m /= 2) a = r.merge(a, shfl_xor(a, m));
  return a;
}

// The merge over the block (whole warps, 1-D); every thread must call it.
template <class R>
__device__ __forceinline__ typename R::Acc block_merge(const R& r, typename R::Acc a) {
  using Acc = typename R::Acc;
  if constexpr (std::is_arithmetic_v<Acc>) {
    return block_reduce(a, MergeOp<R>{r}, r.identity());
  } else {
    __shared__ Acc partial[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    a = warp_merge(r, a);
    __syncthreads();  // partial may still be read by a previous call
    if (lane == 0) partial[warp] = a;
    __syncthreads();
    a = lane < int(blockDim.x / 32) ? partial[lane] : r.identity();
    return warp_merge(r, a);
  }
}

// The state of one element x, at position `index` of the reduced dim.
template <class R>
__device__ __forceinline__ typename R::Acc single(const R& r, typename R::Elem x, int64_t index) {
  const typename R::C v[1] = {widen(x)};
  return r.chunk(v, index, 1);
}

// This thread's share (thread t of nt) of the n contiguous elements at p, which sit at
// positions first.. of the reduced dim: 16-byte vectors from the first aligned address,
// four in flight per thread (also for the last few, so a row of two vectors per thread
// costs one memory round trip, not two), and the < 16 bytes before and after them one
// element at a time. Any alignment works; an unaligned start costs only the scalar head.
template <class R>
__device__ __forceinline__ typename R::Acc accumulate_run(const R& r, const typename R::Elem* __restrict__ p,
                                                          int64_t first, int64_t n, int t, int nt) {
  using T = typename R::Elem;
  using C = typename R::C;
  using Acc = typename R::Acc;
  constexpr int V = 16 / sizeof(T), U = 4;
  const int64_t mis = int64_t(reinterpret_cast<uintptr_t>(p) % 16) / int64_t(sizeof(T));
  const int64_t head = mis == 0 ? 0 : (V - mis < n ? V - mis : n);
  const int64_t nvec = (n - head) / V, tail = head + nvec * V;
  Acc acc = r.identity();
  for (int64_t j = t; j < head; j += nt) acc = r.merge(acc, single(r, p[j], first + j));
  for (int64_t j = tail + t; j < n; j += nt) acc = r.merge(acc, single(r, p[j], first + j));
  const T* vp = p + head;
  const int64_t vfirst = first + head, step = nt;
  int64_t i = t;
  for (; i + (U - 1) * step < nvec; i += U * step) {
    Pack<T> pk[U];
    for (int u = 0; u < U; ++u) pk[u] = load_vec<Pack<T>>(vp + (i + u * step) * V);  // all loads issued before any use
    for (int u = 0; u < U; ++u) {
      C v[V];
      for (int j = 0; j < V; ++j) v[j] = widen(pk[u].v[j]);
      acc = r.merge(acc, r.chunk(v, vfirst + (i + u * step) * V, 1));
    }
  }
  if (i < nvec) {  // fewer than U vectors left: load them all, then use them
    Pack<T> pk[U];
    for (int u = 0; u < U; ++u)
      if (i + u * step < nvec) pk[u] = load_vec<Pack<T>>(vp + (i + u * step) * V);
    for (int u = 0; u < U; ++u) {
      if (i + u * step >= nvec) break;
      C v[V];
      for (int j = 0; j < V; ++j) v[j] = widen(pk[u].v[j]);
      acc = r.merge(acc, r.chunk(v, vfirst + (i + u * step) * V, 1));
    }
  }
  return acc;
}

}  // namespace reduce_detail

// --- Kernels -----------------------------------------------------------------------------

namespace reduce_detail {
// Blocks of 256 an SM the last-dim kernel's warp-per-row form is compiled for: 4 (at most
// 64 registers, 32 warps an SM) for 4-byte elements, whose states fit without spilling
// (nvcc 13.0, sm_90: argmax float32 68 -> 63 registers, 24 -> 32 warps an SM); wider
// states (bfloat16's 8 values a vector, float64's Welford and argmax) spill under that cap,
// so they, and the block-per-row form, keep nvcc's choice (0: no minimum; a minimum of 4
// took the block form's float32 sum from 32 registers to 62).
template <class R>
inline constexpr int kLastDimMinBlocks = sizeof(typename R::Elem) == 4 ? 4 : 0;
}  // namespace reduce_detail

// out[row] = R over x[row, :] (x [rows, cols], contiguous). Memory-bound, sizeof(T) bytes
// read per element. kGroupPerRow: each warp reduces 32 / lanes rows at a time, `lanes`
// lanes per row (a power of two), warp w of the grid taking row groups w, w + warps, ...;
// otherwise block b reduces segment b % splits of row b / splits, writing the output
// (splits == 1) or its partial state, partial [splits, rows].
template <class R, bool kGroupPerRow>
__global__ void __launch_bounds__(kBlockThreads, kGroupPerRow ? reduce_detail::kLastDimMinBlocks<R> : 0)
    reduce_last_dim_kernel(R r, const typename R::Elem* __restrict__ x, typename R::Out out,
                           typename R::Acc* __restrict__ partial, int64_t rows, int64_t cols, int64_t splits,
                           int64_t segment, int lanes) {
  using namespace reduce_detail;
  if constexpr (kGroupPerRow) {
    const int64_t rows_per_warp = 32 / lanes, warps = int64_t(gridDim.x) * (blockDim.x / 32);
    const int lane = threadIdx.x % lanes;
    // The loop is the same for the whole warp (its shuffles need every lane); a group
    // past the last row reduces nothing.
    for (int64_t w = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; w * rows_per_warp < rows; w += warps) {
      const int64_t row = w * rows_per_warp + (threadIdx.x % 32) / lanes;
      typename R::Acc a = r.identity();
      if (row < rows) a = accumulate_run(r, x + row * cols, 0, cols, lane, lanes);
      a = group_merge(r, a, lanes);
      if (lane == 0 && row < rows) r.write(out, row, a, cols);
    }
  } else {
    for (int64_t b = blockIdx.x; b < rows * splits; b += gridDim.x) {
      const int64_t row = b / splits, s = b % splits;
      const int64_t first = s * segment, n = min64(cols - first, segment);
      const typename R::Acc a =
          block_merge(r, accumulate_run(r, x + row * cols + first, first, n, threadIdx.x, blockDim.x));
      if (threadIdx.x == 0) {
        if (splits == 1) r.write(out, row, a, cols);
        else partial[s * rows + row] = a;
      }
    }
  }
}

// out[o, c] = R over x[o, :, c] (x [outer, n, inner], contiguous). Memory-bound, sizeof(T)
// bytes read per element. Block b reduces segment b % splits of `width` columns, tile
// b / splits; threads are ny = 256 / width rows of `width` (Note [Reduction plans] in
// reduce_plan.cuh).
// kPartials: x holds partial states [outer, n, inner] of type Acc (the merge pass, with
// count = the original reduction's length); otherwise elements of type T.
template <class R, bool kPartials>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_middle_dim_kernel(R r, const std::conditional_t<kPartials, typename R::Acc, typename R::Elem>* __restrict__ x,
                             typename R::Out out, typename R::Acc* __restrict__ partial, int64_t outer, int64_t n,
                             int64_t inner, int width, int64_t splits, int64_t segment, int64_t count) {
  using namespace reduce_detail;
  using Acc = typename R::Acc;
  using C = typename R::C;
  constexpr int U = kMiddleUnroll;
  __shared__ Acc column[kBlockThreads];
  const int ny = blockDim.x / width, tx = threadIdx.x % width, ty = threadIdx.x / width;
  const int64_t col_tiles = ceil_div(inner, width);
  for (int64_t b = blockIdx.x; b < outer * col_tiles * splits; b += gridDim.x) {
    const int64_t tile = b / splits, s = b % splits;
    const int64_t o = tile / col_tiles, c = (tile % col_tiles) * width + tx;
    const int64_t end = min64(n, (s + 1) * segment);
    Acc acc = r.identity();
    if (ty < ny && c < inner) {
      const auto* col = x + o * n * inner + c;
      int64_t k = s * segment + ty;
      if constexpr (kPartials) {
        for (; k + (U - 1) * ny < end; k += U * ny) {
          Acc v[U];
          for (int u = 0; u < U; ++u) v[u] = col[(k + u * ny) * inner];
          for (int u = 0; u < U; ++u) acc = r.merge(acc, v[u]);
        }
        for (; k < end; k += ny) acc = r.merge(acc, col[k * inner]);
      } else {
        for (; k + (U - 1) * ny < end; k += U * ny) {
          C v[U];
          for (int u = 0; u < U; ++u) v[u] = widen(col[(k + u * ny) * inner]);
          acc = r.merge(acc, r.chunk(v, k, ny));
        }
        for (; k < end; k += ny) acc = r.merge(acc, single(r, col[k * inner], k));
      }
    }
    column[threadIdx.x] = acc;
    __syncthreads();
    int half = 1;
    while (half < ny) half *= 2;
    for (half /= 2; half > 0; half /= 2) {  // row ty takes row ty + half: a fixed tree
      if (ty < half && ty + half < ny) column[threadIdx.x] = r.merge(column[threadIdx.x], column[threadIdx.x + half * width]);
      __syncthreads();
    }
    // Row 0 reads its own slots (threadIdx.x == tx); the next tile's first reads of others'
    // slots come after its barriers, and ny >= 8 rows give the tree a barrier after its
    // last reads: no barrier is needed before the next tile refills column.
    if (ty == 0 && c < inner) {
      if (splits == 1) r.write(out, o * inner + c, column[tx], count);
      else partial[s * outer * inner + o * inner + c] = column[tx];
    }
  }
}

namespace reduce_detail {
// Blocks of 256 an SM the 16-byte middle-dim form is compiled for (nvcc 13.0, sm_90, no
// spill in any): 4-byte elements with scalar states 4 (float32 sum: 56 registers, where
// nvcc's own choice was 48 and a 4-byte spill), Welford and argmax states of 4-byte
// elements 3 (var: 72 registers; nvcc's choice spilled 28 bytes at 64), others nvcc's.
template <class R>
inline constexpr int kMiddleVecMinBlocks =
    sizeof(typename R::Elem) != 4 ? 0 : (std::is_arithmetic_v<typename R::Acc> ? 4 : 3);

// Columns of the 16-byte middle-dim form merged in shared memory at a time: at most 32
// bytes of states a thread (8 KiB a block, and a padding row), all V of them for float32
// sums.
template <class Acc, int V>
inline constexpr int kMergePart = sizeof(Acc) * V <= 32 ? V : (sizeof(Acc) >= 32 ? 1 : int(32 / sizeof(Acc)));
}  // namespace reduce_detail

// reduce_middle_dim_kernel's 16-byte form (Note [Reduction plans] in reduce_plan.cuh):
// out[o, c] = R over x[o, :, c], every row x[o, k, :] 16-byte aligned. Thread tx of a row
// of `width` reads V = 16 / sizeof(T) adjacent columns as one vector, kMiddleVecUnroll rows
// down its columns in flight, and keeps a state per column, each merged in the order of
// the scalar form (chunks of the thread's rows, then the block's tree over its ny rows).
// Memory-bound, sizeof(T) bytes read per element.
template <class R>
__global__ void __launch_bounds__(kBlockThreads, reduce_detail::kMiddleVecMinBlocks<R>)
    reduce_middle_dim_vec_kernel(R r, const typename R::Elem* __restrict__ x, typename R::Out out,
                                 typename R::Acc* __restrict__ partial, int outer, int n, int inner, int width,
                                 int splits, int segment) {
  // 32-bit indices: the input has fewer than 2^31 elements (middle_dim_vec_ok), and so do
  // the partial states (splits <= n). 64-bit divisions cost this kernel registers and spills.
  using namespace reduce_detail;
  using T = typename R::Elem;
  using Acc = typename R::Acc;
  using C = typename R::C;
  constexpr int V = 16 / sizeof(T), U = kMiddleVecUnroll, P = kMergePart<Acc, V>;
  // [P][S]: a warp's accesses in the tree hit consecutive slots; the padding of S puts the
  // first warp's reads of row 0's slots (from < width <= 8, j < P) in distinct banks for
  // P <= 4 (2-way conflicts for 2-byte types' 8 float states a thread).
  constexpr int S = kBlockThreads + kMiddleVecWidth;
  __shared__ Acc column[P * S];
  const int ny = blockDim.x / width, tx = threadIdx.x % width, ty = threadIdx.x / width;
  const int tile_cols = width * V, col_tiles = (inner + tile_cols - 1) / tile_cols;
  const int64_t step = int64_t(ny) * inner;  // elements from one of a thread's rows to the next
  int top = 1;
  while (top < ny) top *= 2;
  for (int b = blockIdx.x; b < outer * col_tiles * splits; b += gridDim.x) {
    const int tile = b / splits, s = b % splits;
    const int o = tile / col_tiles, tile_c = (tile % col_tiles) * tile_cols, c = tile_c + tx * V;
    const int end = n - s * segment < segment ? n : (s + 1) * segment;
    Acc acc[V];
    EMBER_UNROLL
    for (int j = 0; j < V; ++j) acc[j] = r.identity();
    if (ty < ny && c < inner) {  // inner % V == 0: the vector is whole
      int k = s * segment + ty;
      const T* p = x + (int64_t(o) * n + k) * inner + c;
      for (; k < end - (U - 1) * ny; k += U * ny, p += U * step) {
        Pack<T> pk[U];
        for (int u = 0; u < U; ++u) pk[u] = load_vec<Pack<T>>(p + u * step);  // all issued before any use
        for (int j = 0; j < V; ++j) {
          C v[U];
          for (int u = 0; u < U; ++u) v[u] = widen(pk[u].v[j]);
          acc[j] = r.merge(acc[j], r.chunk(v, k, ny));
        }
      }
      const int left = (end - k + ny - 1) / ny;  // fewer than U rows: loaded together, too
      Pack<T> pk[U] = {};  // (zeroed: GCC cannot see that only the loaded ones are read)
      for (int u = 0; u < U; ++u)
        if (u < left) pk[u] = load_vec<Pack<T>>(p + u * step);
      for (int u = 0; u < U; ++u)
        if (u < left)
          for (int j = 0; j < V; ++j) acc[j] = r.merge(acc[j], single(r, pk[u].v[j], k + u * ny));
    }
    EMBER_UNROLL  // acc[j0 + j] at constant indices: registers, not local memory
    for (int j0 = 0; j0 < V; j0 += P) {
      // Each thread writes its own slots; others' were last read by the previous round's
      // (or tile's) tree, which ends with a barrier (ny >= 32 rows: several steps), or by
      // the first warp's stores of row 0's, which end with its __syncwarp.
      EMBER_UNROLL
      for (int j = 0; j < P; ++j) column[j * S + threadIdx.x] = acc[j0 + j];
      __syncthreads();
      for (int half = top / 2; half > 0; half /= 2) {  // row ty takes row ty + half: a fixed tree
        if (ty < half && ty + half < ny)
          for (int j = 0; j < P; ++j)
            column[j * S + threadIdx.x] =
                r.merge(column[j * S + threadIdx.x], column[j * S + threadIdx.x + half * width]);
        __syncthreads();
      }
      // Row 0's slots hold the round's results: the first warp stores them, lane q the
      // q-th of the tile's columns in this round (consecutive columns when P == V).
      if (threadIdx.x < 32) {
        for (int q = threadIdx.x; q < width * P; q += 32) {
          const int from = q / P, j = q % P, col = tile_c + from * V + j0 + j;
          if (col < inner) {
            const Acc a = column[j * S + from];
            if (splits == 1) r.write(out, o * inner + col, a, n);
            else partial[s * outer * inner + o * inner + col] = a;
          }
        }
        __syncwarp();  // before row 0 (in this warp) refills its slots
      }
    }
  }
}

// out[i] = R over x[o, :, c] for i = o * inner + c (x [outer, n, inner], contiguous), one
// thread per output: for short columns (n <= kThreadColumnMaxN), where a tile of threads
// per column would mostly idle. Memory-bound, sizeof(T) bytes read per element; a warp's
// loads are 32 consecutive columns of one row when inner >= 32.
template <class R>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_columns_kernel(R r, const typename R::Elem* __restrict__ x, typename R::Out out, int64_t outer, int64_t n,
                          int64_t inner) {
  using namespace reduce_detail;
  using C = typename R::C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outer * inner;
       i += int64_t(gridDim.x) * blockDim.x) {
    const typename R::Elem* col = x + (i / inner) * n * inner + i % inner;
    typename R::Acc acc = r.identity();
    int64_t k = 0;
    for (; k + 3 < n; k += 4) {
      C v[4];
      for (int u = 0; u < 4; ++u) v[u] = widen(col[(k + u) * inner]);
      acc = r.merge(acc, r.chunk(v, k, 1));
    }
    for (; k < n; ++k) acc = r.merge(acc, single(r, col[k * inner], k));
    r.write(out, i, acc, n);
  }
}

// --- Host launchers ------------------------------------------------------------------------
// Each takes a reducer (SumReduce<T>{}, VarReduce<T>{correction}, ArgMaxReduce<T>{}, ...)
// and a workspace of at least the matching *_workspace() bytes (16-byte aligned; none is
// needed, and null is fine, when that is 0). Asynchronous on `stream`.

namespace reduce_detail {

template <class R>
void check_reduction(const R& r, const void* x, typename R::Out out, int64_t outputs, int64_t n, const char* where) {
  EMBER_CHECK(outputs >= 0 && n >= 0, where, "(", R::kName, "): negative size (", outputs, " outputs of ", n,
              " elements each)");
  if (outputs == 0) return;
  if constexpr (R::kNeedsElements)
    EMBER_CHECK(n > 0, where, "(", R::kName, "): cannot reduce over 0 elements (", R::kName,
                " of nothing is undefined)");
  if constexpr (std::is_same_v<typename R::Out, IndexedOut<typename R::Elem>>)
    EMBER_CHECK(out.indices != nullptr, where, "(", R::kName, "): the indices output is null");
  else
    EMBER_CHECK(out != nullptr, where, "(", R::kName, "): the output is null");
  if constexpr (std::is_same_v<R, VarReduce<typename R::Elem>>)
    EMBER_CHECK(r.correction >= 0, where, "(var): correction must be >= 0, got ", r.correction);
  EMBER_CHECK(n == 0 || x != nullptr, where, "(", R::kName, "): the input is null");
}

template <class R>
typename R::Acc* check_workspace(const ReducePlan& p, void* workspace, size_t workspace_bytes, const char* where) {
  if (p.workspace_bytes == 0) return nullptr;
  EMBER_CHECK(workspace != nullptr && workspace_bytes >= p.workspace_bytes, where, "(", R::kName, "): needs ",
              p.workspace_bytes, " bytes of workspace (", p.splits, " blocks per output), got ",
              workspace == nullptr ? size_t(0) : workspace_bytes, "; size it with ", where, "_workspace()");
  EMBER_CHECK(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, where, "(", R::kName,
              "): the workspace must be 16-byte aligned");
  return static_cast<typename R::Acc*>(workspace);
}

// The merge pass: partial [splits, outputs] -> out [outputs].
template <class R>
void merge_partials(const R& r, const ReducePlan& p, const typename R::Acc* partial, typename R::Out out,
                    int64_t outputs, int64_t count, cudaStream_t stream) {
  if (p.splits <= 1) return;
  launch<reduce_middle_dim_kernel<R, true>>(p.merge, stream, r, partial, out, static_cast<typename R::Acc*>(nullptr),
                                            int64_t(1), p.splits, outputs, p.merge_width, int64_t(1), p.splits, count);
}

}  // namespace reduce_detail

// A reducer that writes its state, not its result: reduce_outer_inner's first pass.
template <class R>
struct StateReduce : R {
  using Out = typename R::Acc*;  // [outputs]
  __device__ __forceinline__ void write(Out out, int64_t o, typename R::Acc a, int64_t) const { out[o] = a; }
};

template <class R>
size_t reduce_last_dim_workspace(int64_t rows, int64_t cols) {
  return last_dim_plan(rows, cols, sizeof(typename R::Elem), sizeof(typename R::Acc)).workspace_bytes;
}
// Enough for either form (the launch picks by the input's alignment; a null x stands for
// an aligned one).
template <class R>
size_t reduce_middle_dim_workspace(int64_t outer, int64_t n, int64_t inner) {
  const size_t e = sizeof(typename R::Elem), a = sizeof(typename R::Acc);
  const size_t scalar = middle_dim_plan(outer, n, inner, e, a).workspace_bytes;
  if (!middle_dim_vec_ok(nullptr, outer, n, inner, e)) return scalar;
  return std::max(scalar, middle_dim_plan(outer, n, inner, e, a, true).workspace_bytes);
}
template <class R>
size_t reduce_all_workspace(int64_t n) {
  return reduce_last_dim_workspace<R>(1, n);
}

// The states of the rows of reduce_outer_inner's first pass, 16-byte aligned, then that
// pass's own workspace. Outer 1 or inner 1 is one reduction of the kinds above.
template <class R>
size_t reduce_outer_inner_workspace(int64_t outer, int64_t n, int64_t inner) {
  if (outer <= 1 || inner == 0) return reduce_last_dim_workspace<R>(n, outer == 1 ? inner : 0);
  if (inner == 1) return reduce_middle_dim_workspace<R>(1, outer, n);
  const size_t states = (size_t(outer) * size_t(n) * sizeof(typename R::Acc) + 15) / 16 * 16;
  return states + reduce_last_dim_workspace<R>(outer * n, inner);
}

// out [rows] = r over each row of x [rows, cols] (contiguous; any alignment).
template <class R>
void reduce_last_dim(const R& r, const typename R::Elem* x, typename R::Out out, int64_t rows, int64_t cols,
                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using namespace reduce_detail;
  check_reduction(r, x, out, rows, cols, "reduce_last_dim");
  const ReducePlan p = last_dim_plan(rows, cols, sizeof(typename R::Elem), sizeof(typename R::Acc));
  typename R::Acc* partial = check_workspace<R>(p, workspace, workspace_bytes, "reduce_last_dim");
  if (p.lanes_per_row > 0)
    launch<reduce_last_dim_kernel<R, true>>(p.main, stream, r, x, out, partial, rows, cols, int64_t(1), cols,
                                            p.lanes_per_row);
  else
    launch<reduce_last_dim_kernel<R, false>>(p.main, stream, r, x, out, partial, rows, cols, p.splits, p.segment, 0);
  merge_partials(r, p, partial, out, rows, cols, stream);
}

// out [outer, inner] = r over the middle dim of x [outer, n, inner] (contiguous).
template <class R>
void reduce_middle_dim(const R& r, const typename R::Elem* x, typename R::Out out, int64_t outer, int64_t n,
                       int64_t inner, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using namespace reduce_detail;
  EMBER_CHECK(outer >= 0 && inner >= 0, "reduce_middle_dim(", R::kName, "): negative size (outer ", outer,
              ", inner ", inner, ")");
  check_reduction(r, x, out, outer * inner, n, "reduce_middle_dim");
  if (inner == 1) return reduce_last_dim(r, x, out, outer, n, workspace, workspace_bytes, stream);
  const ReducePlan p = middle_dim_plan(outer, n, inner, sizeof(typename R::Elem), sizeof(typename R::Acc),
                                       middle_dim_vec_ok(x, outer, n, inner, sizeof(typename R::Elem)));
  if (p.thread_per_output) return launch<reduce_columns_kernel<R>>(p.main, stream, r, x, out, outer, n, inner);
  typename R::Acc* partial = check_workspace<R>(p, workspace, workspace_bytes, "reduce_middle_dim");
  bool done = false;
  if constexpr (sizeof(typename R::Elem) >= 2 && sizeof(typename R::Elem) <= 8) {
    if (p.vec) {
      launch<reduce_middle_dim_vec_kernel<R>>(p.main, stream, r, x, out, partial, int(outer), int(n), int(inner),
                                              p.width, int(p.splits), int(p.segment));
      done = true;
    }
  }
  if (!done)
    launch<reduce_middle_dim_kernel<R, false>>(p.main, stream, r, x, out, partial, outer, n, inner, p.width,
                                               p.splits, p.segment, n);
  merge_partials(r, p, partial, out, outer * inner, n, stream);
}

// out [j] = r over x[:, j, :] (x [outer, n, inner], contiguous; any alignment), for any
// reducer but argmax/argmin (positions would be per row). Two passes, no atomics: each
// row x[o, j, :] is reduced to a state by reduce_last_dim (coalesced 16-byte loads, short
// rows sharing a warp, long ones split), the states [outer, n] are merged over o in order
// by the split reductions' merge pass. The states add 2 * sizeof(Acc) bytes of traffic
// per row: 4% for float32 rows of 49 elements (a 7x7 map), 0.3% for 28x28. The merge
// gives each output's outer states to 256 / min(n, 32) threads of one block: a few
// round trips for a batch in the hundreds (outer = N).
template <class R>
void reduce_outer_inner(const R& r, const typename R::Elem* x, typename R::Out out, int64_t outer, int64_t n,
                        int64_t inner, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using namespace reduce_detail;
  static_assert(!std::is_same_v<typename R::Out, IndexedOut<typename R::Elem>>,
                "reduce_outer_inner: argmax/argmin positions are per row");
  EMBER_CHECK(outer >= 0 && inner >= 0, "reduce_outer_inner(", R::kName, "): negative size (outer ", outer,
              ", inner ", inner, ")");
  check_reduction(r, x, out, n, outer * inner, "reduce_outer_inner");
  if (outer <= 1 || inner == 0)  // rows of x, or nothing to read
    return reduce_last_dim(r, x, out, n, outer == 1 ? inner : 0, workspace, workspace_bytes, stream);
  if (inner == 1) return reduce_middle_dim(r, x, out, 1, outer, n, workspace, workspace_bytes, stream);
  if (n == 0) return;
  const size_t need = reduce_outer_inner_workspace<R>(outer, n, inner);
  EMBER_CHECK(workspace != nullptr && workspace_bytes >= need, "reduce_outer_inner(", R::kName, "): needs ", need,
              " bytes of workspace, got ", workspace == nullptr ? size_t(0) : workspace_bytes,
              "; size it with reduce_outer_inner_workspace()");
  EMBER_CHECK(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "reduce_outer_inner(", R::kName,
              "): the workspace must be 16-byte aligned");
  auto* states = static_cast<typename R::Acc*>(workspace);  // [outer, n]
  const size_t states_bytes = (size_t(outer) * size_t(n) * sizeof(typename R::Acc) + 15) / 16 * 16;
  reduce_last_dim(StateReduce<R>{r}, x, states, outer * n, inner, static_cast<char*>(workspace) + states_bytes,
                  workspace_bytes - states_bytes, stream);
  ReducePlan merge;
  merge.splits = outer;
  plan_merge(merge, n, sizeof(typename R::Acc));
  merge_partials(r, merge, states, out, n, outer * inner, stream);
}

// out [1] = r over the n elements of x (contiguous; any alignment). Large n: per-block
// partial states, then one block merges them (Note [Reduction plans] in reduce_plan.cuh).
template <class R>
void reduce_all(const R& r, const typename R::Elem* x, typename R::Out out, int64_t n, void* workspace,
                size_t workspace_bytes, cudaStream_t stream) {
  reduce_last_dim(r, x, out, 1, n, workspace, workspace_bytes, stream);
}

}  // namespace ember::kernels::cuda
