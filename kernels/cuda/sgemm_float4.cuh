// SGEMM v4 to v6 (sgemm.cuh has the overview, the version names and the launchers): the
// operands in float4 runs (PanelTile, store_run4), a thread's outputs as 4 x 4 quads read
// from shared memory as float4 (sgemm_quads_fma, sgemm_quads_store), then double
// buffering (v5) and warp tiling (v6, Note [SGEMM shared-memory bound]). Built on v3's
// block tile and the operand helpers of sgemm_scalar.cuh.
#pragma once

#include <cstdint>

#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/sgemm_scalar.cuh"

namespace ember::kernels::cuda {

// --- Operands as float4 runs (sgemm_scalar.cuh: the panels) -----------------------------
// The MNT x KT tile of a panel held in registers as float4 runs along the stored rows
// (along kk when KContig, along mn otherwise), kThreads threads sharing it: fetch() reads
// it from global memory (one 16-byte load per run where `vec` says rows are aligned and
// the run is inside, four checked scalar loads otherwise, zero outside), stash() writes it
// to a shared tile s[kk][mn] (rows padded by 4 floats: see the kernels).
template <bool KContig, int MNT, int KT, int kThreads>
struct PanelTile {
  static constexpr int kRuns = MNT * KT / 4 / kThreads;
  static_assert(kRuns * 4 * kThreads == MNT * KT, "the tile must split evenly into float4 runs");
  static constexpr int kRunsPerRow = KContig ? KT / 4 : MNT / 4;
  float4 v[kRuns];

  __device__ __forceinline__ static void coords(int run, int& mn, int& kk) {
    const int row = run / kRunsPerRow, col = run % kRunsPerRow * 4;
    mn = KContig ? row : col;
    kk = KContig ? col : row;
  }

  // kChecked = false: the caller knows the whole tile is inside and rows are aligned.
  template <bool kChecked = true>
  __device__ __forceinline__ void fetch(const float* x, int64_t ld, int mn_ext, int k_ext, int mn0, int k0, bool vec,
                                        int tid) {
    EMBER_UNROLL
    for (int r = 0; r < kRuns; ++r) {
      int mn, kk;
      coords(tid + r * kThreads, mn, kk);
      mn += mn0, kk += k0;
      if (!kChecked) {
        v[r] = load_vec<float4>(panel_ptr<KContig>(x, ld, mn, kk));
        continue;
      }
      const bool whole = KContig ? (mn < mn_ext && kk + 3 < k_ext) : (kk < k_ext && mn + 3 < mn_ext);
      if (vec && whole) {
        v[r] = load_vec<float4>(panel_ptr<KContig>(x, ld, mn, kk));
      } else {
        float e[4];
        EMBER_UNROLL
        for (int i = 0; i < 4; ++i) {
          const int emn = KContig ? mn : mn + i, ekk = KContig ? kk + i : kk;
          e[i] = emn < mn_ext && ekk < k_ext ? *panel_ptr<KContig>(x, ld, emn, ekk) : 0.0f;
        }
        v[r] = make_float4(e[0], e[1], e[2], e[3]);
      }
    }
  }

