// bf16 GEMM on the tensor cores (sm_80 and newer), float32 accumulation:
//   C[m, n] = alpha * op(A)[m, k] @ op(B)[k, n] + beta * C[m, n],  A, B bf16; C float or bf16
// in the four layouts of gemm_common.cuh, batched, any m, n, k and leading dimensions.
// 2*m*n*k FLOPs on 2*(m*k + k*n) + sizeof(C)*m*n bytes: at 4096^3, 1.4 kFLOP/byte, far past
// the H200's ridge (~990 TFLOP/s dense bf16 / 4.8 TB/s = 206 FLOP/byte), so the bound is the
// tensor cores' issue rate and what feeds them: shared-memory wavefronts and the bytes each
// SM pulls from L2. Target: >= 450 TFLOP/s at 8192^3 on an H200 with mma.sync (Hopper's
// wgmma would be the next step).
//
// Design (CUTLASS's sm_80 configurations; docs/kernel-speed.md, "The bf16 tensor-core GEMM",
// has the per-SM budget behind the numbers):
// - Each warp computes a 64 x 64 tile of C as 4 x 8 `mma.sync.aligned.m16n8k16` (bf16 in,
//   f32 accumulators: 128 registers per thread); per 16-wide k step it loads 4 A and 4 B
//   fragments (ldmatrix.x4) for 32 MMAs. Two block shapes (Bf16Tiles):
//   large: 128 x 256, 8 warps, 4 stages (192 KiB), one block an SM. Of the shapes the
//     register file allows (8 warps x 64 x 64 accumulators an SM), the one that moves the
//     fewest bytes from L2 and writes the fewest cp.async wavefronts per MMA: 384 rows of
//     64 k a tile, 25% fewer than two 128 x 128 blocks.
//   small: 128 x 128, 4 warps, 3 stages (96 KiB), two blocks an SM: for problems whose large
//     tiles would not give every SM a block (gemm_bf16_uses_large_tiles).
// - K advances in tiles of 64 through a cp.async pipeline in dynamic shared memory: the
//   copies of the next stages are in flight while tile t is multiplied; one barrier a tile.
// - Shared tiles keep the global layout (a panel stored k-contiguous stays [mn][k], an
//   mn-contiguous one [k][mn]); ldmatrix, or ldmatrix.trans for the latter, builds the
//   fragments either way, so all four layouts take the same path. 16-byte chunks are XOR-
//   swizzled by row (chunk ^ (row % 8)) so the 8 rows an ldmatrix phase reads, and the
//   chunks a warp copies, fall in distinct banks.
// - A tile wholly inside its operand (all but the edges) is copied with one add a chunk
//   (WholeTileCopy), and ldmatrix addresses are a per-lane XOR plus immediates (Fragments):
//   a warp's k step is ~270 PTX instructions for its 128 MMAs (~540 with per-chunk bounds
//   and swizzle arithmetic). At the edges cp.async's source size zero-fills the part of a
//   chunk past m, n or k. Operands whose rows are not 16-byte aligned (leading dimension
//   not a multiple of 8, or an odd base) are copied element by element instead,
//   synchronously: correct, slower.
//
// cp.async, ldmatrix and mma.sync come from tensor_core.cuh: inline PTX on a GPU, the
// emulator's models of the PTX ISA's fragment layouts and commit groups in CI.
#pragma once

#include <type_traits>

#include "kernels/cuda/gemm_common.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace ember::kernels::cuda {

