// Data movement between layouts: a batch of matrix transposes through shared-memory tiles,
// and permute-to-contiguous (Tensor::contiguous() of any strided view, up to 8 dims).
// Every kernel here only moves bytes, so it is instantiated per element size (1, 2, 4 or
// 8 bytes, through the carriers of types.cuh), and serves every dtype of that
// size. Each is memory bound: it reads and writes each element once, 2 * sizeof(T) bytes
// per element (the ceiling on an H200 is 4.8 TB/s of HBM traffic).
//
// permute_contiguous picks one of four paths (Note [Permute paths]); permute_path() says
// which, so tests and benchmarks can reach each one by name.
#pragma once

#include <cstdint>

#include "kernels/cuda/types.cuh"
#include "kernels/cuda/launch.h"

namespace ember::kernels::cuda {

// Note [Permute paths]. permute_contiguous(in, out, layout) writes the elements of the
// strided view `layout` of `in` to `out` in row-major order. It first coalesces the view
// (drops size-1 dims, merges dims the strides let it merge), then:
// - kContiguous: the view is one contiguous run; a vectorized memcpy (16-byte loads and
//   stores when the two pointers agree modulo 16, narrower otherwise, scalar head/tail).
// - kTiled: the innermost dim is strided but another dim has stride 1 (a transpose, e.g.
//   NCHW <-> NHWC or x.t()): 32 x 64 tiles through shared memory padded to 64 x 33, so
//   both the reads and the writes are coalesced and the tile's column reads hit 32
//   different banks; or, where every tile row is 16-byte aligned, square tiles moved as
//   16-byte vectors (Note [Vector transpose]). Only when both tile dims have at least
//   kMinTileDim elements:
//   thinner tiles leave most of a block idle (an estimate, not yet measured on a GPU;
//   bench/ should set it).
// - kRows: the innermost dim has stride 1: rows copied with the widest vector (up to 16
//   bytes) that the row length, the strides and both pointers allow.
// - kGeneral: anything else (several strided dims, broadcast stride-0 dims): one element
//   per thread per turn of a grid-stride loop, its offset from its row-major index. kRows
//   is the same gather over carriers; both index in 32 bits where everything fits.
enum class PermutePath { kEmpty, kContiguous, kTiled, kRows, kGeneral };
inline constexpr int64_t kMinTileDim = 16;

namespace layout_detail {

inline constexpr int kTile = 32, kTileB = 64, kTileRows = 8;  // 32 (a) x 64 (b) tiles, blocks of 32 x 8 threads

// Note [Tile order]. The blocks resident at once (8 x 132 on an H200) take consecutive
// tiles. With b fastest over the whole plane, as before, they read a 128-byte piece of
// each of ~8000 input rows 16 KiB apart ([rows, 4096] float32): one 128-byte burst per
// DRAM page opened, while their writes ran along 128 whole output rows. In bands of
// kBandA = 8 tiles along a (b fastest inside a band, then the next band), the same blocks
// read 1 KiB runs of input rows (8 tiles of 32 elements) and write 33 KiB runs of 256
// output rows: long runs on both sides, as GEMMs raster their tiles for L2 reuse. A
// permute whose b is one tile (NCHW -> NHWC at C <= 64) keeps its order.
inline constexpr int kBandA = 8;

// The tile loop's map from a tile to memory. Dim a has input stride 1, dim b output
// stride 1; the other dims (up to 6) are a batch of tiles with their own strides. Index
// type I as in Indexer: uint32_t (narrow()) wherever fits_32_bits says so.
template <class I = int64_t>
struct TileMap {
  I na = 1, nb = 1;         // sizes of dims a and b
  I in_stride_b = 0;        // input stride of b (a's is 1)
  I out_stride_a = 0;       // output stride of a (b's is 1)
  I tiles_a = 1, tiles_b = 1;
  int nbatch = 0;
  I batch_sizes[kMaxDims - 2] = {};
  I batch_in[kMaxDims - 2] = {}, batch_out[kMaxDims - 2] = {};

