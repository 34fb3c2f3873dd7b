// bf16 GEMM on the tensor cores (sm_80 and newer), float32 accumulation:
//   C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C[m, n],  A, B bf16; C float or bf16
// in the four layouts of gemm_common.cuh, batched, any m, n, k and leading dimensions.
// 2*m*n*k FLOPs on 2*(m*k + k*n) + sizeof(C)*m*n bytes: at 4096^3, 1.4 kFLOP/byte, far past
// the H200's ridge (~990 TFLOP/s dense bf16 / 4.8 TB/s = 206 FLOP/byte), so the bound is the
// tensor cores' issue rate and the shared-memory traffic that feeds them. Target: >= 450
// TFLOP/s at 4096^3 on an H200 with mma.sync (Hopper's wgmma would be the next step).
//
// Design (CUTLASS's classic sm_80 configuration):
// - A block of 4 warps computes a 128 x 128 tile of C; each warp a 64 x 64 tile as 4 x 8
//   `mma.sync.aligned.m16n8k16` (bf16 in, f32 accumulators: 128 registers per thread).
//   Per 16-wide k step a warp loads 4 A and 4 B fragments (ldmatrix.x4) for 32 MMAs.
// - K advances in tiles of 64 through a 3-stage cp.async pipeline in dynamic shared memory
//   (32 KiB per stage, 96 KiB per block, 2 blocks per SM): the copies of tiles t+1 and t+2
//   are in flight while tile t is multiplied.
// - Shared tiles keep the global layout (a panel stored k-contiguous stays [mn][k], an
//   mn-contiguous one [k][mn]); ldmatrix, or ldmatrix.trans for the latter, builds the
//   fragments either way, so all four layouts take the same path. 16-byte chunks are XOR-
//   swizzled by row (chunk ^ (row % 8)) so the 8 rows an ldmatrix phase reads, and the
//   chunks a warp copies, fall in distinct banks.
// - Edges: cp.async's source size zero-fills the part of a chunk past m, n or k. Operands
//   whose rows are not 16-byte aligned (leading dimension not a multiple of 8, or an odd
//   base) are copied element by element instead, synchronously: correct, slower.
//
// cp.async, ldmatrix and mma.sync come from tensor_core.cuh: inline PTX on a GPU, the
// emulator's models of the PTX ISA's fragment layouts and commit groups in CI.
#pragma once

#include <type_traits>

#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace ember::kernels::cuda {

inline constexpr int kBf16BM = 128, kBf16BN = 128, kBf16BK = 64, kBf16Stages = 3, kBf16Threads = 128;
inline constexpr int kBf16TileBytes = kBf16BM * kBf16BK * 2;  // one operand's tile (BM == BN)
inline constexpr int kBf16StageBytes = 2 * kBf16TileBytes;
inline constexpr size_t kBf16SharedBytes = size_t(kBf16Stages) * kBf16StageBytes;
static_assert(kBf16BM == kBf16BN, "the A and B tiles share one shape");

namespace bf16_gemm {

// A panel tile in shared memory: [128 rows (mn)][64 k] when KContig (8 chunks of 16 bytes
// per row), [64 rows (k)][128 mn] otherwise (16 chunks per row).
template <bool KContig>
struct Tile {
  static constexpr int kRows = KContig ? kBf16BM : kBf16BK;
  static constexpr int kChunks = (KContig ? kBf16BK : kBf16BM) / 8;
  // Byte offset of 16-byte chunk `chunk` of row `row`, swizzled.
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return uint32_t(row * kChunks + (chunk ^ (row & 7))) * 16u;
  }
};

// Copies the 128 x 64 tile of a panel at (mn0, k0) into the shared tile at `dst` (shared
// address; `dst_ptr` the same bytes as a pointer), zero outside [0, mn_ext) x [0, k_ext).
template <bool KContig>
__device__ __forceinline__ void load_tile(tc::SharedAddr dst, unsigned char* dst_ptr, const __nv_bfloat16* x, int64_t ld,
                                          int mn_ext, int k_ext, int mn0, int k0, bool async, int tid) {
  using T = Tile<KContig>;
  constexpr int kPerThread = T::kRows * T::kChunks / kBf16Threads;
  EMBER_UNROLL
  for (int i = 0; i < kPerThread; ++i) {
    const int id = tid + i * kBf16Threads, row = id / T::kChunks, chunk = id % T::kChunks;
    const int mn = KContig ? mn0 + row : mn0 + chunk * 8, kk = KContig ? k0 + chunk * 8 : k0 + row;
    int valid = KContig ? (mn < mn_ext ? k_ext - kk : 0) : (kk < k_ext ? mn_ext - mn : 0);
    valid = valid < 0 ? 0 : (valid > 8 ? 8 : valid);
    const __nv_bfloat16* src = valid > 0 ? (KContig ? x + int64_t(mn) * ld + kk : x + int64_t(kk) * ld + mn) : x;
    const uint32_t off = T::offset(row, chunk);
    if (async) {
      tc::cp_async<16>(dst + off, src, valid * 2);
    } else {
      unsigned short e[8];
      const unsigned short* s = reinterpret_cast<const unsigned short*>(src);
      EMBER_UNROLL
      for (int j = 0; j < 8; ++j) e[j] = j < valid ? s[j] : 0;
      uint4 v;
      v.x = e[0] | (uint32_t(e[1]) << 16), v.y = e[2] | (uint32_t(e[3]) << 16);
      v.z = e[4] | (uint32_t(e[5]) << 16), v.w = e[6] | (uint32_t(e[7]) << 16);
      store_vec(dst_ptr + off, v);
    }
  }
}

