// Max pooling over windows that tile the input (pool_windows_tile; launched by pool.cuh's
// max_pool2d_forward and max_pool2d_backward): the windows kernels, one thread per output,
// for any such windows, and the pairs kernels, two 2x2 windows a thread with whole-vector
// accesses (Note [Pool pairs]). Both give the general kernels' bits (pool.cuh).
//
// Note [Pool kernels]. Pooling moves few bytes per element, so a kernel meets the memory
// floor only if its index arithmetic is cheap. The first kernels split every flat index
// with 64-bit division and modulo, a long emulated sequence on a GPU: on an H200 the
// CNN's first pool (float32 [128, 32, 28, 28], 2x2 / 2, uint8 codes) took 14.6 us forward
// and 50 us backward (one thread per input pixel, each finding its covering windows with
// more divisions), against a floor of about 4 us each (17 MB at ~4 TB/s). Hence:
//  - every kernel is instantiated for int32 and int64 index arithmetic (I); the launchers
//    take int32 when every index fits (pool_fits_int32), as it does but for tensors of
//    2^31 elements or more;
//  - windows that tile the input (kernel == stride, no padding, no dilation; ceil_mode
//    may clip the last ones) have their own max-pool kernels, one thread per output both
//    ways: two 32-bit divisions per output, and the backward writes each input pixel from
//    the one window that covers it (or as 0, below or right of the last windows when H or
//    W is not a multiple of the stride), kw = 2 rows as one aligned pair store.
// Measured on an H200 (ncu's gpu__time_duration, clocks left alone, float32 with uint8
// codes; the first kernels took 17.1 and 65.2 us there for the first pool, so that
// machine ran slower than the one above): [128, 32, 28, 28] 7.5 us forward, 7.9 us
// backward; [128, 64, 14, 14] 5.1 and 5.4 us (first kernels: 9.7 and 34.9). The general
// kernels with int32 arithmetic: 13.9 and 46.4 us for the first pool. Odd W (no pair
// stores) doubles the windows backward's time (13.8 us for [128, 32, 27, 29]). There,
// every kernel choice gave the first kernels' bits on those shapes (a one-off program).
// Tried on that pool: two outputs a turn in the windows forward (40 registers instead of
// 32, and no faster there); kept since for large inputs (max_pool2d_windows_kernel).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/pool_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/pool_geometry.cuh"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

namespace pool_detail {

// The maximum of a whole 2x2 window's taps v (row-major) as the general kernel's scan
// finds it: the tap's number k = i * 2 + j, best set to its value.
template <class C>
__device__ __forceinline__ int scan_2x2(const C (&v)[4], C& best) {
  int k = 0;
  best = v[0];
  EMBER_UNROLL
  for (int t = 1; t < 4; ++t)
    if (ops::pool_replaces(v[t], best)) {
      best = v[t];
      k = t;
    }
  return k;
}

}  // namespace pool_detail

// ---------------------------------------------------------------------------------------
// Windows kernels: max pooling over windows that tile the input (pool_windows_tile).