  I tiles() const {
    I t = tiles_a * tiles_b;
    for (int d = 0; d < nbatch; ++d) t *= batch_sizes[d];
    return t;
  }
  // Whether the tile count and the largest input and output offsets stay below 2^31, so
  // that the kernels' unsigned arithmetic (a tile's a and b run up to 127 past na and nb,
  // a grid-stride turn adds the grid) stays below 2^32.
  bool fits_32_bits() const {
    constexpr int64_t kMax = int64_t{1} << 31;
    int64_t last_in = (na - 1) + (nb - 1) * in_stride_b, last_out = (na - 1) * out_stride_a + (nb - 1);
    for (int d = 0; d < nbatch; ++d) {
      if (batch_in[d] < 0 || batch_out[d] < 0) return false;
      last_in += (batch_sizes[d] - 1) * batch_in[d];
      last_out += (batch_sizes[d] - 1) * batch_out[d];
    }
    return in_stride_b >= 0 && tiles() < kMax && last_in < kMax && last_out < kMax;
  }
  TileMap<uint32_t> narrow() const {
    TileMap<uint32_t> m;
    m.na = uint32_t(na), m.nb = uint32_t(nb), m.in_stride_b = uint32_t(in_stride_b);
    m.out_stride_a = uint32_t(out_stride_a), m.tiles_a = uint32_t(tiles_a), m.tiles_b = uint32_t(tiles_b);
    m.nbatch = nbatch;
    for (int d = 0; d < nbatch; ++d) {
      m.batch_sizes[d] = uint32_t(batch_sizes[d]);
      m.batch_in[d] = uint32_t(batch_in[d]);
      m.batch_out[d] = uint32_t(batch_out[d]);
    }
    return m;
  }
};

// Tile t of m (tiles of kA x kB elements): its first a and b, and its batch's offsets.
template <int kA, int kB, class I>
__device__ __forceinline__ void tile_at(const TileMap<I>& m, I t, I& a0, I& b0, I& in_off, I& out_off) {
  // Tiles in bands of kBandA tiles along a, b fastest inside a band (Note [Tile order]).
  const I plane = m.tiles_a * m.tiles_b, in_plane = t % plane, band = in_plane / (kBandA * m.tiles_b);
  const I in_band = in_plane - band * (kBandA * m.tiles_b);
  const I band_a = m.tiles_a - band * kBandA < kBandA ? m.tiles_a - band * kBandA : I(kBandA);
  const I ta = band * kBandA + in_band % band_a, tb = in_band / band_a;
  I rest = t / plane;
  in_off = 0, out_off = 0;
  EMBER_UNROLL  // constant indices into m: a run-time one put m in local memory
  for (int d = kMaxDims - 3; d >= 0; --d) {
    if (d >= m.nbatch) continue;
    const I q = rest / m.batch_sizes[d], c = rest - q * m.batch_sizes[d];
    in_off += c * m.batch_in[d];
    out_off += c * m.batch_out[d];
    rest = q;
  }
  a0 = ta * kA, b0 = tb * kB;
}
}  // namespace layout_detail

// ---------------------------------------------------------------------------------------
// Tiled transpose: out[batch, tile dims swapped] through padded shared tiles of kTile (a)
// x kTileB (b) elements. Memory bound, 2 * sizeof(U) bytes per element. A 1-D grid-stride
// loop over tiles (grids of any size), one 32 x 8 block per tile per turn, each thread
// moving kPerThread = 8 elements: a whole tile's 8 loads are issued before any is used
// (the 32 x 32 tiles of 4 guarded loads a thread ran at 49% of a copy on an H200,
// 2026-12-04: too few bytes in flight between the barriers). Edge tiles take the guarded
// loop. The tile-to-offset divisions in 32 bits where they fit (TileMap::fits_32_bits).
template <class U, class I>
__global__ void __launch_bounds__(256) tiled_transpose_kernel(const U* __restrict__ in, U* __restrict__ out,
                                                              layout_detail::TileMap<I> m, I tiles) {
  using namespace layout_detail;
  constexpr int kPerThread = kTileB / kTileRows;  // b rows a thread reads; a rows (x 2 b) it writes
  __shared__ U tile[kTileB][kTile + 1];
  for (I t = blockIdx.x; t < tiles; t += gridDim.x) {
    I a0, b0, in_off, out_off;
    tile_at<kTile, kTileB>(m, t, a0, b0, in_off, out_off);
    const bool whole = a0 + kTile <= m.na && b0 + kTileB <= m.nb;
    // Read: consecutive threads along a (stride 1 in the input).
    if (whole) {
      const U* src = in + in_off + (b0 + threadIdx.y) * m.in_stride_b + a0 + threadIdx.x;
      U r[kPerThread];
      EMBER_UNROLL
      for (int j = 0; j < kPerThread; ++j) r[j] = src[I(j * kTileRows) * m.in_stride_b];
      EMBER_UNROLL
      for (int j = 0; j < kPerThread; ++j) tile[threadIdx.y + j * kTileRows][threadIdx.x] = r[j];
    } else {
      const I a = a0 + threadIdx.x;
      for (int k = threadIdx.y; k < kTileB; k += kTileRows) {
        const I b = b0 + k;
        if (a < m.na && b < m.nb) tile[k][threadIdx.x] = in[in_off + b * m.in_stride_b + a];
      }
    }
    __syncthreads();
    // Write: consecutive threads along b (stride 1 in the output), kTileB / 32 runs of 32;
    // the column reads of the tile are conflict-free thanks to the pad column.
    if (whole) {
      U* dst = out + out_off + (a0 + threadIdx.y) * m.out_stride_a + b0 + threadIdx.x;
      EMBER_UNROLL
      for (int j = 0; j < kPerThread; ++j) {
        const int da = (j % (kTile / kTileRows)) * kTileRows, half = j / (kTile / kTileRows);
        dst[I(da) * m.out_stride_a + half * kTile] = tile[threadIdx.x + half * kTile][threadIdx.y + da];
      }
    } else {
      for (int half = 0; half < kTileB / kTile; ++half) {
        const I b = b0 + half * kTile + threadIdx.x;
        for (int k = threadIdx.y; k < kTile; k += kTileRows) {
          const I a2 = a0 + k;
          if (a2 < m.na && b < m.nb) out[out_off + a2 * m.out_stride_a + b] = tile[threadIdx.x + half * kTile][k];
        }
      }
    }
    __syncthreads();  // the tile is refilled by the next turn
  }
}


// ---------------------------------------------------------------------------------------
// Note [Vector transpose]. The tiled transpose with 16-byte global accesses, for elements
// of 2, 4 or 8 bytes (V = 16 / size per vector) where both sides allow them: the input's
// and the output's pointers 16-byte aligned, and every stride that steps between rows of a
// tile (in_stride_b, out_stride_a, the batch strides) a multiple of V. Square tiles of
// kT = 16 V elements (64 x 64 floats), 256 threads as 16 x 16 sub-blocks of V x V:
// - a thread loads its sub-block as V vectors, one from each of V input rows (a warp reads
//   two whole 256-byte runs of two rows a load: 16 sectors a request), and transposes it
//   in registers into V vectors along b, one for each a;
// - it stores them to the shared tile [kT a][16 vectors of b], vector q of row a at slot
//   q ^ ((a / V) & 7). A 16-byte shared access is served a quarter warp (8 lanes, 128
//   bytes) at a time, without conflict when the 8 lanes hit 8 different 16-byte bank
//   groups: the 8 lanes that store together hold the same q in rows of 8 different a / V,
//   and the 8 that load together below read the 8 vectors q of one row; the XOR spreads
//   both over the 8 groups (unswizzled, the stores would be 8-way conflicts);
// - after the barrier, each thread reads V vectors of b (rows ty + 16 j of the tile) and
//   stores each as one 16-byte store: a warp writes two whole 256-byte runs of two output
//   rows a store.
// So every global access is 16 bytes, a quarter of the requests of the scalar kernel,
// and each thread has V 16-byte loads in flight between the barriers (64 B; 128 KiB an SM
// at 8 blocks of 256), against the scalar kernel's 8 x 4 bytes. Edge tiles (past na or
// nb) go through the same swizzled tile an element at a time, guarded. The 1-byte
// elements, and views that break an alignment, keep the scalar kernel.
// Blocks of 256 an SM the vector transpose asks registers for: 2 for 2-byte elements (an
// 8 x 8 sub-block, 92-108 registers on sm_90), else 4 (62-64; with no minimum, ptxas gave
// the 8-byte form 32 registers and 16 bytes of spill).
template <class U>
inline constexpr int kVecTransposeBlocks = sizeof(U) == 2 ? 2 : 4;

template <class U, class I>
__global__ void __launch_bounds__(256, kVecTransposeBlocks<U>)
    tiled_transpose_vec_kernel(const U* __restrict__ in, U* __restrict__ out, layout_detail::TileMap<I> m, I tiles) {
  using namespace layout_detail;
  constexpr int V = 16 / int(sizeof(U)), kT = 16 * V;
  static_assert(V >= 2 && V <= 8, "elements of 2, 4 or 8 bytes");
  using Vec = Pack<U, V>;
  __shared__ Vec tile[kT][16];  // [a][b / V], swizzled (above)
  const auto slot = [](int a, int q) { return q ^ ((a / V) & 7); };
  const int tx = int(threadIdx.x) % 16, ty = int(threadIdx.x) / 16;
  for (I t = blockIdx.x; t < tiles; t += gridDim.x) {
    I a0, b0, in_off, out_off;
    tile_at<kT, kT>(m, t, a0, b0, in_off, out_off);
    const bool whole = a0 + kT <= m.na && b0 + kT <= m.nb;
    if (whole) {
      const U* src = in + in_off + (b0 + I(V * ty)) * m.in_stride_b + a0 + I(V * tx);
      Vec r[V];
      EMBER_UNROLL
      for (int j = 0; j < V; ++j) r[j] = load_vec<Vec>(src + I(j) * m.in_stride_b);
      EMBER_UNROLL
      for (int c = 0; c < V; ++c) {
        Vec col;
        EMBER_UNROLL
        for (int j = 0; j < V; ++j) col.v[j] = r[j].v[c];
        tile[V * tx + c][slot(V * tx + c, ty)] = col;
      }
    } else {
      // Consecutive threads along a (stride 1 in the input).
      for (int k = threadIdx.x; k < kT * kT; k += 256) {
        const int a = k % kT, b = k / kT;
        if (a0 + a < m.na && b0 + b < m.nb)
          tile[a][slot(a, b / V)].v[b % V] = in[in_off + (b0 + b) * m.in_stride_b + a0 + a];
      }
    }
    __syncthreads();
    if (whole) {
      U* dst = out + out_off + (a0 + I(ty)) * m.out_stride_a + b0 + I(V * tx);
      EMBER_UNROLL
      for (int j = 0; j < V; ++j) {
        const int a = ty + 16 * j;
        store_vec_global(dst + I(16 * j) * m.out_stride_a, tile[a][slot(a, tx)]);
      }
    } else {
      // Consecutive threads along b (stride 1 in the output).
      for (int k = threadIdx.x; k < kT * kT; k += 256) {
        const int b = k % kT, a = k / kT;
        if (a0 + a < m.na && b0 + b < m.nb)
          out[out_off + (a0 + a) * m.out_stride_a + b0 + b] = tile[a][slot(a, b / V)].v[b % V];
      }
    }
    __syncthreads();  // the tile is refilled by the next turn
  }
}

namespace layout_detail {
// m with its tile counts for tiles of ta x tb elements.
template <class I>
TileMap<I> with_tiles(TileMap<I> m, int ta, int tb) {
  m.tiles_a = (m.na + ta - 1) / ta;
  m.tiles_b = (m.nb + tb - 1) / tb;
  return m;
}

// Whether the vector transpose takes m between in and out (Note [Vector transpose]): every
// tile row 16-byte aligned, and at least one whole tile each way (thinner transposes would
// run edge tiles only).
template <class U>
bool vector_transpose_fits(const U* in, const U* out, const TileMap<>& m) {
  if constexpr (sizeof(U) == 1) {
    return false;
  } else {
    constexpr int64_t V = 16 / int64_t(sizeof(U)), kT = 16 * V;
    bool ok = vec_aligned<V>(in) && vec_aligned<V>(out) && m.in_stride_b % V == 0 && m.out_stride_a % V == 0 &&
              m.na >= kT && m.nb >= kT;
    for (int d = 0; d < m.nbatch; ++d) ok = ok && m.batch_in[d] % V == 0 && m.batch_out[d] % V == 0;
    return ok;
  }
}

// The tiled transpose of m (its tile counts set here), the vector kernel where it fits,
// in 32-bit indices where they fit.
template <class U>
void launch_tile_map(const U* in, U* out, const TileMap<>& map, cudaStream_t stream) {
  if (vector_transpose_fits(in, out, map)) {
    if constexpr (sizeof(U) > 1) {
      constexpr int kT = 16 * (16 / int(sizeof(U)));
      const TileMap<> m = with_tiles(map, kT, kT);
      const int64_t tiles = m.tiles();
      const LaunchConfig config{dim3(grid_stride_blocks(tiles, 1, 8)), dim3(256), 0};
      if (m.fits_32_bits())
        launch<tiled_transpose_vec_kernel<U, uint32_t>>(config, stream, in, out, m.narrow(),
                                                        static_cast<uint32_t>(tiles));
      else
        launch<tiled_transpose_vec_kernel<U, int64_t>>(config, stream, in, out, m, tiles);
      return;
    }
  }
  const TileMap<> m = with_tiles(map, kTile, kTileB);
  const int64_t tiles = m.tiles();
  // 8 blocks of 256 threads fill an SM's 2048 threads.
  const LaunchConfig config{dim3(grid_stride_blocks(tiles, 1, 8)), dim3(kTile, kTileRows), 0};
  if (m.fits_32_bits())
    launch<tiled_transpose_kernel<U, uint32_t>>(config, stream, in, out, m.narrow(), static_cast<uint32_t>(tiles));
  else
    launch<tiled_transpose_kernel<U, int64_t>>(config, stream, in, out, m, tiles);
}
}  // namespace layout_detail

// ---------------------------------------------------------------------------------------
// Vectorized contiguous copy of n elements of U, moved as carriers V (sizeof(V) >=
// sizeof(U)) between the first `head` elements (which bring `in` to V's alignment) and
// the scalar tail. Memory bound, 2 * sizeof(U) bytes per element.
template <class U, class V>
__global__ void __launch_bounds__(256) contiguous_copy_kernel(const U* __restrict__ in, U* __restrict__ out,
                                                              int64_t n, int64_t head) {
  constexpr int64_t kPer = sizeof(V) / sizeof(U);
  const int64_t nvec = (n - head) / kPer, tail_start = head + nvec * kPer;
  const int64_t start = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  const V* vin = reinterpret_cast<const V*>(in + head);
  V* vout = reinterpret_cast<V*>(out + head);
  if (start < nvec) {
    check_vector_alignment<V>(vin + start);
    check_vector_alignment<V>(vout + start);
  }
  for (int64_t i = start; i < nvec; i += step) vout[i] = vin[i];
  if (start < head) out[start] = in[start];
  if (start < n - tail_start) out[tail_start + start] = in[tail_start + start];
}

inline LaunchConfig contiguous_copy_config(int64_t nvec) {
  // At least one block, whose first threads copy the head and tail (< 16 elements each).
  return LaunchConfig{dim3(grid_stride_blocks(nvec, kBlockThreads)), dim3(kBlockThreads), 0};
}

// ---------------------------------------------------------------------------------------
// Any strided view of elements (or, for kRows, of carriers V holding several), one per
// thread per turn: output i is contiguous, its source at the offset the indexer gives for
// i. Index type I is uint32_t wherever the count and every offset fit (a 64-bit division
// per dim is a long emulated sequence, which bounded max pooling's index arithmetic on an
// H200). Memory bound, 2 * sizeof(U) bytes per element (plus, with poor locality, whole
// sectors read for few bytes used).
template <class U, class I>
__global__ void __launch_bounds__(256) strided_gather_kernel(const U* __restrict__ in, U* __restrict__ out,
                                                             Indexer<1, I> ix, I n) {
  const I step = I(gridDim.x) * blockDim.x;
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[1];
    ix.offsets(i, off);
    check_vector_alignment<U>(in + off[0]);
    check_vector_alignment<U>(out + i);
    out[i] = in[off[0]];
  }
}

