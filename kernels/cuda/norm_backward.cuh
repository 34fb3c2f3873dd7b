// Layer norm backward over the last dim of a contiguous [rows, cols] tensor (norm.cuh has
// the forward): dx from dy, x and the forward's saved mean and rstd, and dgamma and dbeta
// reduced over rows without atomics; its kernels (kWarp, kBlock, kStream), the column
// sums of the partial rows (layer_norm_param_grad_kernel), and their launchers. Bytes per
// element in s = sizeof(T), the variants of Note [Row variants] (rowwise.cuh) and the compute
// types are as in norm.cuh.
//
// Note [Deterministic parameter gradients]
// dgamma and dbeta sum over rows. No atomics: each block accumulates the rows it handles,
// in order, in registers (kWarp, kBlock) or in its own row of the workspace (kStream),
// then writes one partial row [cols]; a second kernel adds the partial rows in block
// order. The sums depend only on the launch shape, so repeated runs give the same bits.
// The partial rows cost 16 bytes per column per block (written, then read), against 3s
// per element of the main pass; the grid is capped at max(#SMs, rows / 32) blocks so
// that this stays a few percent when rows are many.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/norm_common.cuh"
#include "kernels/cuda/rowwise.cuh"

namespace ember::kernels::cuda {

namespace norm_detail {

using namespace rowwise;

// dx of one row whose x and dy the thread has loaded (xh, g: tile_load, padding 0);
// passes the row's dy * xhat and dy of each register k to acc(k, dy * xhat, dy), which
// adds them to the thread's dgamma and dbeta sums (same columns every row). With
// g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
// scale(g) multiplies dy by gamma (or leaves it, without gamma).
template <int kN, class Red, class T, class Scale, class Acc>
__device__ __forceinline__ void layer_norm_backward_loaded_row(compute_t<T> (&xh)[kN], compute_t<T> (&g)[kN],
                                                               compute_t<T> mean, compute_t<T> rstd, Scale&& scale,
                                                               T* dx, int64_t cols, int rank, int lanes, bool vec,
                                                               Acc&& acc) {
  using A = compute_t<T>;
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) {
    xh[k] = (xh[k] - mean) * rstd;
    acc(k, g[k] * xh[k], g[k]);
  }
  scale(g);
  A s1 = 0, s2 = 0;
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) {
    s1 += g[k];
    s2 += g[k] * xh[k];
  }
  const A inv_n = A(1) / A(cols);
  A m1, m2;
  if constexpr (std::is_same_v<Red, rowwise::BlockPerRow>) {
    Red::sum2(s1, s2);  // one round of barriers for both
    m1 = s1 * inv_n, m2 = s2 * inv_n;
  } else {
    m1 = Red::sum(s1) * inv_n, m2 = Red::sum(s2) * inv_n;
  }
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) g[k] = rstd * (g[k] - m1 - xh[k] * m2);
  tile_store<kN>(dx, cols, rank, lanes, vec, g);
}

// The same, loading the row first; dg and db are the thread's sums in registers.
template <int kN, class Red, class T>
__device__ __forceinline__ void layer_norm_backward_row(const T* dy, const T* x, compute_t<T> mean, compute_t<T> rstd,
                                                        const T* gamma, T* dx, int64_t cols, int rank, int lanes,
                                                        bool vec, compute_t<T> (&dg)[kN], compute_t<T> (&db)[kN]) {
  using A = compute_t<T>;
  A xh[kN], g[kN];
  tile_load<kN>(x, cols, rank, lanes, vec, xh, A(0));
  tile_load<kN>(dy, cols, rank, lanes, vec, g, A(0));  // padding: dy = 0, so it adds nothing
  const auto scale = [&](A(&u)[kN]) {
    if (gamma != nullptr)
      tile_for_each<kN, T>(cols, rank, lanes, vec, [&](int k, int64_t c, auto width) {
        constexpr int n = decltype(width)::value;
        A w[n];
        load<n>(gamma + c, w);
        EMBER_UNROLL
        for (int i = 0; i < n; ++i) u[k + i] *= w[i];
      });
  };
  layer_norm_backward_loaded_row<kN, Red, T>(xh, g, mean, rstd, scale, dx, cols, rank, lanes, vec,
                                          [&](int k, A gx, A gk) {
                                            dg[k] += gx;
                                            db[k] += gk;
                                          });
}

// Dynamic shared bytes of layer_norm_backward_block_kernel<T, kN>: its columns' sums and
// gamma's slots.
template <class A>
inline size_t backward_block_shared_bytes(int kn) {
  return size_t(3 * kn) * rowwise::kMaxBlockThreads * sizeof(A);
}

}  // namespace norm_detail

