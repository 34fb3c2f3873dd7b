// Hand-written float32 GEMM on the FMA units, six versions side by side from the plain
// port upward, so each can be benchmarked against the one before it; each later version
// says what it changes and why that is faster. All compute, row-major (conventions: gemm_common.cuh),
//   C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C[m, n],   op = identity or transpose,
// batched over grid.z, for any m, n, k (partial edge tiles, k not a multiple of the tile)
// and any leading dimensions (16-byte loads only where rows are 16-byte aligned).
// Each output is the sum over k in increasing order, one fmaf per term: deterministic.
//
// Pick one with sgemm(SgemmVersion, problem, stream) or by name (parse_sgemm_version:
// "v1".."v6", "naive", "shared", "register", "vectorized", "double_buffered", "warptiled");
// kSgemmDefault is the one designed to be fastest (speed is measured on a GPU, bench/).
//
// Note [SGEMM arithmetic intensity]
// A GEMM does 2*m*n*k FLOPs on at least 4*(m*k + k*n + m*n) bytes (plus m*n more read when
// beta != 0). At 4096^3 that is 137 GFLOP on 201 MB, 683 FLOP/byte, far above the H200's
// ridge point (FP32 without tensor cores: 132 SMs * 128 lanes * 2 FLOP * 1.98 GHz ~ 67
// TFLOP/s, over 4.8 TB/s HBM = 14 FLOP/byte): the bound is arithmetic, and each version
// exists to stop some memory level (DRAM/L2, then shared memory, then instruction issue)
// from being the bottleneck instead.
//   v1 one thread per output reads 2k floats for 2k FLOPs: 0.25 FLOP/byte from L1/L2.
//   v2 T x T shared tiles: each element read from global memory once per block, T/4 = 8
//      FLOP/byte for T = 32; but two shared-memory loads per FMA now bound it.
//   v3 BM x BN block tile, TM x TN outputs per thread in registers: BM*BN/(2*(BM+BN)) = 32
//      FLOP/byte from global for 128 x 128, and (TM+TN)/(TM*TN) = 0.25 shared loads per FMA.
//   v4 the same tiles moved with 16-byte loads (4x fewer load instructions, global and
//      shared) and A stored transposed in shared memory so a thread's column of A is one
//      float4; the thread tile split in 4x4 quads 64 apart makes those reads conflict-free.
//   v5 double buffering: the global loads of K-tile t+1 are in flight while tile t is
//      computed from the other shared buffer; one barrier per tile instead of two
//      (128 x 128 block tile, 8 x 8 per thread, 256 threads, BK = 8, 2 blocks per SM).
//   v6 warp tiling: 128 threads, each warp a 64 x 64 tile of C, each thread 16 x 8
//      outputs: 6 float4 shared reads per 128 FMAs where v5 has 4 per 64, so the shared
//      memory no longer paces the FMA units (Note [SGEMM shared-memory bound]); BK = 16,
//      fetched in two halves of 8. The version designed for the target, >= 90% of cuBLAS
//      SGEMM at 4096^3 on an H200 (the analysis: docs/kernel-speed.md, "SGEMM").
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/cuda/gemm_common.cuh"