// The ldmatrix.x4 address of this lane for the 16 (mn) x 16 (k) block at (mn_base, k_base)
// of a shared tile. Matrix q = lane / 8 of the four covers mn offset 8 * (q % 2) and k
// offset 8 * (q / 2) when kMnFirst (A: fragments a0..a3), the other way round otherwise
// (B: b0, b1 of one n8 tile, then of the next).
template <bool KContig, bool kMnFirst>
__device__ __forceinline__ tc::SharedAddr fragment_addr(tc::SharedAddr tile, int mn_base, int k_base, int lane) {
  const int q = lane / 8, r = lane % 8;
  const int mn_off = kMnFirst ? 8 * (q % 2) : 8 * (q / 2), k_off = kMnFirst ? 8 * (q / 2) : 8 * (q % 2);
  if (KContig) return tile + Tile<true>::offset(mn_base + mn_off + r, (k_base + k_off) / 8);
  return tile + Tile<false>::offset(k_base + k_off + r, (mn_base + mn_off) / 8);
}

template <class TC>
__device__ __forceinline__ void store_pair(TC* c, int64_t ldc, int m, int n, int row, int col, float v0, float v1,
                                           float alpha, float beta, bool vec) {
  if (row >= m || col >= n) return;
  TC* out = c + int64_t(row) * ldc + col;
  if (vec && col + 1 < n) {
    float r0 = alpha * v0, r1 = alpha * v1;
    if constexpr (std::is_same_v<TC, float>) {
      if (beta != 0.0f) {
        const float2 old = load_vec<float2>(out);
        r0 += beta * old.x, r1 += beta * old.y;
      }
      store_vec(out, make_float2(r0, r1));
    } else {
      if (beta != 0.0f) {
        const float2 old = __bfloat1622float2(load_vec<__nv_bfloat162>(out));
        r0 += beta * old.x, r1 += beta * old.y;
      }
      store_vec(out, __floats2bfloat162_rn(r0, r1));
    }
    return;
  }
  out[0] = gemm_from_float<TC>(gemm_epilogue(v0, alpha, beta, out));
  if (col + 1 < n) out[1] = gemm_from_float<TC>(gemm_epilogue(v1, alpha, beta, out + 1));
}

}  // namespace bf16_gemm