// Max pooling forward over tiling windows: one thread per output, two divisions per
// output, then the general kernel's scan, a whole 2x2 window's loads issued first (as a
// loop the scan waited for each load: 10.3 us for the first pool, 7.5 us so). Two outputs
// a turn (o and o + the grid), both windows' loads issued before either is scanned: 32
// bytes of loads in flight a thread, 64 KiB an SM at 2048 threads, where one output a turn
// had 32 KiB, at the edge of Little's law's ~30 KB an SM for an H200's bandwidth. (Two a
// turn was tried once on the CNN's first pool, 3136 blocks of one output a thread: no
// faster there, where the launch and the last wave dominate; the bench's 256 MiB input is
// 16 M outputs over the 1056 resident blocks.) Memory bound: each input element read once
// (kh kw sizeof(T) per output; adjacent threads' windows share sectors, which L1 serves),
// sizeof(T) plus the index (8 or 1 bytes) written per output. Float32 2x2 with codes:
// 16 + 4 + 1 = 21 bytes per output.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256, 4) max_pool2d_windows_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                                 int64_t* __restrict__ plane_idx,
                                                                 uint8_t* __restrict__ codes, pool_detail::Dims<I> g,
                                                                 bool relu, int64_t total) {
  using C = compute_t<T>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t o0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o0 < total; o0 += 2 * step) {
    const T* win[2] = {x, x};
    I h0[2] = {0, 0}, w0[2] = {0, 0}, nh[2] = {0, 0}, nw[2] = {0, 0};
    C v[2][4];
    bool whole[2] = {false, false};
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t o = o0 + u * step;
      if (o >= total) break;
      const pool_detail::Window<I> wo = pool_detail::window_of(I(o), g);
      h0[u] = wo.h0, w0[u] = wo.w0;
      nh[u] = pool_detail::min_of(g.kh, g.H - h0[u]), nw[u] = pool_detail::min_of(g.kw, g.W - w0[u]);  // ceil_mode clips
      win[u] = x + wo.offset;
      // A whole 2x2 window: its four loads issued here, before any comparison. (In the loop
      // below each load waits for the comparison before it: two trips to DRAM per output.)
      whole[u] = g.kh == 2 && g.kw == 2 && nh[u] == 2 && nw[u] == 2;
      if (whole[u]) {
        v[u][0] = widen(win[u][0]), v[u][1] = widen(win[u][1]);
        v[u][2] = widen(win[u][g.W]), v[u][3] = widen(win[u][g.W + 1]);
      }
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t o = o0 + u * step;
      if (o >= total) break;
      C best = C(-INFINITY);
      I bi = 0, bj = 0;
      if (whole[u]) {
        const int k = pool_detail::scan_2x2(v[u], best);
        bi = I(k >> 1);
        bj = I(k & 1);
      } else {
        for (I i = 0; i < nh[u]; ++i)
          for (I j = 0; j < nw[u]; ++j) {
            const C e = widen(win[u][i * g.W + j]);
            if ((i == 0 && j == 0) || ops::pool_replaces(e, best)) {
              best = e;
              bi = i;
              bj = j;
            }
          }
      }
      y[o] = round_to<T>(relu && best < C(0) ? C(0) : best);  // a NaN stays NaN
      if constexpr (K == pool_detail::MaxIndex::kPlane) plane_idx[o] = int64_t((h0[u] + bi) * g.W + w0[u] + bj);
      if constexpr (K == pool_detail::MaxIndex::kCode) codes[o] = static_cast<uint8_t>(bi * g.kw + bj);
    }
  }
}

// Max pooling backward over tiling windows: gx (overwritten). One thread per output
// writes the pixels of its window (its gradient at the maximum, 0 elsewhere) and, in
// the last window of a row or column, the pixels right of or below it that no window
// covers (0). `pairs` (kw == 2, W = 2 OW, gx aligned to two elements): each window row is
// one aligned pair store, so a warp's stores are contiguous. Two outputs a turn (the
// second pool: 6.1 us with one, 5.4 with two). Memory bound: sizeof(T) written per input
// element, sizeof(T) plus the index (1 or 8 bytes) read per output. Float32 2x2 from
// codes: 16 + 4 + 1 = 21 bytes per output.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256) max_pool2d_windows_backward_kernel(const T* __restrict__ gy,
                                                                          const int64_t* __restrict__ plane_idx,
                                                                          const uint8_t* __restrict__ codes,
                                                                          T* __restrict__ gx, pool_detail::Dims<I> g,
                                                                          bool pairs, int64_t total) {
  using C = compute_t<T>;
  const T miss = round_to<T>(C(0));
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  // Two outputs a turn, both loaded before either is written: a turn waits for one DRAM
  // round trip, not two.
  for (int64_t o0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o0 < total; o0 += 2 * step) {
    T hit[2];
    I want[2];
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t o = o0 + u * step;
      if (o >= total) break;
      // The general kernel's 0 + gy (a -0 gradient lands as +0 there too).
      hit[u] = round_to<T>(C(0) + widen(gy[o]));
      // What the index names, compared with each tap of the window: its code, or its
      // plane offset (-1, matching no tap, for an index outside the plane).
      if constexpr (K == pool_detail::MaxIndex::kCode) {
        want[u] = I(codes[o]);
      } else {
        const int64_t p = plane_idx[o];
        want[u] = p >= 0 && p < int64_t(g.H) * g.W ? I(p) : I(-1);
      }
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t o = o0 + u * step;
      if (o >= total) break;
      const pool_detail::Window<I> wo = pool_detail::window_of(I(o), g);
      const I h0 = wo.h0, w0 = wo.w0;
      const I rows = (wo.oh == g.OH - 1 ? g.H : pool_detail::min_of(h0 + g.kh, g.H)) - h0;
      const I cols = (wo.ow == g.OW - 1 ? g.W : pool_detail::min_of(w0 + g.kw, g.W)) - w0;
      const auto value = [&](I i, I j) {
        const I key = K == pool_detail::MaxIndex::kCode ? i * g.kw + j : (h0 + i) * g.W + w0 + j;
        return i < g.kh && j < g.kw && key == want[u] ? hit[u] : miss;
      };
      T* out = gx + wo.offset;
      for (I i = 0; i < rows; ++i, out += g.W) {
        if (pairs) {
          Pack<T, 2> pk;
          pk.v[0] = value(i, I(0));
          pk.v[1] = value(i, I(1));
          store_vec(out, pk);
        } else {
          for (I j = 0; j < cols; ++j) out[j] = value(i, j);
        }
      }
    }
  }
}

