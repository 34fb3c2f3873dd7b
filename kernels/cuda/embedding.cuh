// Embedding lookups and their gradient: the row gather out[i, :] = weight[index[i], :]
// (index_select along dim 0, and along any dim through `outer`), and the scatter-add
// backward grad_weight[index[i], :] += grad_out[i, :].
//
// An index outside [0, rows) is never followed: the gather writes a zero row for it, the
// backward skips it, and both record the smallest position of such an index in
// *first_bad when the caller passes that pointer (kNoBadIndex when there is none). The
// caller decides whether to read it back (a synchronization) and raise an ember::Error.
//
// Note [Deterministic embedding backward]. Several positions may name the same row, and
// float addition is not associative, so adding with atomics gives results that change
// from run to run. The default path instead sorts the positions by index, stably, with
// an LSD radix sort over the index's bits (8 bits a pass: one pass below 256 rows, two
// below 65536, three below 2^24), then gives each row of grad_weight to 32 threads (one per column, a
// column loop for wider rows) that find the row's run of positions by binary search and
// add its gradients in order of position: the same additions in the same order as a
// serial CPU loop, so float results equal the CPU backend's bit for bit, every run. A
// pass of the sort is a tile histogram (shared-memory integer atomics: exact), one
// exclusive scan of the digit-major [256, tiles] counts, and a stable scatter that ranks
// equal digits within a warp by 8 ballots. Rows that are never named get zeros. A row
// named by very many positions is summed by one thread per column (what a real-data
// padding row would cost); a chunked two-level sum would spread it.
// EmbeddingBackward::kAtomic zeroes grad_weight and adds with atomicAdd instead:
// one pass, no workspace, results that depend on timing (float and double only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/types.cuh"
#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

inline constexpr unsigned long long kNoBadIndex = ~0ull;

enum class EmbeddingBackward { kDeterministic, kAtomic };

namespace embedding_detail {

inline constexpr int kRadixBits = 8, kRadix = 1 << kRadixBits;
inline constexpr int kSortThreads = 256;                  // one thread per digit in the scan of a tile
inline constexpr int kSortRounds = 8;                     // rounds of 256 positions per tile
inline constexpr int64_t kTileItems = int64_t(kSortThreads) * kSortRounds;
inline constexpr int kScanThreads = 1024;

// The sort key of an index: itself when in range, `rows` (sorting after every valid key)
// otherwise.
template <class I>
__device__ __forceinline__ uint32_t sort_key(I v, int64_t rows) {
  const int64_t x = static_cast<int64_t>(v);
  return x >= 0 && x < rows ? static_cast<uint32_t>(x) : static_cast<uint32_t>(rows);
}

// (Kernels in this header are templates, so that every translation unit may include it.)
template <class U>
__global__ void set_value_kernel(U* p, U v) { *p = v; }

// *first_bad = kNoBadIndex. (The explicit address makes GCC instantiate the kernel, which
// it omits when a specialization is named only as a template argument: GCC bug 53164.)
inline LaunchConfig set_value_config() { return LaunchConfig{dim3(1), dim3(1), 0}; }
inline void reset_bad_index(unsigned long long* first_bad, cudaStream_t stream) {
  if (!first_bad) return;
  constexpr auto kernel = &set_value_kernel<unsigned long long>;
  launch<kernel>(set_value_config(), stream, first_bad, kNoBadIndex);
}

}  // namespace embedding_detail

// ---------------------------------------------------------------------------------------
// Gather: out [outer, L, inner] = in [outer, rows, inner] at rows index [L], rows moved as
// carriers V (up to 16 bytes). Memory bound: 2 * sizeof(T) bytes per output element, plus
// an index per row.
template <class V, class I>
__global__ void __launch_bounds__(256) index_select_rows_kernel(const V* __restrict__ in, const I* __restrict__ index,
                                                                V* __restrict__ out, int64_t rows, int64_t L,
                                                                int64_t row_len, int64_t nvec,
                                                                unsigned long long* first_bad) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < nvec; e += step) {
    const int64_t r = e / row_len, col = e - r * row_len, o = r / L, l = r - o * L;
    const int64_t v = static_cast<int64_t>(index[l]);
    check_vector_alignment<V>(out + e);
    if (v >= 0 && v < rows) {
      check_vector_alignment<V>(in + (o * rows + v) * row_len + col);
      out[e] = in[(o * rows + v) * row_len + col];
    } else {
      out[e] = V{};
      if (first_bad && col == 0) atomicMin(first_bad, static_cast<unsigned long long>(l));
    }
  }
}