template <bool TransA, bool TransB, class TC>
__global__ void __launch_bounds__(kBf16Threads, 2)
    gemm_bf16_tensor_core(GemmArgs<__nv_bfloat16, TC> g, bool async_a, bool async_b, bool vec_c) {
  using namespace bf16_gemm;
  constexpr bool kA = !TransA, kB = TransB;  // which panels are k-contiguous
  constexpr int BM = kBf16BM, BN = kBf16BN, BK = kBf16BK, S = kBf16Stages;
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const tc::SharedAddr smem_base = tc::shared_address(smem);
  int tm, tn;
  block_tile((g.m + BM - 1) / BM, (g.n + BN - 1) / BN, tm, tn);
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, wm = warp % 2, wn = warp / 2;
  const __nv_bfloat16* a = g.a + int64_t(blockIdx.z) * g.stride_a;
  const __nv_bfloat16* b = g.b + int64_t(blockIdx.z) * g.stride_b;

  auto load_stage = [&](int stage, int t) {
    const tc::SharedAddr at = smem_base + stage * kBf16StageBytes, bt = at + kBf16TileBytes;
    unsigned char* ap = smem + stage * kBf16StageBytes;
    load_tile<kA>(at, ap, a, g.lda, g.m, g.k, tm * BM, t * BK, async_a, tid);
    load_tile<kB>(bt, ap + kBf16TileBytes, b, g.ldb, g.n, g.k, tn * BN, t * BK, async_b, tid);
  };

  float acc[4][8][4] = {};
  const int tiles = (g.k + BK - 1) / BK;
  EMBER_UNROLL
  for (int s = 0; s < S - 1; ++s) {
    if (s < tiles) load_stage(s, s);
    tc::cp_async_commit();  // one group per stage, empty or not, so the counting below holds
  }
  for (int t = 0; t < tiles; ++t) {
    tc::cp_async_wait<S - 2>();  // this thread's copies of tile t have landed
    __syncthreads();         // everyone's have; and everyone is done with tile t - 1's stage
    if (t + S - 1 < tiles) load_stage((t + S - 1) % S, t + S - 1);
    tc::cp_async_commit();
    const tc::SharedAddr at = smem_base + (t % S) * kBf16StageBytes, bt = at + kBf16TileBytes;
    EMBER_UNROLL
    for (int ks = 0; ks < BK; ks += 16) {
      uint32_t fa[4][4], fb[8][2];
      EMBER_UNROLL
      for (int i = 0; i < 4; ++i) tc::ldmatrix<4, !kA>(fa[i], fragment_addr<kA, true>(at, wm * 64 + i * 16, ks, lane));
      EMBER_UNROLL
      for (int j = 0; j < 4; ++j) {
        uint32_t r[4];
        tc::ldmatrix<4, !kB>(r, fragment_addr<kB, false>(bt, wn * 64 + j * 16, ks, lane));
        fb[2 * j][0] = r[0], fb[2 * j][1] = r[1], fb[2 * j + 1][0] = r[2], fb[2 * j + 1][1] = r[3];
      }
      EMBER_UNROLL
      for (int i = 0; i < 4; ++i)
        EMBER_UNROLL
        for (int j = 0; j < 8; ++j) tc::mma_16816<__nv_bfloat16>(acc[i][j], fa[i], fb[j]);
    }
  }
  tc::cp_async_wait<0>();

  // Accumulator layout of m16n8: lane holds (row lane/4, cols 2*(lane%4) + {0, 1}) in
  // d0, d1 and the same 8 rows lower in d2, d3.
  TC* c = g.c + int64_t(blockIdx.z) * g.stride_c;
  EMBER_UNROLL
  for (int i = 0; i < 4; ++i)
    EMBER_UNROLL
    for (int j = 0; j < 8; ++j) {
      const int row = tm * BM + wm * 64 + i * 16 + lane / 4, col = tn * BN + wn * 64 + j * 8 + 2 * (lane % 4);
      store_pair(c, g.ldc, g.m, g.n, row, col, acc[i][j][0], acc[i][j][1], g.alpha, g.beta, vec_c);
      store_pair(c, g.ldc, g.m, g.n, row + 8, col, acc[i][j][2], acc[i][j][3], g.alpha, g.beta, vec_c);
    }
}

// The launch configuration: one 4-warp block per 128 x 128 tile, 96 KiB of shared memory.
inline LaunchConfig gemm_bf16_config(int64_t m, int64_t n, int64_t batch) {
  LaunchConfig cfg = gemm_tile_config(m, n, batch, kBf16BM, kBf16BN, dim3(kBf16Threads), "gemm_bf16");
  cfg.shared_bytes = kBf16SharedBytes;
  return cfg;
}

// C (float or bf16) = alpha * op(A) @ op(B) + beta * C on the tensor cores (GemmProblem
// describes the operands). Raises ember::Error on GPUs older than sm_80.
template <class TC>
void gemm_bf16(const GemmProblem<__nv_bfloat16, TC>& p, cudaStream_t stream) {
  static_assert(std::is_same_v<TC, float> || std::is_same_v<TC, __nv_bfloat16>, "gemm_bf16 writes float or bf16");
  check_gemm_problem(p, "gemm_bf16");
  if (p.m == 0 || p.n == 0 || p.batch == 0) return;
#if defined(__CUDACC__)
  int device = 0, major = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  EMBER_CHECK(major >= 8, "gemm_bf16: needs a GPU of compute capability 8.0 or newer (bf16 mma.sync); device ",
              device, " is ", major, ".x");
#endif
  const bool async_a = rows_aligned16(p.a, p.lda, p.stride_a, p.batch);
  const bool async_b = rows_aligned16(p.b, p.ldb, p.stride_b, p.batch);
  const bool vec_c = reinterpret_cast<uintptr_t>(p.c) % (2 * sizeof(TC)) == 0 && p.ldc % 2 == 0 &&
                     (p.batch <= 1 || p.stride_c % 2 == 0);
  for_each_batch_chunk(p, [&](const GemmArgs<__nv_bfloat16, TC>& g, int64_t count) {
    const LaunchConfig cfg = gemm_bf16_config(p.m, p.n, count);
    gemm_dispatch_layout(p.trans_a, p.trans_b, [&](auto ta, auto tb) {
      constexpr auto kernel = gemm_bf16_tensor_core<decltype(ta)::value, decltype(tb)::value, TC>;
      allow_dynamic_shared<kernel>(kBf16SharedBytes);  // per call: the attribute is per device
      launch<kernel>(cfg, stream, g, async_a, async_b, vec_c);
    });
  });
}

}  // namespace ember::kernels::cuda