// Note [Pool pairs]. The windows kernels above move 2x2 windows with 4-byte loads (a warp's
// 32 windows: 8 sectors of the input a load request, each used by half its bytes) and
// 1-byte codes (a warp's codes: 32 bytes, one sector a request). The pairs kernels take
// the common case whole: 2x2 windows of elements of at most 4 bytes over rows of
// W = 2 OW with OW even and no rows clipped (H >= 2 OH; rows left below the last windows
// are zeroed by the backward), every pointer aligned to its vector. A thread takes two
// adjacent outputs of an output row, whose windows are 4 adjacent pixels of two input
// rows: the forward loads each row as one vector (16 bytes in float32: a warp reads 512
// contiguous bytes of a row a load) and stores its two outputs as one vector (8 bytes) and
// its two codes as one 2-byte store (int64 indices: one 16-byte store); the backward loads
// two gradients and two codes the same way and stores rows of 4 pixels as vectors. Every
// access of a warp then covers whole sectors, contiguous. Two pairs a turn (p and p + the
// grid), both loaded before either is used: 32 bytes of input in flight a thread in the
// float32 forward, 64 KiB an SM at 2048 threads. The scan and the tie-breaking are the
// windows kernels' (scan_2x2), so are the bits.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256) max_pool2d_pairs_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                               int64_t* __restrict__ plane_idx,
                                                               uint8_t* __restrict__ codes, pool_detail::Dims<I> g,
                                                               bool relu, int64_t pairs) {
  using C = compute_t<T>;
  using Row = Pack<T, 4>;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p0 < pairs; p0 += 2 * step) {
    pool_detail::Window<I> wo[2];
    Row r[2][2];
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t p = p0 + u * step;
      if (p >= pairs) break;
      wo[u] = pool_detail::window_of(I(2 * p), g);
      r[u][0] = load_vec<Row>(x + wo[u].offset);
      r[u][1] = load_vec<Row>(x + wo[u].offset + g.W);
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t p = p0 + u * step;
      if (p >= pairs) break;
      Pack<T, 2> out;
      Pack<uint8_t, 2> code;
      Pack<int64_t, 2> idx;
      EMBER_UNROLL
      for (int e = 0; e < 2; ++e) {
        const C v[4] = {widen(r[u][0].v[2 * e]), widen(r[u][0].v[2 * e + 1]), widen(r[u][1].v[2 * e]),
                        widen(r[u][1].v[2 * e + 1])};
        C best;
        const int k = pool_detail::scan_2x2(v, best);
        out.v[e] = round_to<T>(relu && best < C(0) ? C(0) : best);  // a NaN stays NaN
        code.v[e] = static_cast<uint8_t>(k);                      // i * kw + j with kw = 2
        idx.v[e] = int64_t((wo[u].h0 + I(k >> 1)) * g.W + wo[u].w0 + I(2 * e + (k & 1)));
      }
      const I o = I(2 * p);
      store_vec(y + o, out);
      if constexpr (K == pool_detail::MaxIndex::kCode) store_vec(codes + o, code);
      if constexpr (K == pool_detail::MaxIndex::kPlane) store_vec_global(plane_idx + o, idx);
    }
  }
}