// --- Layer norm backward ---------------------------------------------------------------------
// dx, and partial rows of dgamma / dbeta when partial_gamma is given (Note [Deterministic
// parameter gradients]): partial_gamma, partial_beta [gridDim.x, cols].

// kWarp: lanes keep their columns' sums across rows; the groups of a warp fold together
// by shuffles, then the block's warps add into shared memory in warp order. Memory-bound:
// reads x and dy, writes dx: 3s bytes per element, plus 2 sizeof(acc) per row.
template <class T, int kP>
__global__ void __launch_bounds__(256)
    layer_norm_backward_warp_kernel(const T* __restrict__ dy,           // [rows, cols] input
                                    const T* __restrict__ x,            // [rows, cols] input
                                    const compute_t<T>* __restrict__ mean,  // [rows] input, from the forward
                                    const compute_t<T>* __restrict__ rstd,  // [rows] input, from the forward
                                    const T* __restrict__ gamma,        // [cols] input, or null
                                    T* __restrict__ dx,                 // [rows, cols] output
                                    compute_t<T>* __restrict__ partial_gamma,  // [gridDim.x, cols] output, or null
                                    compute_t<T>* __restrict__ partial_beta,   // [gridDim.x, cols] output, or null
                                    int64_t rows, int64_t cols, bool vec) {
  using A = compute_t<T>;
  constexpr int kW = kP < 32 ? kP : 32, kN = kP / kW;
  const int lane = threadIdx.x % 32, rank = lane % kW;
  A dg[kN], db[kN];
  for (int k = 0; k < kN; ++k) dg[k] = db[k] = A(0);
  rowwise::for_each_warp_row<kW>(rows, [&](int64_t r, bool live, int) {
    norm_detail::layer_norm_backward_row<kN, rowwise::SubWarp<kW>>(
        dy + r * cols, x + r * cols, live ? mean[r] : A(0), live ? rstd[r] : A(0), gamma, dx + r * cols,
        live ? cols : 0, rank, kW, vec, dg, db);
  });
  if (partial_gamma == nullptr) return;
  // The warp's groups hold the same columns: fold them (xor over the group bits).
  for (int o = kW; o < 32; o *= 2)
    for (int k = 0; k < kN; ++k) {
      dg[k] += __shfl_xor_sync(0xffffffffu, dg[k], o);
      db[k] += __shfl_xor_sync(0xffffffffu, db[k], o);
    }
  EMBER_DYNAMIC_SHARED(A, sums);  // [2, cols]: dgamma, dbeta of the block
  const int warp_in_block = threadIdx.x / 32;
  for (int w = 0; w < int(blockDim.x / 32); ++w) {
    if (warp_in_block == w && lane < kW)
      for (int k = 0; k < kN; ++k) {
        const int64_t c = rowwise::tile_col<T>(k, rank, kW, vec);
        if (c < cols) {
          sums[c] = w == 0 ? dg[k] : sums[c] + dg[k];
          sums[cols + c] = w == 0 ? db[k] : sums[cols + c] + db[k];
        }
      }
    __syncthreads();
  }
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    partial_gamma[blockIdx.x * cols + c] = sums[c];
    partial_beta[blockIdx.x * cols + c] = sums[cols + c];
  }
}