// ---------------------------------------------------------------------------------------
// Host side.



inline void check_layout(const Layout& l, const char* op) {
  EMBER_CHECK(l.ndim >= 0 && l.ndim <= kMaxDims, op, ": ", l.ndim, " dims (at most ", kMaxDims, ")");
  for (int d = 0; d < l.ndim; ++d)
    EMBER_CHECK(l.sizes[d] >= 0, op, ": size ", l.sizes[d], " of dim ", d, " is negative");
}

namespace layout_detail {
// The dim of a coalesced view with stride 1, other than the innermost; -1 if none.
inline int unit_stride_dim(const Layout& c) {
  for (int d = c.ndim - 2; d >= 0; --d)
    if (c.strides[d] == 1) return d;
  return -1;
}
}  // namespace layout_detail

// Which path permute_contiguous takes for this view (Note [Permute paths]).
inline PermutePath permute_path(const Layout& layout) {
  check_layout(layout, "permute_contiguous");
  if (numel(layout) == 0) return PermutePath::kEmpty;
  const Layout c = coalesce_layout(layout);
  const int inner = c.ndim - 1;
  if (c.ndim == 1 && c.strides[0] == 1) return PermutePath::kContiguous;
  if (c.strides[inner] == 1) return PermutePath::kRows;
  const int a = layout_detail::unit_stride_dim(c);
  if (a >= 0 && c.sizes[a] >= kMinTileDim && c.sizes[inner] >= kMinTileDim) return PermutePath::kTiled;
  return PermutePath::kGeneral;
}