  template <int kPitch>
  __device__ __forceinline__ void stash(float (*s)[kPitch], int tid) const {
    EMBER_UNROLL
    for (int r = 0; r < kRuns; ++r) {
      int mn, kk;
      coords(tid + r * kThreads, mn, kk);
      if (KContig) {  // a run along kk lands in a column of s: four scalar stores
        s[kk + 0][mn] = v[r].x;
        s[kk + 1][mn] = v[r].y;
        s[kk + 2][mn] = v[r].z;
        s[kk + 3][mn] = v[r].w;
      } else {
        store_vec(&s[kk][mn], v[r]);
      }
    }
  }
};

// Writes alpha * acc + beta * C for 4 consecutive outputs (row, col..col+3): one 16-byte
// access where C's rows are aligned and all four are inside, checked scalars otherwise.
__device__ __forceinline__ void store_run4(float* c, int64_t ldc, int m, int n, int row, int col, float4 acc,
                                           float alpha, float beta, bool vec) {
  if (row >= m) return;
  float* out = c + int64_t(row) * ldc + col;
  if (vec && col + 3 < n) {
    float4 r = make_float4(alpha * acc.x, alpha * acc.y, alpha * acc.z, alpha * acc.w);
    if (beta != 0.0f) {
      const float4 old = load_vec<float4>(out);
      r = make_float4(r.x + beta * old.x, r.y + beta * old.y, r.z + beta * old.z, r.w + beta * old.w);
    }
    store_vec(out, r);
    return;
  }
  const float e[4] = {acc.x, acc.y, acc.z, acc.w};
  for (int j = 0; j < 4 && col + j < n; ++j) out[j] = gemm_epilogue(e[j], alpha, beta, out + j);
}

// --- v4, v5 and v6: the inner product and epilogue they share ---------------------------
// A thread owns an M x N tile of C as (M / 4) x (N / 4) quads of 4 x 4: rows r0 + q * RS +
// {0..3} and columns c0 + q * CS + {0..3} of the block tile (RS, CS: the quads' spacing),
// so it reads M / 4 float4 of A and N / 4 of B per k step for M * N FMAs. In v4 and v5,
// an 8 x 8 tile: thread (ty, tx) of the 16 x 16 grid has r0 = 4ty, c0 = 4tx, RS = CS = 64,
// and a warp (two values of ty, sixteen of tx) reads 16 distinct float4 of bs in one pass
// and broadcasts as.
// Shared tiles are [k][mn] with rows padded by 4 floats (still 16-byte aligned): the
// column stores of a KContig panel then spread over the banks.
inline constexpr int kSgemmPad = 4;

template <int BK, int RS, int CS, int kPitch, int M, int N>
__device__ __forceinline__ void sgemm_quads_fma(const float (*as)[kPitch], const float (*bs)[kPitch], int r0, int c0,
                                                float (&acc)[M][N]) {
  static_assert(M % 4 == 0 && N % 4 == 0, "whole quads");
  EMBER_UNROLL
  for (int kk = 0; kk < BK; ++kk) {
    float ra[M], rb[N];
    EMBER_UNROLL
    for (int q = 0; q < M / 4; ++q) {
      const float4 v = load_vec<float4>(&as[kk][q * RS + r0]);
      ra[4 * q] = v.x, ra[4 * q + 1] = v.y, ra[4 * q + 2] = v.z, ra[4 * q + 3] = v.w;
    }
    EMBER_UNROLL
    for (int q = 0; q < N / 4; ++q) {
      const float4 v = load_vec<float4>(&bs[kk][q * CS + c0]);
      rb[4 * q] = v.x, rb[4 * q + 1] = v.y, rb[4 * q + 2] = v.z, rb[4 * q + 3] = v.w;
    }
    EMBER_UNROLL
    for (int i = 0; i < M; ++i)
      EMBER_UNROLL
      for (int j = 0; j < N; ++j) acc[i][j] = fmaf(ra[i], rb[j], acc[i][j]);
  }
}

template <int RS, int CS, int M, int N>
__device__ __forceinline__ void sgemm_quads_store(const SgemmArgs& g, int tm, int tn, int r0, int c0,
                                                  const float (&acc)[M][N], bool vec_c) {
  float* c = batch_entry(g.c, g.stride_c);
  EMBER_UNROLL
  for (int i = 0; i < M; ++i) {
    const int row = tm * kSgemmBM + i / 4 * RS + r0 + i % 4;
    EMBER_UNROLL
    for (int h = 0; h < N / 4; ++h) {
      const int col = tn * kSgemmBN + h * CS + c0;
      const float4 v = make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
      store_run4(c, g.ldc, g.m, g.n, row, col, v, g.alpha, g.beta, vec_c);
    }
  }
}

// --- v4: vectorized loads, A transposed in shared memory --------------------------------
// v3's tiles and micro-tiles, moved with 16-byte loads: a thread fetches one float4 of A
// and one of B per 128 x 8 tile (1 load instruction instead of 4), reads its operands
// from shared memory as 4 float4 per k step (instead of 16 scalars), and stores C as
// float4. A is kept transposed in shared memory (as[k][m]) so a thread's 4 rows of A at
// one k are contiguous. Rows whose leading dimension or base is not 16-byte aligned, and
// runs that cross an edge, fall back to scalar loads (vec_a, vec_b, vec_c; per launch).
inline constexpr int kSgemmV4BK = 8;

template <bool TransA, bool TransB>
__global__ void __launch_bounds__(kSgemmThreads) sgemm_v4_vectorized(SgemmArgs g, bool vec_a, bool vec_b,
                                                                     bool vec_c) {
  constexpr int BM = kSgemmBM, BN = kSgemmBN, BK = kSgemmV4BK, P = kSgemmPad;
  __shared__ __align__(16) float as[BK][BM + P];  // as[k][m]
  __shared__ __align__(16) float bs[BK][BN + P];  // bs[k][n]
  int tm, tn;
  block_tile((g.m + BM - 1) / BM, (g.n + BN - 1) / BN, tm, tn);
  const int tid = int(threadIdx.x), ty = tid / 16, tx = tid % 16;
  const float* a = batch_entry(g.a, g.stride_a);
  const float* b = batch_entry(g.b, g.stride_b);
  PanelTile<!TransA, BM, BK, kSgemmThreads> ta;
  PanelTile<TransB, BN, BK, kSgemmThreads> tb;
  float acc[8][8] = {};
  for (int k0 = 0; k0 < g.k; k0 += BK) {
    ta.fetch(a, g.lda, g.m, g.k, tm * BM, k0, vec_a, tid);
    tb.fetch(b, g.ldb, g.n, g.k, tn * BN, k0, vec_b, tid);
    ta.stash(as, tid);
    tb.stash(bs, tid);
    __syncthreads();
    sgemm_quads_fma<BK, 64, 64>(as, bs, ty * 4, tx * 4, acc);
    __syncthreads();
  }
  sgemm_quads_store<64, 64>(g, tm, tn, ty * 4, tx * 4, acc, vec_c);
}

// --- v5: double buffering ---------------------------------------------------------------
// v4 waits for each tile's global loads before any FMA can start, and waits at two
// barriers per tile. v5 keeps two shared buffers: while the block computes K-tile t from
// one, the loads of tile t+1 are already in flight into registers, and land in the other
// buffer after the FMAs, so load latency hides behind 8 x 64 FMAs per thread; one barrier
// per tile suffices (the buffer written at step t was last read at step t-1, before the
// previous barrier). Registers are the limit: 64 accumulators, 16 operands and 8
// prefetched values must fit the 128 that 2 blocks of 256 threads per SM allow, so BK
// stays 8 (BK = 16 spilled on sm_90), and interior blocks (whole tiles, aligned rows, k a
// multiple of BK: all blocks at 4096^3) run a copy of the loop without bounds checks,
// whose fewer live values leave it spill-free. Shared memory: 2 x 2 x 8 x 132 floats
// = 16.5 KiB per block.
inline constexpr int kSgemmV5BK = 8;

template <bool kChecked, bool TransA, bool TransB, int kPitch>
__device__ __forceinline__ void sgemm_v5_loop(const SgemmArgs& g, int tm, int tn, bool vec_a, bool vec_b,
                                              float (*as)[kSgemmV5BK][kPitch], float (*bs)[kSgemmV5BK][kPitch],
                                              float (&acc)[8][8]) {
  constexpr int BM = kSgemmBM, BN = kSgemmBN, BK = kSgemmV5BK;
  const int tid = int(threadIdx.x), ty = tid / 16, tx = tid % 16;
  const float* a = batch_entry(g.a, g.stride_a);
  const float* b = batch_entry(g.b, g.stride_b);
  PanelTile<!TransA, BM, BK, kSgemmThreads> ta;
  PanelTile<TransB, BN, BK, kSgemmThreads> tb;
  const int tiles = (g.k + BK - 1) / BK;
  if (tiles == 0) return;
  ta.template fetch<kChecked>(a, g.lda, g.m, g.k, tm * BM, 0, vec_a, tid);
  tb.template fetch<kChecked>(b, g.ldb, g.n, g.k, tn * BN, 0, vec_b, tid);
  ta.stash(as[0], tid);
  tb.stash(bs[0], tid);
  __syncthreads();
  for (int t = 0; t < tiles; ++t) {
    const bool more = t + 1 < tiles;
    if (more) {  // issue the next tile's loads; their registers are not needed until after the FMAs
      ta.template fetch<kChecked>(a, g.lda, g.m, g.k, tm * BM, (t + 1) * BK, vec_a, tid);
      tb.template fetch<kChecked>(b, g.ldb, g.n, g.k, tn * BN, (t + 1) * BK, vec_b, tid);
    }
    sgemm_quads_fma<BK, 64, 64>(as[t % 2], bs[t % 2], ty * 4, tx * 4, acc);
    if (more) {
      ta.stash(as[(t + 1) % 2], tid);
      tb.stash(bs[(t + 1) % 2], tid);
    }
    __syncthreads();
  }
}

template <bool TransA, bool TransB>
__global__ void __launch_bounds__(kSgemmThreads, 2) sgemm_v5_double_buffered(SgemmArgs g, bool vec_a, bool vec_b,
                                                                            bool vec_c) {
  constexpr int BM = kSgemmBM, BN = kSgemmBN, BK = kSgemmV5BK, P = kSgemmPad;
  static_assert(BM == BN, "as and bs share one pitch");
  __shared__ __align__(16) float as[2][BK][BM + P];  // as[buffer][k][m]
  __shared__ __align__(16) float bs[2][BK][BN + P];  // bs[buffer][k][n]
  int tm, tn;
  block_tile((g.m + BM - 1) / BM, (g.n + BN - 1) / BN, tm, tn);
  float acc[8][8] = {};
  const bool interior = vec_a && vec_b && g.k % BK == 0 && (tm + 1) * BM <= g.m && (tn + 1) * BN <= g.n;
  if (interior) sgemm_v5_loop<false, TransA, TransB>(g, tm, tn, vec_a, vec_b, as, bs, acc);
  else sgemm_v5_loop<true, TransA, TransB>(g, tm, tn, vec_a, vec_b, as, bs, acc);
  const int tid = int(threadIdx.x);
  sgemm_quads_store<64, 64>(g, tm, tn, tid / 16 * 4, tid % 16 * 4, acc, vec_c);
}

// --- v6: warp tiling, 16 x 8 outputs a thread, BK = 16 ----------------------------------
// Note [SGEMM shared-memory bound]: the shared memory serves an SM 128 bytes a clock, so
// a warp's float4 read (512 bytes) takes 4 wavefronts, one a quarter-warp, broadcasts or
// not (the emulator counts them so). v4/v5's 8 x 8 tile reads 4 float4 a k step for 64
// FMAs: per warp 16 wavefronts against 64 FMA instructions, which the SM's 128 lanes
// retire in 16 clocks; the shared memory is as busy as the FMA units, and the two cannot
// both run at their peak. v6 gives each thread 16 x 8 outputs: 6 float4 (24 wavefronts)
// for 128 FMAs (32 clocks), 75% of the shared memory's rate at the FMA peak.
// The 128 x 128 block tile is split among 4 warps of 64 x 64 (2 x 2), a warp's lanes as
// 4 x 8, each lane owning 4 x 2 quads 16 rows and 32 columns apart: a quarter-warp (8 lanes
// of one lane row) reads one float4 of as (a broadcast) and 8 contiguous float4 of bs, so
// no read conflicts. 128 accumulators a thread take the registers of 2 blocks of 128
// threads an SM (8 warps); each warp has 128 independent FMAs a k step to hide latency.
// K advances 16 a tile (one barrier per 2048 FMAs a thread), the next tile fetched in two
// halves of 8 k so that only 16 registers hold loads in flight: the first half's loads are
// issued before the FMAs of the current tile's first half and stashed after them, the
// second half's go out behind the current second half; each half has 8 x 128 FMAs a
// thread to land. Shared memory: 2 buffers x 2 operands x 16 x 132 floats = 33 KiB a block.
inline constexpr int kSgemmV6Threads = 128, kSgemmV6BK = 16, kSgemmV6Half = 8;
inline constexpr int kSgemmWarpM = 64, kSgemmWarpN = 64;  // a warp's tile of C
inline constexpr int kSgemmV6TM = 16, kSgemmV6TN = 8;     // a thread's outputs
inline constexpr int kSgemmWarpQuadRows = 16, kSgemmWarpQuadCols = 32;

// The first row and column of this thread's quads in the block tile.
__device__ __forceinline__ void sgemm_v6_quads(int tid, int& r0, int& c0) {
  constexpr int warps_m = kSgemmBM / kSgemmWarpM;
  const int warp = tid / 32, lane = tid % 32;
  r0 = warp % warps_m * kSgemmWarpM + lane / 8 * 4;
  c0 = warp / warps_m * kSgemmWarpN + lane % 8 * 4;
}

template <bool kChecked, bool TransA, bool TransB, int kPitch>
__device__ __forceinline__ void sgemm_v6_loop(const SgemmArgs& g, int tm, int tn, bool vec_a, bool vec_b,
                                              float (*as)[kSgemmV6BK][kPitch], float (*bs)[kSgemmV6BK][kPitch],
                                              float (&acc)[kSgemmV6TM][kSgemmV6TN]) {
  constexpr int BM = kSgemmBM, BN = kSgemmBN, BK = kSgemmV6BK, H = kSgemmV6Half;
  constexpr int RS = kSgemmWarpQuadRows, CS = kSgemmWarpQuadCols;
  const int tid = int(threadIdx.x);
  int r0, c0;
  sgemm_v6_quads(tid, r0, c0);
  const float* a = batch_entry(g.a, g.stride_a);
  const float* b = batch_entry(g.b, g.stride_b);
  PanelTile<!TransA, BM, H, kSgemmV6Threads> ta;  // half a K-tile of each operand
  PanelTile<TransB, BN, H, kSgemmV6Threads> tb;
  const auto fetch = [&](int k0) {
    ta.template fetch<kChecked>(a, g.lda, g.m, g.k, tm * BM, k0, vec_a, tid);
    tb.template fetch<kChecked>(b, g.ldb, g.n, g.k, tn * BN, k0, vec_b, tid);
  };
  const auto stash = [&](int buffer, int half) {
    ta.stash(as[buffer] + half * H, tid);
    tb.stash(bs[buffer] + half * H, tid);
  };
  const int tiles = (g.k + BK - 1) / BK;
  // When k is not a multiple of BK the last tile has one half (interior blocks: k is a
  // multiple of H; edge blocks' loads are zero past k).
  const int halves = (g.k + H - 1) / H;
  if (halves == 0) return;
  fetch(0);
  stash(0, 0);
  if (halves > 1) {
    fetch(H);
    stash(0, 1);
  }
  __syncthreads();
  for (int t = 0; t < tiles; ++t) {
    const int cur = t % 2;
    const bool more = t + 1 < tiles, next_second = 2 * t + 3 < halves;
    if (more) fetch((t + 1) * BK);
    sgemm_quads_fma<H, RS, CS>(as[cur], bs[cur], r0, c0, acc);
    if (more) stash(cur ^ 1, 0);  // buffer cur ^ 1 was last read at step t - 1, before the last barrier
    if (next_second) fetch((t + 1) * BK + H);
    if (2 * t + 1 < halves) sgemm_quads_fma<H, RS, CS>(as[cur] + H, bs[cur] + H, r0, c0, acc);
    if (next_second) stash(cur ^ 1, 1);
    __syncthreads();
  }
}

template <bool TransA, bool TransB>
__global__ void __launch_bounds__(kSgemmV6Threads, 2) sgemm_v6_warptiled(SgemmArgs g, bool vec_a, bool vec_b,
                                                                        bool vec_c) {
  constexpr int BM = kSgemmBM, BN = kSgemmBN, BK = kSgemmV6BK, P = kSgemmPad;
  static_assert(BM == BN, "as and bs share one pitch");
  static_assert((BM / kSgemmWarpM) * (BN / kSgemmWarpN) * 32 == kSgemmV6Threads, "one warp per warp tile");
  static_assert(kSgemmWarpM == 4 * kSgemmV6TM && kSgemmWarpN == 8 * kSgemmV6TN &&
                    kSgemmWarpQuadRows == 4 * 4 && kSgemmWarpQuadCols == 8 * 4,
                "lanes as 4 x 8, quads of 4 x 4 interleaved over the warp tile");
  __shared__ __align__(16) float as[2][BK][BM + P];  // as[buffer][k][m]
  __shared__ __align__(16) float bs[2][BK][BN + P];  // bs[buffer][k][n]
  int tm, tn;
  block_tile((g.m + BM - 1) / BM, (g.n + BN - 1) / BN, tm, tn);
  float acc[kSgemmV6TM][kSgemmV6TN] = {};
  // Whole tiles with aligned rows and k a multiple of 8 (every block at 4096^3) load unchecked.
  const bool interior = vec_a && vec_b && g.k % kSgemmV6Half == 0 && (tm + 1) * BM <= g.m && (tn + 1) * BN <= g.n;
  if (interior) sgemm_v6_loop<false, TransA, TransB>(g, tm, tn, vec_a, vec_b, as, bs, acc);
  else sgemm_v6_loop<true, TransA, TransB>(g, tm, tn, vec_a, vec_b, as, bs, acc);
  int r0, c0;
  sgemm_v6_quads(int(threadIdx.x), r0, c0);
  sgemm_quads_store<kSgemmWarpQuadRows, kSgemmWarpQuadCols>(g, tm, tn, r0, c0, acc, vec_c);
}

}  // namespace ember::kernels::cuda
