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
// This file has the versions' names and the launchers; v1-v3 and the operand helpers are
// in sgemm_scalar.cuh, v4-v6 and the quads inner product they share in sgemm_float4.cuh.
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
//      memory no longer paces the FMA units (Note [SGEMM shared-memory bound] in
//      sgemm_float4.cuh); BK = 16, fetched in two halves of 8. The version designed for
//      the target, >= 90% of cuBLAS SGEMM at 4096^3 on an H200 (the analysis:
//      docs/kernel-speed.md, "SGEMM").
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/sgemm_float4.cuh"
#include "kernels/cuda/sgemm_scalar.cuh"

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