namespace ember::kernels::cuda {

enum class SgemmVersion : int {
  Naive = 1,
  SharedTiles = 2,
  RegisterTiles = 3,
  Vectorized = 4,
  DoubleBuffered = 5,
  WarpTiled = 6
};
inline constexpr SgemmVersion kSgemmVersions[] = {SgemmVersion::Naive,          SgemmVersion::SharedTiles,
                                                  SgemmVersion::RegisterTiles,  SgemmVersion::Vectorized,
                                                  SgemmVersion::DoubleBuffered, SgemmVersion::WarpTiled};
inline constexpr SgemmVersion kSgemmDefault = SgemmVersion::WarpTiled;

inline const char* sgemm_version_name(SgemmVersion v) {
  switch (v) {
    case SgemmVersion::Naive: return "naive";
    case SgemmVersion::SharedTiles: return "shared";
    case SgemmVersion::RegisterTiles: return "register";
    case SgemmVersion::Vectorized: return "vectorized";
    case SgemmVersion::DoubleBuffered: return "double_buffered";
    case SgemmVersion::WarpTiled: return "warptiled";
  }
  return "?";
}

// "1".."6", "v1".."v6" or a version's name; throws ember::Error otherwise.
inline SgemmVersion parse_sgemm_version(std::string_view name) {
  for (SgemmVersion v : kSgemmVersions) {
    const std::string num = std::to_string(int(v));
    if (name == num || name == "v" + num || name == sgemm_version_name(v)) return v;
  }
  EMBER_FAIL("sgemm: unknown version '", name,
             "' (expected 1-6, v1-v6, naive, shared, register, vectorized, double_buffered or warptiled)");
}

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

// The matrix of this block's batch entry.
template <class T>
__device__ __forceinline__ T* batch_entry(T* x, int64_t stride) {
  return x + int64_t(blockIdx.z) * stride;
}

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

// --- Host side ----------------------------------------------------------------------------

// The launch configuration of version v for an m x n output (batch matrices).
inline LaunchConfig sgemm_config(SgemmVersion v, int64_t m, int64_t n, int64_t batch) {
  switch (v) {
    case SgemmVersion::Naive:
      return gemm_tile_config(m, n, batch, kSgemmV1Tile, kSgemmV1Tile, dim3(kSgemmV1Tile, kSgemmV1Tile), "sgemm");
    case SgemmVersion::SharedTiles:
      return gemm_tile_config(m, n, batch, kSgemmV2Tile, kSgemmV2Tile, dim3(kSgemmV2Tile, kSgemmV2Tile), "sgemm");
    case SgemmVersion::RegisterTiles:
    case SgemmVersion::Vectorized:
    case SgemmVersion::DoubleBuffered:
      return gemm_tile_config(m, n, batch, kSgemmBM, kSgemmBN, dim3(kSgemmThreads), "sgemm");
    case SgemmVersion::WarpTiled:
      return gemm_tile_config(m, n, batch, kSgemmBM, kSgemmBN, dim3(kSgemmV6Threads), "sgemm");
  }
  EMBER_FAIL("sgemm: unknown version ", int(v));
}

// C = alpha * op(A) @ op(B) + beta * C with version v (see GemmProblem for the operands).
inline void sgemm(SgemmVersion v, const GemmProblem<float, float>& p, cudaStream_t stream) {
  check_gemm_problem(p, "sgemm");
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
  const bool vec_a = rows_aligned16(p.a, p.lda, p.stride_a, p.batch);
  const bool vec_b = rows_aligned16(p.b, p.ldb, p.stride_b, p.batch);
  const bool vec_c = rows_aligned16(p.c, p.ldc, p.stride_c, p.batch);
  for_each_batch_chunk(p, [&](const SgemmArgs& g, int64_t count) {
    const LaunchConfig cfg = sgemm_config(v, p.m, p.n, count);
    gemm_dispatch_layout(p.trans_a, p.trans_b, [&](auto ta, auto tb) {
      constexpr bool TA = decltype(ta)::value, TB = decltype(tb)::value;
      switch (v) {
        case SgemmVersion::Naive: return launch<sgemm_v1_naive<TA, TB>>(cfg, stream, g);
        case SgemmVersion::SharedTiles: return launch<sgemm_v2_shared<TA, TB>>(cfg, stream, g);
        case SgemmVersion::RegisterTiles: return launch<sgemm_v3_register<TA, TB>>(cfg, stream, g);
        case SgemmVersion::Vectorized:
          return launch<sgemm_v4_vectorized<TA, TB>>(cfg, stream, g, vec_a, vec_b, vec_c);
        case SgemmVersion::DoubleBuffered:
          return launch<sgemm_v5_double_buffered<TA, TB>>(cfg, stream, g, vec_a, vec_b, vec_c);
        case SgemmVersion::WarpTiled:
          return launch<sgemm_v6_warptiled<TA, TB>>(cfg, stream, g, vec_a, vec_b, vec_c);
      }
    });
  });
}

inline void sgemm(std::string_view version, const GemmProblem<float, float>& p, cudaStream_t stream) {
  sgemm(parse_sgemm_version(version), p, stream);
}

// The CPU backend's gemm signature (kernels/cpu/gemm.h) with alpha and beta: one matrix.
inline void sgemm(SgemmVersion v, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                  cudaStream_t stream) {
  GemmProblem<float, float> p;
  p.m = m, p.n = n, p.k = k, p.alpha = alpha, p.beta = beta;
  p.a = a, p.lda = lda, p.trans_a = trans_a;
  p.b = b, p.ldb = ldb, p.trans_b = trans_b;
  p.c = c, p.ldc = ldc;
  sgemm(v, p, stream);
}

}  // namespace ember::kernels::cuda