// kBlock: a block per row. Memory-bound: 3s bytes per element. As the forward's kBlock,
// the block's next row (x, dy, its mean and rstd) is loaded before this row's block
// reduction, so its loads are in flight across the barriers; the columns' dgamma and dbeta
// sums live in shared memory (sums: [2 kN, kMaxBlockThreads], the launch gives
// backward_block_shared_bytes), not in registers, to leave the registers to the two rows.
// Each thread reads and writes only its own slots of sums (slot k of thread t at
// k kMaxBlockThreads + t: a warp's 32 slots in 32 banks; a constant stride, so the slots'
// addresses are immediate offsets from one register: with blockDim.x as the stride, ptxas
// kept an address per slot and spilled at the 64-register cap), so they need no barrier.
// On an H200 (2026-12-04) the form without the prefetch, sums in registers, ran
// [16384, 4096] float32 at 54.5% of the datasheet, 64% of a copy: a block's loads were
// in flight only between two rows' reductions.
template <class T, int kN>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads, norm_detail::kPrefetchBlocks<T, kN>)
    layer_norm_backward_block_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     const compute_t<T>* __restrict__ mean, const compute_t<T>* __restrict__ rstd,
                                     const T* __restrict__ gamma, T* __restrict__ dx,
                                     compute_t<T>* __restrict__ partial_gamma, compute_t<T>* __restrict__ partial_beta,
                                     int64_t rows, int64_t cols, bool vec) {  // shapes: the warp kernel's
  using A = compute_t<T>;
  EMBER_DYNAMIC_SHARED(A, sums);
  constexpr int kS = rowwise::kMaxBlockThreads;  // the slots' stride
  A* const dg = sums + threadIdx.x;              // dg[k * kS]: column tile_col(k)
  A* const db = sums + kN * kS + threadIdx.x;    // db[k * kS]
  A* const gs = sums + 2 * kN * kS + threadIdx.x;  // gamma's slots (Note [Parameter slots], norm_common.cuh)
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) dg[k * kS] = db[k * kS] = A(0);
  norm_detail::fill_param_slots<kN>(gamma, gs, cols, vec);
  const auto scale = [&](A(&u)[kN]) {
    if (gamma != nullptr) {
      EMBER_UNROLL
      for (int k = 0; k < kN; ++k) u[k] *= gs[k * kS];
    }
  };
  A xv[kN], gv[kN], nx[kN] = {}, ng[kN] = {};  // (copied into xv, gv after the last row too, unused)
  int64_t row = blockIdx.x;
  A m = 0, r = 0, nm = 0, nr = 0;
  if (row < rows) {
    rowwise::tile_load<kN>(x + row * cols, cols, threadIdx.x, blockDim.x, vec, xv, A(0));
    rowwise::tile_load<kN>(dy + row * cols, cols, threadIdx.x, blockDim.x, vec, gv, A(0));
    m = mean[row], r = rstd[row];
  }
  for (; row < rows; row += gridDim.x) {
    const int64_t after = row + gridDim.x;
    if (after < rows) {
      rowwise::tile_load<kN>(x + after * cols, cols, threadIdx.x, blockDim.x, vec, nx, A(0));
      rowwise::tile_load<kN>(dy + after * cols, cols, threadIdx.x, blockDim.x, vec, ng, A(0));
      nm = mean[after], nr = rstd[after];
    }
    norm_detail::layer_norm_backward_loaded_row<kN, rowwise::BlockPerRow, T>(
        xv, gv, m, r, scale, dx + row * cols, cols, threadIdx.x, blockDim.x, vec, [&](int k, A gx, A gk) {
          dg[k * kS] += gx;
          db[k * kS] += gk;
        });
    EMBER_UNROLL
    for (int k = 0; k < kN; ++k) xv[k] = nx[k], gv[k] = ng[k];
    m = nm, r = nr;
  }
  if (partial_gamma == nullptr) return;
  EMBER_UNROLL
  for (int k = 0; k < kN; ++k) {
    const int64_t c = rowwise::tile_col<T>(k, threadIdx.x, blockDim.x, vec);
    if (c < cols) {
      partial_gamma[blockIdx.x * cols + c] = dg[k * kS];
      partial_beta[blockIdx.x * cols + c] = db[k * kS];
    }
  }
}

// kStream: a block per row, x and dy read twice; the block's partial row lives in the
// workspace (L2) and is updated in place, rows apart by the barriers of the row's sums.
// Memory-bound: 5s bytes per element (3s from DRAM when the row stays in L2), plus the
// partial row's 4 sizeof(acc) per element in L2.
template <class T>
__global__ void __launch_bounds__(rowwise::kMaxBlockThreads)
    layer_norm_backward_stream_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                      const compute_t<T>* __restrict__ mean, const compute_t<T>* __restrict__ rstd,
                                      const T* __restrict__ gamma, T* __restrict__ dx,
                                      compute_t<T>* __restrict__ partial_gamma, compute_t<T>* __restrict__ partial_beta,
                                      int64_t rows, int64_t cols, bool vec) {  // shapes: the warp kernel's
  using namespace rowwise;
  using A = compute_t<T>;
  A* pg = partial_gamma != nullptr ? partial_gamma + blockIdx.x * cols : nullptr;
  A* pb = partial_beta != nullptr ? partial_beta + blockIdx.x * cols : nullptr;
  // Zeroed before the first update by the barriers of the first row's block_sum.
  if (pg != nullptr)
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) pg[c] = pb[c] = A(0);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * cols;
    const T* gr = dy + row * cols;
    T* dr = dx + row * cols;
    const A m = mean[row], r = rstd[row];
    A s1 = 0, s2 = 0;
    for_each_chunk(xr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A xv[n], g[n];
      load<n>(xr + c, xv);
      load<n>(gr + c, g);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) {
        const A gg = gamma != nullptr ? g[i] * widen(gamma[c + i]) : g[i];
        s1 += gg;
        s2 += gg * (xv[i] - m) * r;
      }
    });
    const A inv_n = A(1) / A(cols);
    const A m1 = block_sum(s1) * inv_n, m2 = block_sum(s2) * inv_n;  // also orders the partial rows' updates
    for_each_chunk(xr, cols, threadIdx.x, blockDim.x, vec, [&](int64_t c, auto width) {
      constexpr int n = decltype(width)::value;
      A xv[n], g[n];
      load<n>(xr + c, xv);
      load<n>(gr + c, g);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) {
        const A xh = (xv[i] - m) * r;
        if (pg != nullptr) {
          pg[c + i] += g[i] * xh;
          pb[c + i] += g[i];
        }
        const A gg = gamma != nullptr ? g[i] * widen(gamma[c + i]) : g[i];
        g[i] = r * (gg - m1 - xh * m2);
      }
      store<n>(dr + c, g);
    });
  }
}