namespace layout_detail {

template <class U>
void launch_contiguous(const U* in, U* out, int64_t n, cudaStream_t stream) {
  // The widest carrier both pointers can be aligned to at once (same address mod its size).
  const auto ia = reinterpret_cast<uintptr_t>(in), oa = reinterpret_cast<uintptr_t>(out);
  int w = max_alignment(uint64_t(ia > oa ? ia - oa : oa - ia));
  if (w < int(sizeof(U))) w = int(sizeof(U));
  const int64_t head = w == int(sizeof(U)) ? 0 : int64_t((w - ia % w) % w) / int64_t(sizeof(U));
  auto go = [&](auto carrier) {
    using V = decltype(carrier);
    const int64_t h = head < n ? head : n;
    const int64_t nvec = (n - h) / int64_t(sizeof(V) / sizeof(U));
    launch<contiguous_copy_kernel<U, V>>(contiguous_copy_config(nvec), stream, in, out, n, h);
  };
  with_carrier<int(sizeof(U))>(w, go);
}

template <class U>
void launch_tiled(const U* in, U* out, const Layout& c, cudaStream_t stream) {
  const int b = c.ndim - 1, a = unit_stride_dim(c);
  int64_t out_strides[kMaxDims];
  int64_t s = 1;
  for (int d = c.ndim - 1; d >= 0; --d) {
    out_strides[d] = s;
    s *= c.sizes[d];
  }
  TileMap<> m;
  m.na = c.sizes[a];
  m.nb = c.sizes[b];
  m.in_stride_b = c.strides[b];
  m.out_stride_a = out_strides[a];
  for (int d = 0; d < c.ndim; ++d) {
    if (d == a || d == b) continue;
    m.batch_sizes[m.nbatch] = c.sizes[d];
    m.batch_in[m.nbatch] = c.strides[d];
    m.batch_out[m.nbatch] = out_strides[d];
    ++m.nbatch;
  }
  launch_tile_map(in, out, m, stream);
}

// The strided gather over `c` (sizes and strides in elements of U), in 32-bit indices
// where they fit.
template <class U>
void launch_gather(const U* in, U* out, const Layout& c, cudaStream_t stream) {
  const Layout* const layouts[1] = {&c};
  const Indexer<1> ix = make_indexer<1>(layouts);
  const int64_t n = numel(c);
  const LaunchConfig config{dim3(grid_stride_blocks(n, kBlockThreads)), dim3(kBlockThreads), 0};
  if (ix.fits_32_bits(n))
    launch<strided_gather_kernel<U, uint32_t>>(config, stream, in, out, ix.narrow(), static_cast<uint32_t>(n));
  else
    launch<strided_gather_kernel<U, int64_t>>(config, stream, in, out, ix, n);
}

// kRows: the gather over carriers V, the widest that divides the row, every outer stride
// and both addresses, so each thread moves up to 16 bytes.
template <class U>
void launch_rows(const U* in, U* out, const Layout& c, cudaStream_t stream) {
  const int inner = c.ndim - 1;
  uint64_t g = reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out) |
               uint64_t(c.sizes[inner]) * sizeof(U);
  for (int d = 0; d < inner; ++d) g |= uint64_t(c.strides[d]) * sizeof(U);
  const int w = max_alignment(g) < int(sizeof(U)) ? int(sizeof(U)) : max_alignment(g);
  auto go = [&](auto carrier) {
    using V = decltype(carrier);
    const int64_t per = int64_t(sizeof(V) / sizeof(U));
    Layout v = c;
    v.sizes[inner] = c.sizes[inner] / per;
    for (int d = 0; d < inner; ++d) v.strides[d] = c.strides[d] / per;
    launch_gather(reinterpret_cast<const V*>(in), reinterpret_cast<V*>(out), v, stream);
  };
  with_carrier<int(sizeof(U))>(w, go);
}

