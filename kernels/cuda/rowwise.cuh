// What the row kernels of softmax.cuh and norm.cuh share: element conversions to the
// compute type, 16-byte vector loads, the two ways a group of threads holds a row (in
// registers, or streamed with a scalar head and tail around aligned vectors), group
// reductions, and the one host function that picks a kernel variant for a row shape.
//
// Note [Row variants]
// A row of `cols` elements is handled by one of three kernels, each a template over the
// element type:
//   kWarp   cols <= 1024: a warp (or an aligned group of kW = 1..32 lanes, for short rows)
//           per row, the row cached in registers: kN = kP / kW values per lane, kP =
//           next_pow2(cols). One read and one write of the row.
//   kBlock  cols <= 512 * 32: a block per row, kN = 4..32 values per thread in registers
//           (kernels holding several arrays cap kN at 16; float64 at half).
//   kStream longer rows: a block per row streams the row from memory once per pass
//           (softmax: two reads and a write, or one read and a write where softmax.cuh
//           keeps the row in shared memory), vectors between a scalar head and tail.
// The register variants read 16-byte vectors when every pointer is 16-byte aligned and
// cols is a multiple of the vector width (then every row starts aligned); otherwise they
// read scalars, still coalesced. kStream peels each row to its own alignment, so it
// vectorizes any row whose pointers share their offset modulo 16 bytes.
// Tests and benchmarks reach every variant by name (RowVariant); kAuto picks as above.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/common/norm_ops.h"
#include "kernels/common/softmax_ops.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/types.cuh"


namespace ember::kernels::cuda::rowwise {

// --- Element types ------------------------------------------------------------------------

// exp in the compute type (std::exp's float overload, not the double one).
template <class A>
__device__ __forceinline__ A exp_acc(A x) {
  using std::exp;
  return exp(x);
}

template <class A>
__device__ __forceinline__ A log_acc(A x) {
  using std::log;
  return log(x);
}

template <class A>
__device__ __forceinline__ A rsqrt_acc(A x) {
  using std::sqrt;
  return A(1) / sqrt(x);  // exact division, as the CPU backend's rsqrt
}

// Elements in a 16-byte vector: 4 floats, 8 halves, 2 doubles.
template <class T> inline constexpr int kVec = 16 / int(sizeof(T));

// n = 1 or kVec<T> consecutive elements at p (16-byte aligned when n > 1), converted.
template <int n, class T>
__device__ __forceinline__ void load(const T* p, compute_t<T>* out) {
  if constexpr (n == 1) {
    out[0] = widen(p[0]);
  } else {
    static_assert(n == kVec<T>);
    const Pack<T> v = load_vec<Pack<T>>(p);
    EMBER_UNROLL
    for (int i = 0; i < n; ++i) out[i] = widen(v.v[i]);
  }
}
// (The row kernels' outputs: global memory, stored as store_vec_global stores.)
template <int n, class T>
__device__ __forceinline__ void store(T* p, const compute_t<T>* in) {
  if constexpr (n == 1) {
    p[0] = round_to<T>(in[0]);
  } else {
    static_assert(n == kVec<T>);
    Pack<T> v;
    EMBER_UNROLL
    for (int i = 0; i < n; ++i) v.v[i] = round_to<T>(in[i]);
    store_vec_global(p, v);
  }
}

// --- The rows of a kWarp kernel --------------------------------------------------------------

// Groups of kW lanes (a divisor of 32) each take a row; a warp takes 32 / kW rows a turn,
// grid-stride over all rows. f(row, live, rank): lanes past the last row get row 0 and
// live == false (they must still join their group's shuffles, and touch nothing).
template <int kW, class F>
__device__ __forceinline__ void for_each_warp_row(int64_t rows, const F& f) {
  constexpr int kRowsPerWarp = 32 / kW;
  const int lane = threadIdx.x % 32;
  const int64_t warp = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t first = warp * kRowsPerWarp; first < rows; first += warps * kRowsPerWarp) {
    const int64_t row = first + lane / kW;
    const bool live = row < rows;
    f(live ? row : 0, live, lane % kW);
  }
}