inline LaunchConfig index_select_rows_config(int64_t nvec) {
  return LaunchConfig{dim3(grid_stride_blocks(nvec, kBlockThreads)), dim3(kBlockThreads), 0};
}

// ---------------------------------------------------------------------------------------
// The radix sort's kernels (Note [Deterministic embedding backward]).

// counts[d * tiles + t] = how many keys of tile t have digit d. kFirst: the keys are
// sort_key(index[i]) (and bad indices are reported), else keys[i]. Memory bound: reads
// sizeof(I) or 4 bytes per position, writes 4 bytes per 2048 / 256 positions.
template <class I, bool kFirst>
__global__ void __launch_bounds__(256) embedding_radix_histogram_kernel(const I* __restrict__ index,
                                                                        const uint32_t* __restrict__ keys, int64_t n,
                                                                        int64_t rows, int shift,
                                                                        uint32_t* __restrict__ counts, int64_t tiles,
                                                                        unsigned long long* first_bad) {
  using namespace embedding_detail;
  __shared__ uint32_t hist[kRadix];
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    hist[threadIdx.x] = 0;
    __syncthreads();
    const int64_t end = (tile + 1) * kTileItems < n ? (tile + 1) * kTileItems : n;
    for (int64_t i = tile * kTileItems + threadIdx.x; i < end; i += kSortThreads) {
      uint32_t key;
      if constexpr (kFirst) {
        key = sort_key(index[i], rows);
        if (first_bad && key == uint32_t(rows)) atomicMin(first_bad, static_cast<unsigned long long>(i));
      } else {
        key = keys[i];
      }
      atomicAdd(&hist[(key >> shift) & (kRadix - 1)], 1u);
    }
    __syncthreads();
    // No barrier before the next turn: thread t clears hist[t], which only it reads here,
    // and the next turn's atomics wait at the barrier after the clearing.
    counts[threadIdx.x * tiles + tile] = hist[threadIdx.x];
  }
}

// data[0, n) = its exclusive prefix sum, in one block (the counts are small: 256 per
// 2048 positions; 8 bytes moved per count, at one SM's bandwidth): rounds of 1024
// coalesced elements, a shuffle scan per warp, the warps' totals scanned by the first
// warp, and the running total carried between rounds.
template <class U>
__global__ void __launch_bounds__(1024) embedding_exclusive_scan_kernel(U* __restrict__ data, int64_t n) {
  __shared__ U warp_totals[32];
  __shared__ U carry;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) carry = 0;
  for (int64_t base = 0; base < n; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const U x = i < n ? data[i] : U(0);
    U inc = x;
    for (int d = 1; d < 32; d *= 2) {
      const U up = __shfl_up_sync(0xffffffffu, inc, d);
      if (lane >= d) inc += up;
    }
    // The previous round's reads of warp_totals came before its last barrier, and its
    // write of carry comes before the next two.
    if (lane == 31) warp_totals[warp] = inc;
    __syncthreads();
    if (warp == 0) {
      U t = lane < int(blockDim.x / 32) ? warp_totals[lane] : U(0);
      for (int d = 1; d < 32; d *= 2) {
        const U up = __shfl_up_sync(0xffffffffu, t, d);
        if (lane >= d) t += up;
      }
      warp_totals[lane] = t;  // inclusive over warps
    }
    __syncthreads();
    const U before = carry + (warp > 0 ? warp_totals[warp - 1] : U(0)) + inc - x;
    if (i < n) data[i] = before;
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) carry = before + x;
  }
}

namespace embedding_detail {
inline LaunchConfig exclusive_scan_config() { return LaunchConfig{dim3(1), dim3(kScanThreads), 0}; }
inline void exclusive_scan(uint32_t* data, int64_t n, cudaStream_t stream) {
  constexpr auto kernel = &embedding_exclusive_scan_kernel<uint32_t>;  // instantiated: see reset_bad_index
  launch<kernel>(exclusive_scan_config(), stream, data, n);
}
}  // namespace embedding_detail