template <class U>
void permute_contiguous_carrier(const U* in, U* out, const Layout& layout, cudaStream_t stream) {
  const PermutePath path = permute_path(layout);
  if (path == PermutePath::kEmpty) return;
  const Layout c = coalesce_layout(layout);
  const int64_t n = numel(c);
  switch (path) {
    case PermutePath::kContiguous: return launch_contiguous(in, out, n, stream);
    case PermutePath::kTiled: return launch_tiled(in, out, c, stream);
    case PermutePath::kRows: return launch_rows(in, out, c, stream);
    default: return launch_gather(in, out, c, stream);
  }
}

}  // namespace layout_detail

// out (contiguous, layout's sizes in row-major order) = the strided view `layout` of
// `in`. Elements of any type of 1, 2, 4 or 8 bytes; `in` and `out` must not overlap.
// (Tensor::contiguous(): pass the view's sizes and strides, and data_ptr().)
inline void permute_contiguous_bytes(const void* in, void* out, const Layout& layout, int element_size,
                                     cudaStream_t stream) {
  auto go = [&](auto carrier) {
    using U = decltype(carrier);
    layout_detail::permute_contiguous_carrier(static_cast<const U*>(in), static_cast<U*>(out), layout, stream);
  };
  switch (element_size) {
    case 1: return go(carrier_t<1>{});
    case 2: return go(carrier_t<2>{});
    case 4: return go(carrier_t<4>{});
    case 8: return go(carrier_t<8>{});
    default: EMBER_FAIL("permute_contiguous: element size ", element_size, " (expected 1, 2, 4 or 8 bytes)");
  }
}