// --- A row in registers (kWarp, kBlock) -------------------------------------------------------

// The column of register k of thread `rank` in a group of `lanes` threads holding a row in
// kN registers each. Vector layout: each thread takes kVec consecutive columns per step.
template <class T>
__device__ __forceinline__ int64_t tile_col(int k, int rank, int lanes, bool vec) {
  constexpr int V = kVec<T>;
  return vec ? (int64_t(k / V) * lanes + rank) * V + k % V : int64_t(k) * lanes + rank;
}

// Loads the thread's kN values of `row` (cols elements); columns past the end get `fill`.
// vec needs kN % kVec == 0, cols % kVec == 0 and row 16-byte aligned (host-checked).
template <int kN, class T>
__device__ __forceinline__ void tile_load(const T* row, int64_t cols, int rank, int lanes, bool vec,
                                          compute_t<T> (&v)[kN], compute_t<T> fill) {
  constexpr int V = kVec<T>;
  if constexpr (kN % V == 0) {
    if (vec) {
      EMBER_UNROLL
      for (int j = 0; j < kN / V; ++j) {
        const int64_t c = (int64_t(j) * lanes + rank) * V;
        if (c < cols) {
          load<V>(row + c, &v[j * V]);
        } else {
          EMBER_UNROLL
          for (int i = 0; i < V; ++i) v[j * V + i] = fill;
        }
      }
      return;
    }
  }
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) {
    const int64_t c = int64_t(k) * lanes + rank;
    v[k] = c < cols ? widen(row[c]) : fill;
  }
}

template <int kN, class T>
__device__ __forceinline__ void tile_store(T* row, int64_t cols, int rank, int lanes, bool vec,
                                           const compute_t<T> (&v)[kN]) {
  constexpr int V = kVec<T>;
  if constexpr (kN % V == 0) {
    if (vec) {
      EMBER_UNROLL
      for (int j = 0; j < kN / V; ++j) {
        const int64_t c = (int64_t(j) * lanes + rank) * V;
        if (c < cols) store<V>(row + c, &v[j * V]);
      }
      return;
    }
  }
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) {
    const int64_t c = int64_t(k) * lanes + rank;
    if (c < cols) row[c] = round_to<T>(v[k]);
  }
}

// Calls f(k, col, std::integral_constant<int, n>) for each chunk of the thread's registers
// that lies inside the row: registers [k, k + n) hold columns [col, col + n), n = kVec in
// the vector layout, else 1. For arrays read alongside the row (gamma, beta) one chunk at
// a time, without registers for the whole tile.
template <int kN, class T, class F>
__device__ __forceinline__ void tile_for_each(int64_t cols, int rank, int lanes, bool vec, F&& f) {
  constexpr int V = kVec<T>;
  if constexpr (kN % V == 0) {
    if (vec) {
      EMBER_UNROLL
      for (int j = 0; j < kN / V; ++j) {
        const int64_t c = (int64_t(j) * lanes + rank) * V;
        if (c < cols) f(j * V, c, std::integral_constant<int, V>{});
      }
      return;
    }
  }
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) {
    const int64_t c = int64_t(k) * lanes + rank;
    if (c < cols) f(k, c, std::integral_constant<int, 1>{});
  }
}

// --- A row streamed from memory (kStream, cross entropy, batch-norm statistics) -------------