// The backward of Note [Pool pairs]: gx (overwritten) from two gradients and indices a
// thread, two pairs a turn; the pixels of each window its gradient at the maximum, 0
// elsewhere, and below the last windows' row, 0.
template <class T, pool_detail::MaxIndex K, class I>
__global__ void __launch_bounds__(256) max_pool2d_pairs_backward_kernel(const T* __restrict__ gy,
                                                                        const int64_t* __restrict__ plane_idx,
                                                                        const uint8_t* __restrict__ codes,
                                                                        T* __restrict__ gx, pool_detail::Dims<I> g,
                                                                        int64_t pairs) {
  using C = compute_t<T>;
  using Row = Pack<T, 4>;
  const T miss = round_to<T>(C(0));
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t p0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p0 < pairs; p0 += 2 * step) {
    Pack<T, 2> gv[2];
    I want[2][2];
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t p = p0 + u * step;
      if (p >= pairs) break;
      const I o = I(2 * p);
      gv[u] = load_vec<Pack<T, 2>>(gy + o);
      if constexpr (K == pool_detail::MaxIndex::kCode) {
        const Pack<uint8_t, 2> c = load_vec<Pack<uint8_t, 2>>(codes + o);
        want[u][0] = I(c.v[0]), want[u][1] = I(c.v[1]);
      } else {
        const Pack<int64_t, 2> q = load_vec<Pack<int64_t, 2>>(plane_idx + o);
        EMBER_UNROLL
        for (int e = 0; e < 2; ++e)
          want[u][e] = q.v[e] >= 0 && q.v[e] < int64_t(g.H) * g.W ? I(q.v[e]) : I(-1);  // -1 matches no tap
      }
    }
    EMBER_UNROLL
    for (int u = 0; u < 2; ++u) {
      const int64_t p = p0 + u * step;
      if (p >= pairs) break;
      T hit[2];
      EMBER_UNROLL
      for (int e = 0; e < 2; ++e) hit[e] = round_to<T>(C(0) + widen(gv[u].v[e]));  // the general kernel's 0 + gy
      const pool_detail::Window<I> wo = pool_detail::window_of(I(2 * p), g);
      const I rows = (wo.oh == g.OH - 1 ? g.H : wo.h0 + 2) - wo.h0;
      T* out = gx + wo.offset;
      for (I i = 0; i < rows; ++i, out += g.W) {
        Row r;
        EMBER_UNROLL
        for (int c = 0; c < 4; ++c) {
          const int e = c / 2;
          const I key = K == pool_detail::MaxIndex::kCode ? i * 2 + I(c % 2) : (wo.h0 + i) * g.W + wo.w0 + I(c);
          r.v[c] = i < 2 && key == want[u][e] ? hit[e] : miss;
        }
        store_vec_global(out, r);
      }
    }
  }
}

// Whether the pairs kernels (Note [Pool pairs]) take g: `rows` the pointer of the side
// moved as rows of 4 pixels (x forward, gx backward), `outs` the side of two outputs a
// thread (y or gy), and the indices or codes.
template <class T>
bool pool_pairs(const PoolGeometry& g, const PoolKernelChoice& choice, const T* rows, const T* outs,
                const int64_t* plane_idx, const uint8_t* codes) {
  return choice.windows && choice.pairs && sizeof(T) <= 4 && pool_windows_tile(g) && g.kh == 2 && g.kw == 2 &&
         g.W == 2 * g.OW && g.OW % 2 == 0 && g.H >= 2 * g.OH && vec_aligned<4>(rows) && vec_aligned<2>(outs) &&
         vec_aligned<2>(plane_idx) && vec_aligned<2>(codes);
}

}  // namespace ember::kernels::cuda