template <class T>
void permute_contiguous(const T* in, T* out, const Layout& layout, cudaStream_t stream) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "elements of 1, 2, 4 or 8 bytes");
  permute_contiguous_bytes(in, out, layout, int(sizeof(T)), stream);
}

// out [batch, cols, rows] = in [batch, rows, cols] transposed (both contiguous), through
// the tiled kernel whatever the sizes.
template <class T>
void transpose_batched(const T* in, T* out, int64_t batch, int64_t rows, int64_t cols, cudaStream_t stream) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "elements of 1, 2, 4 or 8 bytes");
  EMBER_CHECK(batch >= 0 && rows >= 0 && cols >= 0, "transpose_batched: negative size (batch ", batch, ", rows ", rows,
              ", cols ", cols, ")");
  if (batch == 0 || rows == 0 || cols == 0) return;
  using U = carrier_t<int(sizeof(T))>;
  layout_detail::TileMap<> m;
  m.na = cols;
  m.nb = rows;
  m.in_stride_b = cols;
  m.out_stride_a = rows;
  m.nbatch = 1;
  m.batch_sizes[0] = batch;
  m.batch_in[0] = m.batch_out[0] = rows * cols;
  layout_detail::launch_tile_map(reinterpret_cast<const U*>(in), reinterpret_cast<U*>(out), m, stream);
}

}  // namespace ember::kernels::cuda