// Visits columns [0, cols) of `row` among `lanes` threads (this one is `rank`): scalars up
// to the first 16-byte boundary of row, then 16-byte vectors, then a scalar tail; with vec
// false, scalars only. Calls f(col, std::integral_constant<int, width>) with width 1 or
// kVec<T>. Other arrays indexed by the same col are aligned alike when their addresses
// agree with row's modulo 16 bytes (the host's condition for vec).
template <class T, class F>
__device__ __forceinline__ void for_each_chunk(const T* row, int64_t cols, int rank, int lanes, bool vec, F&& f) {
  constexpr int V = kVec<T>;
  int64_t head = cols;
  if (vec) {
    const int64_t lead = (V - int64_t((reinterpret_cast<uintptr_t>(row) / sizeof(T)) % V)) % V;
    head = lead < cols ? lead : cols;
  }
  const int64_t nvec = (cols - head) / V;
  const int64_t tail = head + nvec * V;
  for (int64_t c = rank; c < head; c += lanes) f(c, std::integral_constant<int, 1>{});
  EMBER_UNROLL_BY(4)
  for (int64_t k = rank; k < nvec; k += lanes) f(head + k * V, std::integral_constant<int, V>{});
  for (int64_t c = tail + rank; c < cols; c += lanes) f(c, std::integral_constant<int, 1>{});
}

// --- Reductions over a group of threads ---------------------------------------------------

using ops::OnlineSoftmax;
using ops::Welford;