// A block shape: BN (128 or 256) names it; BM = 128, BK = 64, 64 x 64 a warp.
template <int BN>
struct Bf16Tiles {
  static_assert(BN == 128 || BN == 256, "the small (128 x 128) or large (128 x 256) tiles");
  static constexpr int kBM = 128, kBN = BN, kBK = 64;
  static constexpr int kWarpsM = kBM / 64, kWarpsN = kBN / 64, kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kStages = BN == 256 ? 4 : 3, kMinBlocks = BN == 256 ? 1 : 2;  // blocks an SM
  static constexpr int kATileBytes = kBM * kBK * 2, kStageBytes = (kBM + kBN) * kBK * 2;
  static constexpr size_t kSharedBytes = size_t(kStages) * kStageBytes;
};
using Bf16Small = Bf16Tiles<128>;
using Bf16Large = Bf16Tiles<256>;
// The bench names the large shape; its builds over older kernels (scripts/kernel-counters-at.sh) test this.
#define EMBER_GEMM_BF16_TILE_SHAPES 1

namespace bf16_gemm {

inline constexpr int kBK = 64;

// An operand's tile in shared memory, MN rows of the panel by 64 k: [MN][64 k] when
// KContig (8 chunks of 16 bytes a row), [64 k][MN] otherwise (MN / 8 chunks a row).
template <bool KContig, int MN>
struct Tile {
  static constexpr int kRows = KContig ? MN : kBK;
  static constexpr int kChunks = (KContig ? kBK : MN) / 8;
  // Byte offset of 16-byte chunk `chunk` of row `row`, swizzled.
  __device__ __forceinline__ static uint32_t offset(int row, int chunk) {
    return uint32_t(row * kChunks + (chunk ^ (row & 7))) * 16u;
  }
};

// Copies the MN x 64 tile of a panel at (mn0, k0) into the shared tile at `dst` (shared
// address; `dst_ptr` the same bytes as a pointer), zero outside [0, mn_ext) x [0, k_ext).
template <bool KContig, int MN, int kThreads>
__device__ __forceinline__ void load_tile(tc::SharedAddr dst, unsigned char* dst_ptr, const __nv_bfloat16* x, int64_t ld,
                                          int mn_ext, int k_ext, int mn0, int k0, bool async, int tid) {
  using T = Tile<KContig, MN>;
  constexpr int kPerThread = T::kRows * T::kChunks / kThreads;
  static_assert(kPerThread * kThreads == T::kRows * T::kChunks, "every thread copies the same number of chunks");
  EMBER_UNROLL
  for (int i = 0; i < kPerThread; ++i) {
    const int id = tid + i * kThreads, row = id / T::kChunks, chunk = id % T::kChunks;
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

// The copy of a whole tile (every element inside the operand, rows 16-byte aligned), the
// k loop's common case, with little arithmetic: chunk i of a thread is chunk tid + i *
// kThreads of the tile, and kThreads spans a multiple of 8 rows, so every chunk of the
// thread has the same column and the same swizzle, kRowStep rows below the previous one:
// a 64-bit add for the source, an immediate for the destination.
template <bool KContig, int MN, int kThreads>
struct WholeTileCopy {
  using T = Tile<KContig, MN>;
  static constexpr int kPerThread = T::kRows * T::kChunks / kThreads, kRowStep = kThreads / T::kChunks;
  static_assert(kThreads % T::kChunks == 0 && kRowStep % 8 == 0, "a thread's chunks share column and swizzle");
  const __nv_bfloat16* src;  // the thread's first chunk at k = 0
  int64_t ld;
  uint32_t dst;  // its offset in the tile

  __device__ __forceinline__ WholeTileCopy(const __nv_bfloat16* x, int64_t ld_, int mn0, int tid) : ld(ld_) {
    const int row = tid / T::kChunks, chunk = tid % T::kChunks;
    src = KContig ? x + int64_t(mn0 + row) * ld + chunk * 8 : x + int64_t(row) * ld + mn0 + chunk * 8;
    dst = T::offset(row, chunk);
  }
  __device__ __forceinline__ void issue(tc::SharedAddr tile, int k0) const {
    const __nv_bfloat16* p = src + (KContig ? int64_t(k0) : int64_t(k0) * ld);
    EMBER_UNROLL
    for (int i = 0; i < kPerThread; ++i)
      tc::cp_async<16>(tile + dst + uint32_t(i * kRowStep * T::kChunks * 16), p + int64_t(i) * kRowStep * ld);
  }
};

// The ldmatrix.x4 addresses of a lane for a warp's four 16 (mn) x 16 (k) blocks, block b at
// mn0 + 16 b, at k step s (k = 16 s) of a shared tile. Matrix q = lane / 8 of the four
// covers mn offset 8 * (q % 2) and k offset 8 * (q / 2) when kMnFirst (A: fragments
// a0..a3), the other way round otherwise (B: b0, b1 of one n8 tile, then of the next). The
// row a lane names is lane % 8 modulo 8 in every case (mn0 is a multiple of 64), so its
// swizzle is an XOR with a per-lane constant x of the chunk's low three bits, and the rest
// is immediate:
//   KContig ([mn][64 k], 128-byte rows): row mn0 + 16 b + mn_off + r, chunk 2 s + k_off / 8,
//     at base + 2048 b + 16 (2 s ^ x), x = k_off / 8 ^ r;
//   otherwise ([64 k][MN]): row 16 s + k_off + r, chunk mn0 / 8 + 2 b + mn_off / 8,
//     at base + 16 s * 2 MN + 16 (2 b ^ x), x = mn_off / 8 ^ r.
template <bool KContig, int MN, bool kMnFirst>
struct Fragments {
  uint32_t base, x16;  // x16 = 16 x

  __device__ __forceinline__ Fragments(int mn0, int lane) {
    const int q = lane / 8, r = lane % 8;
    const int mn_off = kMnFirst ? 8 * (q % 2) : 8 * (q / 2), k_off = kMnFirst ? 8 * (q / 2) : 8 * (q % 2);
    base = KContig ? uint32_t(mn0 + mn_off + r) * 128u : uint32_t(k_off + r) * (2u * MN) + uint32_t(mn0) * 2u;
    x16 = uint32_t((KContig ? k_off / 8 : mn_off / 8) ^ r) * 16u;
  }
  __device__ __forceinline__ uint32_t at(int b, int s) const {
    return KContig ? base + 2048u * b + (x16 ^ (32u * s)) : base + 32u * MN * s + (x16 ^ (32u * b));
  }
};

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

template <int BN, bool TransA, bool TransB, class TC>
__global__ void __launch_bounds__(Bf16Tiles<BN>::kThreads, Bf16Tiles<BN>::kMinBlocks)
    gemm_bf16_tensor_core(GemmArgs<__nv_bfloat16, TC> g, bool async_a, bool async_b, bool vec_c) {
  using namespace bf16_gemm;
  using Cfg = Bf16Tiles<BN>;
  constexpr bool kA = !TransA, kB = TransB;  // which panels are k-contiguous
  constexpr int BM = Cfg::kBM, BK = Cfg::kBK, S = Cfg::kStages, kThreads = Cfg::kThreads;
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const tc::SharedAddr smem_base = tc::shared_address(smem);
  int tm, tn;
  block_tile((g.m + BM - 1) / BM, (g.n + BN - 1) / BN, tm, tn);
  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wm = warp % Cfg::kWarpsM, wn = warp / Cfg::kWarpsM;
  const __nv_bfloat16* a = g.a + int64_t(blockIdx.z) * g.stride_a;
  const __nv_bfloat16* b = g.b + int64_t(blockIdx.z) * g.stride_b;

  // A stage: the A tile (BM x 64), then the B tile (BN x 64); whole tiles the short way.
  const WholeTileCopy<kA, BM, kThreads> copy_a(a, g.lda, tm * BM, tid);
  const WholeTileCopy<kB, BN, kThreads> copy_b(b, g.ldb, tn * BN, tid);
  const bool whole_a = async_a && tm * BM + BM <= g.m, whole_b = async_b && tn * BN + BN <= g.n;
  auto load_stage = [&](int stage, int t) {
    const tc::SharedAddr at = smem_base + stage * Cfg::kStageBytes, bt = at + Cfg::kATileBytes;
    unsigned char* ap = smem + stage * Cfg::kStageBytes;
    const bool whole_k = t * BK + BK <= g.k;
    if (whole_a && whole_k) copy_a.issue(at, t * BK);
    else load_tile<kA, BM, kThreads>(at, ap, a, g.lda, g.m, g.k, tm * BM, t * BK, async_a, tid);
    if (whole_b && whole_k) copy_b.issue(bt, t * BK);
    else load_tile<kB, BN, kThreads>(bt, ap + Cfg::kATileBytes, b, g.ldb, g.n, g.k, tn * BN, t * BK, async_b, tid);
  };
  const Fragments<kA, BM, true> frag_a(wm * 64, lane);
  const Fragments<kB, BN, false> frag_b(wn * 64, lane);

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
    const tc::SharedAddr at = smem_base + (t % S) * Cfg::kStageBytes, bt = at + Cfg::kATileBytes;
    EMBER_UNROLL
    for (int ks = 0; ks < BK / 16; ++ks) {
      uint32_t fa[4][4], fb[8][2];
      EMBER_UNROLL
      for (int i = 0; i < 4; ++i) tc::ldmatrix<4, !kA>(fa[i], at + frag_a.at(i, ks));
      EMBER_UNROLL
      for (int j = 0; j < 4; ++j) {
        uint32_t r[4];
        tc::ldmatrix<4, !kB>(r, bt + frag_b.at(j, ks));
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

// The large tiles unless they would leave an SM without a block: then the small tiles,
// twice as many blocks (two an SM), use up to twice as many SMs. At 8192^3, 2048 large
// tiles; at 2048 x 2048, 128 large tiles on 132 SMs would leave 4 idle and give 128 SMs one
// 8-warp block each, where 256 small tiles fill every SM with one or two 4-warp blocks.
inline bool gemm_bf16_uses_large_tiles(int64_t m, int64_t n, int64_t batch) {
  const int64_t large = ((m + 127) / 128) * ((n + 255) / 256) * batch;
  return large >= sm_count();
}

// The launch configuration of the block shape Cfg: one block per tile.
template <class Cfg>
LaunchConfig gemm_bf16_config(int64_t m, int64_t n, int64_t batch) {
  LaunchConfig cfg = gemm_tile_config(m, n, batch, Cfg::kBM, Cfg::kBN, dim3(Cfg::kThreads), "gemm_bf16");
  cfg.shared_bytes = Cfg::kSharedBytes;
  return cfg;
}

// C (float or bf16) = alpha * op(A) @ op(B) + beta * C on the tensor cores with the block
// shape Cfg (Bf16Small or Bf16Large); gemm_bf16 picks one, the tests run both on every case.
// Raises ember::Error on GPUs older than sm_80.
template <class Cfg, class TC>
void gemm_bf16_with(const GemmProblem<__nv_bfloat16, TC>& p, cudaStream_t stream) {
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
    const LaunchConfig cfg = gemm_bf16_config<Cfg>(p.m, p.n, count);
    gemm_dispatch_layout(p.trans_a, p.trans_b, [&](auto ta, auto tb) {
      constexpr auto kernel = gemm_bf16_tensor_core<Cfg::kBN, decltype(ta)::value, decltype(tb)::value, TC>;
      allow_dynamic_shared<kernel>(Cfg::kSharedBytes);  // per call: the attribute is per device
      launch<kernel>(cfg, stream, g, async_a, async_b, vec_c);
    });
  });
}

// C (float or bf16) = alpha * op(A) @ op(B) + beta * C on the tensor cores (GemmProblem
// describes the operands), in the block shape that suits its size.
template <class TC>
void gemm_bf16(const GemmProblem<__nv_bfloat16, TC>& p, cudaStream_t stream) {
  if (gemm_bf16_uses_large_tiles(p.m, p.n, p.batch)) gemm_bf16_with<Bf16Large>(p, stream);
  else gemm_bf16_with<Bf16Small>(p, stream);
}

}  // namespace ember::kernels::cuda