// dgamma[c] = sum over partial rows of partial_gamma[., c], in row order (likewise dbeta).
// Memory-bound: reads 2 sizeof(acc) per partial element. With vec (cols a multiple of
// kVec<acc> and the partial rows 16-byte aligned), a thread sums kVec<acc> adjacent columns
// as 16-byte loads: a quarter of the requests of one column a thread, the same additions
// in the same order.
template <class T>
__global__ void layer_norm_param_grad_kernel(const compute_t<T>* __restrict__ partial_gamma,  // [nparts, cols] input
                                             const compute_t<T>* __restrict__ partial_beta,   // [nparts, cols] input
                                             int64_t nparts, int64_t cols,
                                             T* __restrict__ dgamma,  // [cols] output, or null
                                             T* __restrict__ dbeta,   // [cols] output, or null
                                             bool vec) {
  using A = compute_t<T>;
  constexpr int V = rowwise::kVec<A>;
  const auto sum_columns = [&](int64_t c, auto width) {
    constexpr int n = decltype(width)::value;
    A a[n] = {}, b[n] = {};
    for (int64_t p = 0; p < nparts; ++p) {
      A pa[n], pb[n];
      rowwise::load<n>(partial_gamma + p * cols + c, pa);
      rowwise::load<n>(partial_beta + p * cols + c, pb);
      EMBER_UNROLL
      for (int i = 0; i < n; ++i) a[i] += pa[i], b[i] += pb[i];
    }
    EMBER_UNROLL
    for (int i = 0; i < n; ++i) {
      if (dgamma != nullptr) dgamma[c + i] = round_to<T>(a[i]);
      if (dbeta != nullptr) dbeta[c + i] = round_to<T>(b[i]);
    }
  };
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  if (vec) {
    for (int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * V; c < cols; c += step * V)
      sum_columns(c, std::integral_constant<int, V>{});
  } else {
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += step)
      sum_columns(c, std::integral_constant<int, 1>{});
  }
}

// --- Host side -----------------------------------------------------------------------------------

// The plan of the layer-norm backward kernels: kBlock keeps four arrays in registers, so
// at most 16 a thread (rows up to 8192); kWarp runs 256-thread blocks that add their
// warps' sums in shared memory; the grid is capped (Note [Deterministic parameter gradients]).
inline RowPlan layer_norm_backward_config(int64_t rows, int64_t cols, int elem_bytes, int acc_bytes, bool aligned,
                                          bool stream_vec, RowVariant variant = RowVariant::kAuto) {
  RowPlan p = rowwise::plan_rows("layer_norm_backward", rows, cols, elem_bytes, aligned, stream_vec, variant,
                                 /*max_block_regs=*/16);
  const int64_t cap = rows / 32 > sm_count() ? rows / 32 : sm_count();
  if (p.variant == RowVariant::kWarp) {
    constexpr int kThreads = 256;
    const int kw = p.per_thread < 32 ? p.per_thread : 32;
    const int64_t rows_per_block = (kThreads / 32) * (32 / kw);
    int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
    blocks = blocks < 1 ? 1 : (blocks > cap ? cap : blocks);
    p.cfg = {dim3(unsigned(blocks)), dim3(kThreads), size_t(2 * cols * acc_bytes)};
  } else {
    p.cfg.grid.x = unsigned(rows < 1 ? 1 : (rows < cap ? rows : cap));  // not by block size: alignment may change it
  }
  return p;
}