// Over each aligned group of kW lanes (a power of two <= 32); every lane of the warp calls
// it and gets its group's result. The xor butterfly of a commutative op leaves the same
// bits in every lane of a group.
template <int kW, class A>
__device__ __forceinline__ A group_sum(A v) {
  EMBER_UNROLL
  for (int o = kW / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <int kW, class A>
__device__ __forceinline__ OnlineSoftmax<A> group_merge(OnlineSoftmax<A> s) {
  EMBER_UNROLL
  for (int o = kW / 2; o > 0; o /= 2)
    s = s.merge({__shfl_xor_sync(0xffffffffu, s.max, o), __shfl_xor_sync(0xffffffffu, s.sum, o)});
  return s;
}

// Over the block, returned to every thread (every thread calls; blockDim.x is a multiple
// of 32). Deterministic: the order depends only on the block's shape.
template <class A>
__device__ __forceinline__ A block_sum(A v) {
  return block_reduce(v, SumOp{}, A(0));
}
// Two block sums at once, each with block_sum's bits (the same trees), for the price of
// one round of barriers (layer norm backward's two row means).
template <class A>
__device__ __forceinline__ void block_sum2(A& a, A& b) {
  __shared__ A part_a[32], part_b[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  a = group_sum<32>(a);
  b = group_sum<32>(b);
  __syncthreads();  // the arrays may still be read by a previous call
  if (lane == 0) {
    part_a[warp] = a;
    part_b[warp] = b;
  }
  __syncthreads();
  const bool mine = lane < int(blockDim.x / 32);
  a = group_sum<32>(mine ? part_a[lane] : A(0));
  b = group_sum<32>(mine ? part_b[lane] : A(0));
}
template <class A>
__device__ __forceinline__ OnlineSoftmax<A> block_merge(OnlineSoftmax<A> s) {
  __shared__ A maxes[32], sums[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  s = group_merge<32>(s);
  __syncthreads();  // the arrays may still be read by a previous call
  if (lane == 0) {
    maxes[warp] = s.max;
    sums[warp] = s.sum;
  }
  __syncthreads();
  s = lane < int(blockDim.x / 32) ? OnlineSoftmax<A>{maxes[lane], sums[lane]} : OnlineSoftmax<A>::empty();
  return group_merge<32>(s);
}

// Welford's merge is not symmetric to the last bit, so the warp folds down to lane 0 and
// broadcasts: every thread gets the same statistics.
template <class A>
__device__ __forceinline__ Welford<A> warp_welford(Welford<A> w) {
  EMBER_UNROLL
  for (int o = 16; o > 0; o /= 2) {
    const Welford<A> other{__shfl_down_sync(0xffffffffu, w.count, o), __shfl_down_sync(0xffffffffu, w.mean, o),
                           __shfl_down_sync(0xffffffffu, w.m2, o)};
    // Lanes past 31 - o read themselves (a GPU returns the caller's value); only lane 0's
    // result is kept, and its reads stay in range.
    w = int(threadIdx.x % 32) + o < 32 ? w.merge(other) : w;
  }
  return {__shfl_sync(0xffffffffu, w.count, 0), __shfl_sync(0xffffffffu, w.mean, 0),
          __shfl_sync(0xffffffffu, w.m2, 0)};
}
template <class A>
__device__ __forceinline__ Welford<A> block_welford(Welford<A> w) {
  __shared__ int64_t counts[32];
  __shared__ A means[32], m2s[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  w = warp_welford(w);
  __syncthreads();
  if (lane == 0) {
    counts[warp] = w.count;
    means[warp] = w.mean;
    m2s[warp] = w.m2;
  }
  __syncthreads();
  w = lane < int(blockDim.x / 32) ? Welford<A>{counts[lane], means[lane], m2s[lane]} : Welford<A>::empty();
  return warp_welford(w);
}

// How a kernel's threads are grouped over rows: a warp per row, or a block per row.
// Loops over rows are uniform within the group, so its collectives are never divergent.
struct WarpPerRow {
  __device__ static int rank() { return threadIdx.x % 32; }
  __device__ static int lanes() { return 32; }
  __device__ static int64_t first_row() { return (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; }
  __device__ static int64_t row_stride() { return int64_t(gridDim.x) * (blockDim.x / 32); }
  template <class A> __device__ static A sum(A v) { return group_sum<32>(v); }
  template <class A> __device__ static OnlineSoftmax<A> merge(OnlineSoftmax<A> s) { return group_merge<32>(s); }
};
struct BlockPerRow {
  __device__ static int rank() { return threadIdx.x; }
  __device__ static int lanes() { return blockDim.x; }
  __device__ static int64_t first_row() { return blockIdx.x; }
  __device__ static int64_t row_stride() { return gridDim.x; }
  template <class A> __device__ static A sum(A v) { return block_sum(v); }
  template <class A> __device__ static void sum2(A& a, A& b) { block_sum2(a, b); }
  template <class A> __device__ static OnlineSoftmax<A> merge(OnlineSoftmax<A> s) { return block_merge(s); }
};
// Reductions of the register kernels: over kW lanes (kWarp) or over the block (kBlock).
template <int kW>
struct SubWarp {
  template <class A> __device__ static A sum(A v) { return group_sum<kW>(v); }
  template <class A> __device__ static OnlineSoftmax<A> merge(OnlineSoftmax<A> s) { return group_merge<kW>(s); }
};

// --- Host: choosing the variant -------------------------------------------------------------

enum class RowVariant { kAuto, kWarp, kBlock, kStream };  // Note [Row variants]

inline const char* row_variant_name(RowVariant v) {
  switch (v) {
    case RowVariant::kAuto: return "auto";
    case RowVariant::kWarp: return "warp";
    case RowVariant::kBlock: return "block";
    case RowVariant::kStream: return "stream";
  }
  return "?";
}

inline constexpr int kWarpRowBlock = 128;   // threads per block of the kWarp kernels
inline constexpr int kMaxWarpRow = 1024;    // longest row kWarp takes (32 lanes x 32 registers)
inline constexpr int kMaxBlockThreads = 512;  // of the kBlock and kStream kernels
inline constexpr int kMinBlockRegs = 4;       // kN of the kBlock kernels: 4, 8, 16, 32

inline int64_t next_pow2(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// All pointers 16-byte aligned (the register variants' condition, with cols % vector).
template <class... P>
bool all_aligned16(const P*... p) {
  return (... && (p == nullptr || aligned16(p)));
}
// All pointers at the same offset modulo 16 bytes (kStream's condition for vectors).
template <class Q, class... P>
bool same_alignment(const Q* first, const P*... p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(first) % 16;
  return (... && (p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == a));
}

struct RowPlan {
  RowVariant variant = RowVariant::kStream;  // never kAuto
  int per_thread = 0;  // kWarp: kP (row padded to a power of two); kBlock: kN registers
  bool vec = false;    // 16-byte vector loads
  LaunchConfig cfg;
};

// The longest row kBlock takes with at most max_block_regs values a thread. Registers
// count compute-type values: float64 rows hold doubles, two registers each, so their cap
// halves.
inline int64_t block_variant_max_cols(int elem_bytes, int max_block_regs = 32) {
  return int64_t(kMaxBlockThreads) * (elem_bytes == 8 ? max_block_regs / 2 : max_block_regs);
}

// The largest kN a kBlock kernel of T is instantiated with (block_variant_max_cols).
template <class T, int kMaxRegs>
inline constexpr int kMaxBlockRegs = sizeof(T) == 8 ? kMaxRegs / 2 : kMaxRegs;

// The plan for `rows` rows of `cols` elements of elem_bytes each. aligned: the register
// variants' alignment holds (all_aligned16); stream_vec: kStream's (same_alignment).
// max_block_regs caps kN for kernels that keep several arrays in registers.
inline RowPlan plan_rows(const char* op, int64_t rows, int64_t cols, int elem_bytes, bool aligned, bool stream_vec,
                         RowVariant want, int max_block_regs = 32) {
  EMBER_CHECK(rows >= 0 && cols >= 0, op, ": negative shape [", rows, ", ", cols, "]");
  const int V = 16 / elem_bytes;
  const int64_t max_block_cols = block_variant_max_cols(elem_bytes, max_block_regs);
  RowVariant v = want;
  if (v == RowVariant::kAuto)
    v = cols <= kMaxWarpRow ? RowVariant::kWarp : (cols <= max_block_cols ? RowVariant::kBlock : RowVariant::kStream);
  RowPlan p;
  p.variant = v;
  if (v == RowVariant::kWarp) {
    EMBER_CHECK(cols <= kMaxWarpRow, op, ": the warp variant takes rows of at most ", kMaxWarpRow, " elements, got ",
                cols);
    const int kp = int(next_pow2(cols > 0 ? cols : 1));
    const int kw = kp < 32 ? kp : 32, kn = kp / kw;
    p.per_thread = kp;
    p.vec = aligned && cols % V == 0 && kn % V == 0;
    const int64_t rows_per_block = (kWarpRowBlock / 32) * (32 / kw);
    p.cfg = {dim3(grid_stride_blocks(rows, rows_per_block, 2048 / kWarpRowBlock)), dim3(kWarpRowBlock), 0};
  } else if (v == RowVariant::kBlock) {
    EMBER_CHECK(cols <= max_block_cols, op, ": the block variant takes rows of at most ", max_block_cols,
                " elements, got ", cols);
    int64_t kn = next_pow2((cols + kMaxBlockThreads - 1) / kMaxBlockThreads);
    if (kn < kMinBlockRegs) kn = kMinBlockRegs;
    const bool vec_shape = aligned && cols % V == 0;
    if (vec_shape && kn < V && V <= max_block_regs) kn = V;
    p.per_thread = int(kn);
    p.vec = vec_shape && kn % V == 0;
    int64_t threads = round_up((cols + kn - 1) / kn, 32);
    threads = threads < 32 ? 32 : (threads > kMaxBlockThreads ? kMaxBlockThreads : threads);
    p.cfg = {dim3(grid_stride_blocks(rows, 1, int(2048 / threads))), dim3(unsigned(threads)), 0};
  } else {
    p.vec = stream_vec;
    int64_t threads = round_up((cols + 4 * V - 1) / (4 * V), 32);  // 4 vectors a thread at least
    threads = threads < 32 ? 32 : (threads > kMaxBlockThreads ? kMaxBlockThreads : threads);
    p.cfg = {dim3(grid_stride_blocks(rows, 1, int(2048 / threads))), dim3(unsigned(threads)), 0};
  }
  return p;
}

// Calls f(std::integral_constant<int, P>) for the power of two P == value in [kLo, kHi].
template <int kLo, int kHi, class F>
void dispatch_pow2(int value, F&& f) {
  if constexpr (kLo <= kHi) {
    if (value == kLo) return f(std::integral_constant<int, kLo>{});
    return dispatch_pow2<kLo * 2, kHi>(value, f);
  } else {
    EMBER_FAIL("dispatch_pow2: no kernel instance for ", value);
  }
}

}  // namespace ember::kernels::cuda::rowwise