// One stable pass: every key of tile t with digit d goes to offsets[d * tiles + t] plus
// the number of keys before it in the tile with the same digit. Within a round of 256
// positions, equal digits in a warp are found with 8 ballots (one per digit bit), and
// the warps' counts per digit are prefix-summed by the thread owning that digit. Memory
// bound: 8 bytes (key, position) read and written per position, scattered in runs.
template <class I, bool kFirst>
__global__ void __launch_bounds__(256) embedding_radix_scatter_kernel(
    const I* __restrict__ index, const uint32_t* __restrict__ keys_in, const uint32_t* __restrict__ vals_in,
    uint32_t* __restrict__ keys_out, uint32_t* __restrict__ vals_out, int64_t n, int64_t rows, int shift,
    const uint32_t* __restrict__ offsets, int64_t tiles) {
  using namespace embedding_detail;
  constexpr int kWarps = kSortThreads / 32;
  __shared__ uint32_t next[kRadix];            // where the tile's next key of each digit goes
  __shared__ uint32_t warp_base[kWarps][kRadix];  // per round: counts, then positions
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    next[threadIdx.x] = offsets[threadIdx.x * tiles + tile];
    for (int r = 0; r < kSortRounds; ++r) {
      const int64_t i = tile * kTileItems + int64_t(r) * kSortThreads + threadIdx.x;
      const bool valid = i < n;
      uint32_t key = 0, val = 0;
      if (valid) {
        if constexpr (kFirst) {
          key = sort_key(index[i], rows);
          val = static_cast<uint32_t>(i);
        } else {
          key = keys_in[i];
          val = vals_in[i];
        }
      }
      const uint32_t digit = (key >> shift) & (kRadix - 1);
      unsigned peers = __ballot_sync(0xffffffffu, valid);
      for (int b = 0; b < kRadixBits; ++b) {
        const bool bit = (digit >> b) & 1u;
        const unsigned ones = __ballot_sync(0xffffffffu, bit);
        peers &= bit ? ones : ~ones;
      }
      const uint32_t rank = __popc(peers & lanes_below);
      for (int w = 0; w < kWarps; ++w) warp_base[w][threadIdx.x] = 0;
      __syncthreads();
      if (valid && rank == 0) warp_base[warp][digit] = __popc(peers);
      __syncthreads();
      uint32_t run = next[threadIdx.x];  // thread t owns digit t
      for (int w = 0; w < kWarps; ++w) {
        const uint32_t c = warp_base[w][threadIdx.x];
        warp_base[w][threadIdx.x] = run;
        run += c;
      }
      next[threadIdx.x] = run;
      __syncthreads();
      if (valid) {
        const uint32_t pos = warp_base[warp][digit] + rank;
        keys_out[pos] = key;
        vals_out[pos] = val;
      }
      __syncthreads();  // warp_base is cleared by the next round
    }
  }
}

inline LaunchConfig embedding_radix_config(int64_t tiles) {
  return LaunchConfig{dim3(grid_stride_blocks(tiles, 1, 4)), dim3(embedding_detail::kSortThreads), 0};
}

// grad_weight [rows, D] (overwritten): row v = the sum, in order of position, of
// grad_out [n, D] at the positions whose sorted key is v. Blocks of 32 x 8 threads: a
// row per warp, a column per lane. Memory bound: sizeof(T) read per grad_out element,
// sizeof(T) written per grad_weight element, plus 8 bytes per position for the sorted
// keys and positions.
template <class T>
__global__ void __launch_bounds__(256) embedding_segment_sum_kernel(const T* __restrict__ grad_out,
                                                                    const uint32_t* __restrict__ sorted_keys,
                                                                    const uint32_t* __restrict__ sorted_pos,
                                                                    int64_t n, int64_t rows, int64_t D,
                                                                    T* __restrict__ grad_weight) {
  using C = compute_t<T>;
  for (int64_t v = blockIdx.x * int64_t(blockDim.y) + threadIdx.y; v < rows; v += int64_t(gridDim.x) * blockDim.y) {
    // The run [lo, hi) of key v: two binary searches.
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (sorted_keys[mid] < uint32_t(v)) lo = mid + 1;
      else hi = mid;
    }
    int64_t end = n, l2 = lo;
    while (l2 < end) {
      const int64_t mid = (l2 + end) / 2;
      if (sorted_keys[mid] <= uint32_t(v)) l2 = mid + 1;
      else end = mid;
    }
    for (int64_t col = threadIdx.x; col < D; col += blockDim.x) {
      C acc = C(0);
      for (int64_t p = lo; p < end; ++p) acc += widen(grad_out[int64_t(sorted_pos[p]) * D + col]);
      grad_weight[v * D + col] = round_to<T>(acc);
    }
  }
}

inline LaunchConfig embedding_segment_sum_config(int64_t rows) {
  return LaunchConfig{dim3(grid_stride_blocks(rows, 8)), dim3(32, 8), 0};
}

