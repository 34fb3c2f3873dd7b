// SGEMM v1 to v3 (sgemm.cuh has the overview, the version names and the launchers): the
// plain port, shared-memory tiles and register tiles, all moving their operands with
// scalar loads; and the operand helpers every version uses (panel_ptr, batch_entry,
// SgemmArgs) or v2 and v3 do (load_panel_scalar). v3's block tile (kSgemmBM, kSgemmBN,
// kSgemmThreads) is v4's and v5's too (sgemm_float4.cuh).
#pragma once

#include <cstdint>

#include "kernels/cuda/gemm_common.cuh"

namespace ember::kernels::cuda {

// --- Operands as (mn, k) panels ---------------------------------------------------------
// Every kernel reads A as its (m, k) panel and B as its (n, k) panel. Element (mn, kk) of a
// panel is stored at x[mn * ld + kk] when KContig (A not transposed; B transposed, as a
// Linear weight [n, k] is) and at x[kk * ld + mn] otherwise. Loads walk the stored rows'
// contiguous direction, so a warp's loads coalesce in both layouts.
template <bool KContig>
__device__ __forceinline__ const float* panel_ptr(const float* x, int64_t ld, int mn, int kk) {
  return KContig ? x + int64_t(mn) * ld + kk : x + int64_t(kk) * ld + mn;
}

// Copies the MNT x KT tile of a panel at (mn0, k0) to shared memory through
// store(mn, kk, value), one element per step, zero outside [0, mn_ext) x [0, k_ext).
template <bool KContig, int MNT, int KT, int kThreads, class Store>
__device__ __forceinline__ void load_panel_scalar(const float* x, int64_t ld, int mn_ext, int k_ext, int mn0, int k0,
                                                  int tid, Store store) {
  for (int e = tid; e < MNT * KT; e += kThreads) {
    const int mn = KContig ? e / KT : e % MNT, kk = KContig ? e % KT : e / MNT;
    const bool inside = mn0 + mn < mn_ext && k0 + kk < k_ext;
    store(mn, kk, inside ? *panel_ptr<KContig>(x, ld, mn0 + mn, k0 + kk) : 0.0f);
  }
}

// The matrix of this block's batch entry.
template <class T>
__device__ __forceinline__ T* batch_entry(T* x, int64_t stride) {
  return x + int64_t(blockIdx.z) * stride;
}

using SgemmArgs = GemmArgs<float, float>;

// --- v1: naive --------------------------------------------------------------------------
// One thread per output, a 16 x 16 block per 16 x 16 tile of C: a dot product of a row of
// op(A) and a column of op(B) read straight from global memory. 2k FLOPs on 8k bytes per
// output, so L1/L2 bandwidth bounds it, far below the FMA units.
inline constexpr int kSgemmV1Tile = 16;

template <bool TransA, bool TransB>
__global__ void __launch_bounds__(kSgemmV1Tile * kSgemmV1Tile) sgemm_v1_naive(SgemmArgs g) {
  constexpr int T = kSgemmV1Tile;
  int tm, tn;
  block_tile((g.m + T - 1) / T, (g.n + T - 1) / T, tm, tn);
  const int row = tm * T + int(threadIdx.y), col = tn * T + int(threadIdx.x);
  if (row >= g.m || col >= g.n) return;
  const float* a = batch_entry(g.a, g.stride_a);
  const float* b = batch_entry(g.b, g.stride_b);
  float acc = 0.0f;
  for (int kk = 0; kk < g.k; ++kk)
    acc = fmaf(*panel_ptr<!TransA>(a, g.lda, row, kk), *panel_ptr<TransB>(b, g.ldb, col, kk), acc);
  float* out = batch_entry(g.c, g.stride_c) + int64_t(row) * g.ldc + col;
  *out = gemm_epilogue(acc, g.alpha, g.beta, out);
}

// --- v2: shared-memory tiles ------------------------------------------------------------
// A 32 x 32 block computes a 32 x 32 tile of C, one output per thread, walking k in steps
// of 32: the block stages a 32 x 32 tile of op(A) and of op(B) in shared memory, so each
// global element is read once per block instead of once per thread (32x less global and
// L2 traffic: 8 FLOP/byte). Now two shared loads feed each FMA. Tiles are padded to 33
// columns so that storing a transposed operand is free of bank conflicts.
inline constexpr int kSgemmV2Tile = 32;

template <bool TransA, bool TransB>
__global__ void __launch_bounds__(kSgemmV2Tile * kSgemmV2Tile) sgemm_v2_shared(SgemmArgs g) {
  constexpr int T = kSgemmV2Tile;
  __shared__ float as[T][T + 1];  // as[m][k]
  __shared__ float bs[T][T + 1];  // bs[k][n]
  int tm, tn;
  block_tile((g.m + T - 1) / T, (g.n + T - 1) / T, tm, tn);
  const int tx = int(threadIdx.x), ty = int(threadIdx.y), tid = ty * T + tx;
  const float* a = batch_entry(g.a, g.stride_a);
  const float* b = batch_entry(g.b, g.stride_b);
  float acc = 0.0f;
  for (int k0 = 0; k0 < g.k; k0 += T) {
    load_panel_scalar<!TransA, T, T, T * T>(a, g.lda, g.m, g.k, tm * T, k0, tid,
                                            [&](int mn, int kk, float v) { as[mn][kk] = v; });
    load_panel_scalar<TransB, T, T, T * T>(b, g.ldb, g.n, g.k, tn * T, k0, tid,
                                           [&](int mn, int kk, float v) { bs[kk][mn] = v; });
    __syncthreads();
    EMBER_UNROLL
    for (int kk = 0; kk < T; ++kk) acc = fmaf(as[ty][kk], bs[kk][tx], acc);
    __syncthreads();  // before the next tile overwrites as and bs
  }
  const int row = tm * T + ty, col = tn * T + tx;
  if (row < g.m && col < g.n) {
    float* out = batch_entry(g.c, g.stride_c) + int64_t(row) * g.ldc + col;
    *out = gemm_epilogue(acc, g.alpha, g.beta, out);
  }
}

// --- v3: register blocking --------------------------------------------------------------
// 256 threads compute a 128 x 128 tile of C, each an 8 x 8 micro-tile held in registers.
// Per k step a thread reads 8 values of A and 8 of B from shared memory and does 64 FMAs
// (0.25 shared loads per FMA instead of 2), and each block reads 32 FLOP/byte of global
// memory. Loads are still scalar, and the reads of as[m][k] down a column and of
// bs[k][8 * tx + j] conflict in shared-memory banks: v4 fixes both.
inline constexpr int kSgemmBM = 128, kSgemmBN = 128, kSgemmThreads = 256, kSgemmTM = 8, kSgemmTN = 8;
inline constexpr int kSgemmV3BK = 8;

template <bool TransA, bool TransB>
__global__ void __launch_bounds__(kSgemmThreads) sgemm_v3_register(SgemmArgs g) {
  constexpr int BM = kSgemmBM, BN = kSgemmBN, BK = kSgemmV3BK, TM = kSgemmTM, TN = kSgemmTN;
  __shared__ float as[BM][BK];  // as[m][k]
  __shared__ float bs[BK][BN];  // bs[k][n]
  int tm, tn;
  block_tile((g.m + BM - 1) / BM, (g.n + BN - 1) / BN, tm, tn);
  const int tid = int(threadIdx.x), ty = tid / (BN / TN), tx = tid % (BN / TN);
  const float* a = batch_entry(g.a, g.stride_a);
  const float* b = batch_entry(g.b, g.stride_b);
  float acc[TM][TN] = {};
  for (int k0 = 0; k0 < g.k; k0 += BK) {
    load_panel_scalar<!TransA, BM, BK, kSgemmThreads>(a, g.lda, g.m, g.k, tm * BM, k0, tid,
                                                      [&](int mn, int kk, float v) { as[mn][kk] = v; });
    load_panel_scalar<TransB, BN, BK, kSgemmThreads>(b, g.ldb, g.n, g.k, tn * BN, k0, tid,
                                                     [&](int mn, int kk, float v) { bs[kk][mn] = v; });
    __syncthreads();
    EMBER_UNROLL
    for (int kk = 0; kk < BK; ++kk) {
      float ra[TM], rb[TN];
      EMBER_UNROLL
      for (int i = 0; i < TM; ++i) ra[i] = as[ty * TM + i][kk];
      EMBER_UNROLL
      for (int j = 0; j < TN; ++j) rb[j] = bs[kk][tx * TN + j];
      EMBER_UNROLL
      for (int i = 0; i < TM; ++i)
        EMBER_UNROLL
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
    }
    __syncthreads();
  }
  float* c = batch_entry(g.c, g.stride_c);
  for (int i = 0; i < TM; ++i) {
    const int row = tm * BM + ty * TM + i;
    if (row >= g.m) break;
    for (int j = 0; j < TN; ++j) {
      const int col = tn * BN + tx * TN + j;
      if (col >= g.n) break;
      float* out = c + int64_t(row) * g.ldc + col;
      *out = gemm_epilogue(acc[i][j], g.alpha, g.beta, out);
    }
  }
}

}  // namespace ember::kernels::cuda