// A thread per column of dgamma / dbeta, or per kVec<acc> columns with vec.
inline LaunchConfig layer_norm_param_grad_config(int64_t cols, int per_thread = 1) {
  return {dim3(grid_stride_blocks((cols + per_thread - 1) / per_thread, kBlockThreads)), dim3(kBlockThreads), 0};
}

// Bytes of workspace layer_norm_backward needs for dgamma / dbeta (two partial rows per block).
template <class T>
size_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t cols, RowVariant variant = RowVariant::kAuto) {
  const RowPlan p = layer_norm_backward_config(rows, cols, sizeof(T), sizeof(compute_t<T>), false, false, variant);
  return size_t(p.cfg.grid.x) * size_t(cols) * 2 * sizeof(compute_t<T>);
}

// dx from dy, the forward's input x and its saved mean and rstd; dgamma and dbeta (each
// may be null; both null: no workspace needed) summed over rows deterministically.
template <class T>
void layer_norm_backward(const T* dy,              // [rows, cols] input
                         const T* x,               // [rows, cols] input
                         const compute_t<T>* mean,     // [rows] input, from layer_norm
                         const compute_t<T>* rstd,     // [rows] input, from layer_norm
                         const std::type_identity_t<T>* gamma,  // [cols] input, or null
                         T* dx,                                 // [rows, cols] output
                         std::type_identity_t<T>* dgamma,       // [cols] output, or null
                         std::type_identity_t<T>* dbeta,        // [cols] output, or null
                         int64_t rows, int64_t cols,
                         void* workspace,          // layer_norm_backward_workspace_bytes<T>(rows, cols) bytes
                         cudaStream_t stream, RowVariant variant = RowVariant::kAuto) {
  using namespace rowwise;
  using A = compute_t<T>;
  const bool params = dgamma != nullptr || dbeta != nullptr;
  EMBER_CHECK(rows >= 0 && cols >= 0, "layer_norm_backward: negative shape [", rows, ", ", cols, "]");
  EMBER_CHECK(rows == 0 || cols == 0 || (dy && x && mean && rstd && dx), "layer_norm_backward: null pointer for a [",
              rows, ", ", cols, "] tensor");
  EMBER_CHECK(!params || cols == 0 || workspace, "layer_norm_backward: dgamma / dbeta need a workspace");
  if (cols == 0) return;
  const bool aligned = all_aligned16(dy, x, gamma, dx), stream_vec = same_alignment(dy, x, dx);
  const RowPlan p = layer_norm_backward_config(rows, cols, sizeof(T), sizeof(A), aligned, stream_vec, variant);
  A* pg = params ? static_cast<A*>(workspace) : nullptr;
  A* pb = params ? pg + size_t(p.cfg.grid.x) * cols : nullptr;
  if (rows > 0) {
    switch (p.variant) {
      case RowVariant::kWarp:
        dispatch_pow2<1, kMaxWarpRow>(p.per_thread, [&](auto kp) {
          launch<layer_norm_backward_warp_kernel<T, decltype(kp)::value>>(p.cfg, stream, dy, x, mean, rstd, gamma, dx,
                                                                          pg, pb, rows, cols, p.vec);
        });
        break;
      case RowVariant::kBlock:
        dispatch_pow2<kMinBlockRegs, kMaxBlockRegs<T, 16>>(p.per_thread, [&](auto kn) {
          constexpr int kN = decltype(kn)::value;
          LaunchConfig cfg = p.cfg;
          cfg.shared_bytes = norm_detail::backward_block_shared_bytes<A>(kN);
          if (cfg.shared_bytes > 48 * 1024) allow_dynamic_shared<layer_norm_backward_block_kernel<T, kN>>(cfg.shared_bytes);
          launch<layer_norm_backward_block_kernel<T, kN>>(cfg, stream, dy, x, mean, rstd, gamma, dx, pg, pb, rows, cols,
                                                          p.vec);
        });
        break;
      default:
        launch<layer_norm_backward_stream_kernel<T>>(p.cfg, stream, dy, x, mean, rstd, gamma, dx, pg, pb, rows, cols,
                                                     p.vec);
    }
  }
  if (params) {
    const int64_t nparts = rows > 0 ? int64_t(p.cfg.grid.x) : 0;  // no rows: zeros
    constexpr int V = kVec<A>;
    const bool vec = cols % V == 0 && vec_aligned<16>(pg);  // then pb, cols later, is aligned too
    launch<layer_norm_param_grad_kernel<T>>(layer_norm_param_grad_config(cols, vec ? V : 1), stream, pg, pb, nparts,
                                            cols, dgamma, dbeta, vec);
  }
}

}  // namespace ember::kernels::cuda