// The atomic variant: grad_weight zeroed, then every grad_out element added with
// atomicAdd. Memory bound: sizeof(T) read and an atomic per grad_out element.
template <class T>
__global__ void __launch_bounds__(256) embedding_zero_kernel(T* __restrict__ p, int64_t n) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += step) p[i] = T(0);
}

template <class T, class I>
__global__ void __launch_bounds__(256) embedding_atomic_add_kernel(const T* __restrict__ grad_out,
                                                                   const I* __restrict__ index, int64_t n,
                                                                   int64_t rows, int64_t D, T* grad_weight,
                                                                   unsigned long long* first_bad) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * D; e += step) {
    const int64_t i = e / D, col = e - i * D, v = static_cast<int64_t>(index[i]);
    if (v >= 0 && v < rows) atomicAdd(grad_weight + v * D + col, grad_out[e]);
    else if (first_bad && col == 0) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

inline LaunchConfig embedding_elementwise_config(int64_t n) {
  return LaunchConfig{dim3(grid_stride_blocks(n, kBlockThreads)), dim3(kBlockThreads), 0};
}

// ---------------------------------------------------------------------------------------
// Host side.

namespace embedding_detail {

template <class I>
void check_index_type() {
  static_assert(std::is_same_v<I, int64_t> || std::is_same_v<I, int32_t>, "indices are int64 or int32");
}

// The workspace's parts, each 16-byte aligned: keys and positions twice (ping-pong) and
// the tile counts.
struct SortWorkspace {
  uint32_t *keys[2], *vals[2], *counts;
};
inline size_t align16(size_t b) { return (b + 15) / 16 * 16; }
inline int64_t sort_tiles(int64_t n) { return (n + kTileItems - 1) / kTileItems; }
inline SortWorkspace carve(void* base, int64_t n) {
  char* p = static_cast<char*>(base);
  const size_t part = align16(size_t(n) * sizeof(uint32_t));
  SortWorkspace w;
  for (int k = 0; k < 2; ++k) {
    w.keys[k] = reinterpret_cast<uint32_t*>(p + 2 * k * part);
    w.vals[k] = reinterpret_cast<uint32_t*>(p + (2 * k + 1) * part);
  }
  w.counts = reinterpret_cast<uint32_t*>(p + 4 * part);
  return w;
}

}  // namespace embedding_detail

// out [outer, L, inner] = in [outer, rows, inner] at rows index [L] (all contiguous);
// embedding: outer = 1, inner = the embedding width. Any element type of 1, 2, 4 or 8
// bytes; index int64 or int32. Rows move in the widest carrier (up to 16 bytes) that the
// row size and both pointers allow. first_bad: see the top of the file (may be null).
template <class T, class I>
void index_select_rows(const T* in, const I* index, T* out, int64_t outer, int64_t rows, int64_t L, int64_t inner,
                       unsigned long long* first_bad, cudaStream_t stream) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "elements of 1, 2, 4 or 8 bytes");
  embedding_detail::check_index_type<I>();
  EMBER_CHECK(outer >= 0 && rows >= 0 && L >= 0 && inner >= 0, "index_select_rows: negative size (outer ", outer,
              ", rows ", rows, ", indices ", L, ", inner ", inner, ")");
  embedding_detail::reset_bad_index(first_bad, stream);
  if (outer == 0 || L == 0 || inner == 0) return;
  const int w = max_alignment(reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out) |
                             uint64_t(inner) * sizeof(T));
  auto go = [&](auto carrier) {
    using V = decltype(carrier);
    const int64_t row_len = inner * int64_t(sizeof(T)) / int64_t(sizeof(V)), nvec = outer * L * row_len;
    launch<index_select_rows_kernel<V, I>>(index_select_rows_config(nvec), stream, reinterpret_cast<const V*>(in),
                                           index, reinterpret_cast<V*>(out), rows, L, row_len, nvec, first_bad);
  };
  with_carrier<int(sizeof(T))>(w, go);
}

// out [L, D] = weight [rows, D] at index [L].
template <class T, class I>
void embedding_forward(const T* weight, const I* index, T* out, int64_t rows, int64_t L, int64_t D,
                       unsigned long long* first_bad, cudaStream_t stream) {
  index_select_rows(weight, index, out, 1, rows, L, D, first_bad, stream);
}

// Device memory embedding_backward needs for n indices (0 for kAtomic).
inline size_t embedding_backward_workspace_bytes(int64_t n,
                                                 EmbeddingBackward mode = EmbeddingBackward::kDeterministic) {
  using namespace embedding_detail;
  if (mode == EmbeddingBackward::kAtomic || n <= 0) return 0;
  return 4 * align16(size_t(n) * sizeof(uint32_t)) + align16(size_t(kRadix) * size_t(sort_tiles(n)) * sizeof(uint32_t));
}

// grad_weight [rows, D] (overwritten) = for each row v, the sum of grad_out [n, D] over the
// positions i with index[i] == v (zero where none). Deterministic by default (Note
// [Deterministic embedding backward]); float, double, __half, __nv_bfloat16 (summed in
// float). kAtomic: float and double, no workspace. `workspace`: device memory of at least
// embedding_backward_workspace_bytes(n, mode), 16-byte aligned.
template <class T, class I>
void embedding_backward(const T* grad_out, const I* index, T* grad_weight, int64_t n, int64_t rows, int64_t D,
                        void* workspace, size_t workspace_bytes, unsigned long long* first_bad, cudaStream_t stream,
                        EmbeddingBackward mode = EmbeddingBackward::kDeterministic) {
  using namespace embedding_detail;
  check_index_type<I>();
  EMBER_CHECK(n >= 0 && rows >= 0 && D >= 0, "embedding_backward: negative size (indices ", n, ", rows ", rows,
              ", width ", D, ")");
  EMBER_CHECK(n < (int64_t(1) << 32) && rows < (int64_t(1) << 31), "embedding_backward: ", n, " indices into ", rows,
              " rows exceed the sort's 32-bit keys and positions");
  const size_t need = embedding_backward_workspace_bytes(n, mode);
  EMBER_CHECK(workspace_bytes >= need && (need == 0 || reinterpret_cast<uintptr_t>(workspace) % 16 == 0),
              "embedding_backward: workspace of ", workspace_bytes, " bytes at ", workspace, " (needs ", need,
              " bytes, 16-byte aligned)");
  reset_bad_index(first_bad, stream);
  if (rows == 0 || D == 0) return;
  if (mode == EmbeddingBackward::kAtomic) {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      launch<embedding_zero_kernel<T>>(embedding_elementwise_config(rows * D), stream, grad_weight, rows * D);
      launch<embedding_atomic_add_kernel<T, I>>(embedding_elementwise_config(n * D), stream, grad_out, index, n, rows,
                                                D, grad_weight, first_bad);
      return;
    } else {
      EMBER_FAIL("embedding_backward: the atomic variant takes float32 and float64 only");
    }
  }
  const uint32_t* sorted_keys = nullptr;
  const uint32_t* sorted_pos = nullptr;
  if (n > 0) {
    const SortWorkspace ws = carve(workspace, n);
    const int64_t tiles = sort_tiles(n);
    int bits = 1;
    while ((int64_t(1) << bits) <= rows) ++bits;  // keys go up to `rows` (the bad-index key)
    const LaunchConfig cfg = embedding_radix_config(tiles);
    int cur = 0;
    for (int shift = 0; shift < bits; shift += kRadixBits) {
      const bool first = shift == 0;
      if (first)
        launch<embedding_radix_histogram_kernel<I, true>>(cfg, stream, index, nullptr, n, rows, shift, ws.counts,
                                                          tiles, first_bad);
      else
        launch<embedding_radix_histogram_kernel<I, false>>(cfg, stream, index, ws.keys[cur], n, rows, shift,
                                                           ws.counts, tiles, nullptr);
      exclusive_scan(ws.counts, int64_t(kRadix) * tiles, stream);
      const int dst = first ? 0 : 1 - cur;
      if (first)
        launch<embedding_radix_scatter_kernel<I, true>>(cfg, stream, index, nullptr, nullptr, ws.keys[dst],
                                                        ws.vals[dst], n, rows, shift, ws.counts, tiles);
      else
        launch<embedding_radix_scatter_kernel<I, false>>(cfg, stream, index, ws.keys[cur], ws.vals[cur], ws.keys[dst],
                                                         ws.vals[dst], n, rows, shift, ws.counts, tiles);
      cur = dst;
    }
    sorted_keys = ws.keys[cur];
    sorted_pos = ws.vals[cur];
  }
  launch<embedding_segment_sum_kernel<T>>(embedding_segment_sum_config(rows), stream, grad_out, sorted_keys,
                                          sorted_pos, n, rows, D, grad_weight);
}

}  // namespace ember::kernels::cuda
