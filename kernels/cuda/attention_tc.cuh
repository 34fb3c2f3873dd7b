// Fused attention forward on the tensor cores (sm_80 and newer), bf16 and f16 inputs,
// FlashAttention-2's schedule: the same semantics, dropout draw and lse as the SIMT kernel
// of attention.cuh (whose Params it takes), for head dims E = Ev = 64 or 128. Other head
// dims, float32/float64, and rows that are not 16-byte aligned take the SIMT kernel
// (ops_attention.cu chooses).
//
// Shapes: q [BH, L, D], k and v [BH, S, D], out [BH, L, D], lse [BH, L] (float, natural
// log), mask additive float [BH, L, S] at strides (mb, ml, ms) or null.
//
// Design:
// - A block of 4 warps takes 64 query rows of one bh, 16 per warp, the warp's Q fragments
//   held in registers for the whole row block. Keys go by tiles of 64 through a
//   two-stage cp.async pipeline (the copies of tile t + 1 fly while tile t is used): Q
//   and two stages of K and V in dynamic shared memory, (64 + 4 * 64) D * 2 bytes (80 KiB
//   at D = 128, 40 KiB at 64). Rows are 16-byte chunks XOR-swizzled by row (chunk ^ row % 8)
//   so the eight rows an ldmatrix phase reads fall in distinct banks.
// - S = Q K^T: per 16-wide d step, ldmatrix.x4 of K (stored [key][d], the "col" B operand
//   as is) and two m16n8k16 per 16 keys; scores scaled by scale * log2(e), so the softmax
//   is exp2. Keys past S or past the causal diagonal are -inf, the mask is added.
// - Online softmax in registers: a lane holds two rows (g, g + 8); the row max is reduced
//   over the quad that shares a row (two xor shuffles), the sum stays per lane until the
//   end. The weights (after dropout, as the SIMT kernel's pd) are rounded to T and packed
//   straight into the A fragments of O += P V: an m16n8 accumulator pair is the m16k16 A
//   fragment. V (stored [key][d]) is the B operand through ldmatrix.trans.
// - Causal: key tiles past the block's last row are skipped (the diagonal tile masks).
//
// Napkin math (H200, bf16, D = 128, T = 4096, non-causal): 4 T^2 D flops per head for
// 2 T D * 2 bytes of K and V per 64-row block: ~128 flops per byte of K/V from L2, compute
// bound; mma.sync peaks near 660 TFLOP/s dense on Hopper (wgmma's ~990 needs warpgroup
// MMAs), and the exp2 of the softmax (T^2 per head on the 16 SFU lanes per SM quarter)
// costs about a tenth of the MMA time. FlashAttention-2 reaches ~335-366 TFLOP/s on an
// H100 with this design.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace ember::kernels::cuda {

namespace attention_tc {

inline constexpr int kRows = 64;  // query rows per block, 16 per warp
inline constexpr int kKeys = 64;  // keys per tile
inline constexpr int kWarps = 4, kThreads = kWarps * 32;
inline constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

template <int D>
constexpr size_t shared_bytes() {
  return size_t(kRows + 4 * kKeys) * D * 2;  // Q, then K and V of two stages
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a [rows][D] tile of 16-bit values.
template <int D>
__device__ __forceinline__ uint32_t offset(int row, int chunk) {
  return uint32_t(row * (D / 8) + (chunk ^ (row & 7))) * 16u;
}

// Rows [r0, r0 + n) of src [rows, D] into the tile at `tile` by cp.async, zero past `rows`.
template <int D, class T>
__device__ __forceinline__ void load_rows(tc::SharedAddr tile, const T* src, int64_t r0, int64_t rows, int n,
                                          int tid) {
  constexpr int kChunks = D / 8;
  for (int x = tid; x < n * kChunks; x += kThreads) {
    const int r = x / kChunks, c = x % kChunks;
    const bool in = r0 + r < rows;
    tc::cp_async<16>(tile + offset<D>(r, c), in ? src + (r0 + r) * D + c * 8 : src, in ? 16 : 0);
  }
}

}  // namespace attention_tc

template <class T, int D>
__global__ void __launch_bounds__(attention_tc::kThreads)
    attention_tc_forward_kernel(const T* q, const T* k, const T* v, T* out, float* lse,
                                attention_detail::Params<float> P) {
  using namespace attention_tc;
  constexpr int kTileBytes = kKeys * D * 2;
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const tc::SharedAddr sq = tc::shared_address(smem), sk0 = sq + kRows * D * 2, sv0 = sk0 + 2 * kTileBytes;
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int quad = lane / 8, qr = lane % 8;  // which of ldmatrix.x4's matrices this lane addresses, and its row
  const int64_t bh = blockIdx.y, i0 = int64_t(blockIdx.x) * kRows;
  const T *qb = q + bh * P.L * D, *kb = k + bh * P.S * D, *vb = v + bh * P.S * D;
  const int64_t last = i0 + kRows < P.L ? i0 + kRows : P.L;
  const int64_t end = P.causal ? (last < P.S ? last : P.S) : P.S;
  const int tiles = int((end + kKeys - 1) / kKeys);

  auto load_kv = [&](int tile) {
    const int stage = tile % 2;
    load_rows<D>(sk0 + stage * kTileBytes, kb, int64_t(tile) * kKeys, P.S, kKeys, tid);
    load_rows<D>(sv0 + stage * kTileBytes, vb, int64_t(tile) * kKeys, P.S, kKeys, tid);
  };
  load_rows<D>(sq, qb, i0, P.L, kRows, tid);
  if (tiles > 0) load_kv(0);
  tc::cp_async_commit();

  const float scale2 = P.scale * kLog2e;
  float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
  uint32_t fq[D / 16][4];
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) load_kv(tile + 1);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();  // this thread's copies of tile (and Q) have landed
    __syncthreads();         // and everyone's
    if (tile == 0) {
      EMBER_UNROLL
      for (int kk = 0; kk < D / 16; ++kk)
        tc::ldmatrix<4, false>(fq[kk], sq + offset<D>(warp * 16 + 8 * (quad % 2) + qr, 2 * kk + quad / 2));
    }
    const tc::SharedAddr sk = sk0 + (tile % 2) * kTileBytes, sv = sv0 + (tile % 2) * kTileBytes;

    // S = Q K^T for the warp's 16 rows and the tile's 64 keys: s[n] is keys 8n..8n+7.
    float s[kKeys / 8][4] = {};
    EMBER_UNROLL
    for (int kk = 0; kk < D / 16; ++kk)
      EMBER_UNROLL
      for (int nn = 0; nn < kKeys / 16; ++nn) {
        // Matrices (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7), (keys 8-15, d 8-15).
        uint32_t r[4];
        tc::ldmatrix<4, false>(r, sk + offset<D>(16 * nn + 8 * (quad / 2) + qr, 2 * kk + quad % 2));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        tc::mma_16816<T>(s[2 * nn], fq[kk], b0);
        tc::mma_16816<T>(s[2 * nn + 1], fq[kk], b1);
      }

    // Online softmax: element e of s[n] is row g + 8 (e / 2), key 8 n + 2 t + e % 2.
    const int64_t j0 = int64_t(tile) * kKeys, row0 = i0 + warp * 16 + g;
    float mx[2] = {m[0], m[1]};
    EMBER_UNROLL
    for (int n = 0; n < kKeys / 8; ++n)
      EMBER_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int64_t i = row0 + 8 * (e / 2), j = j0 + 8 * n + 2 * t + e % 2;
        float x = s[n][e] * scale2;
        if (j >= P.S || (P.causal && j > i)) x = -INFINITY;
        else if (P.mask != nullptr && i < P.L) x += P.mask[bh * P.mb + i * P.ml + j * P.ms] * kLog2e;
        s[n][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    float shift[2];
    EMBER_UNROLL
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      shift[h] = mx[h] == -INFINITY ? 0.0f : mx[h];  // exp2(-inf - 0) = 0 where -inf - -inf is NaN
      const float alpha = exp2f(m[h] - shift[h]);
      m[h] = mx[h];
      l[h] *= alpha;
      EMBER_UNROLL
      for (int dn = 0; dn < D / 8; ++dn) o[dn][2 * h] *= alpha, o[dn][2 * h + 1] *= alpha;
    }
    // The weights as A fragments of P V: keys 16 kk.. of rows g, g + 8 are s[2 kk] and
    // s[2 kk + 1], so register (n % 2) * 2 + h of fragment n / 2 packs s[n][2h], s[n][2h + 1].
    uint32_t fp[kKeys / 16][4];
    EMBER_UNROLL
    for (int n = 0; n < kKeys / 8; ++n)
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        float pd[2];
        EMBER_UNROLL
        for (int c = 0; c < 2; ++c) {
          const float p = exp2f(s[n][2 * h + c] - shift[h]);
          l[h] += p;
          const int64_t j = j0 + 8 * n + 2 * t + c;
          pd[c] = p * attention_detail::dropout_factor(P, bh, row0 + 8 * h, j);
        }
        fp[n / 2][(n % 2) * 2 + h] = tc::pack2<T>(pd[0], pd[1]);
      }

    // O += P V: V's rows are keys (the k dim), so ldmatrix.trans gives the "col" B operand.
    EMBER_UNROLL
    for (int kk = 0; kk < kKeys / 16; ++kk)
      EMBER_UNROLL
      for (int dn = 0; dn < D / 16; ++dn) {
        // Matrices (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 8-15).
        uint32_t r[4];
        tc::ldmatrix<4, true>(r, sv + offset<D>(16 * kk + 8 * (quad % 2) + qr, 2 * dn + quad / 2));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        tc::mma_16816<T>(o[2 * dn], fp[kk], b0);
        tc::mma_16816<T>(o[2 * dn + 1], fp[kk], b1);
      }
    __syncthreads();  // this stage is refilled by the next iteration's copies
  }
  tc::cp_async_wait<0>();  // Q's copies when there was no key tile

  EMBER_UNROLL
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    const int64_t i = i0 + warp * 16 + g + 8 * h;
    if (i >= P.L) continue;
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;  // a fully masked row: out 0, lse -inf
    T* row = out + (bh * P.L + i) * D;
    EMBER_UNROLL
    for (int dn = 0; dn < D / 8; ++dn) {
      row[8 * dn + 2 * t] = round_to<T>(o[dn][2 * h] * inv);
      row[8 * dn + 2 * t + 1] = round_to<T>(o[dn][2 * h + 1] * inv);
    }
    if (t == 0) lse[bh * P.L + i] = l[h] > 0.0f ? m[h] * kLn2 + logf(l[h]) : -INFINITY;
  }
}

// Whether the tensor-core kernel computes this call: 16-bit inputs, E = Ev = 64 or 128,
// operands whose rows are 16-byte aligned (cp.async's size), and a GPU of sm_80 or newer.
template <class T>
bool attention_tc_supported(const T* q, const T* k, const T* v, int64_t E, int64_t Ev) {
  if (!tc::is_mma_type_v<T> || E != Ev || (E != 64 && E != 128)) return false;
  for (const void* p : {static_cast<const void*>(q), static_cast<const void*>(k), static_cast<const void*>(v)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
#if defined(__CUDACC__)
  int device = 0, major = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 8) return false;
#endif
  return true;
}

template <class T>
void attention_tc_forward(const T* q, const T* k, const T* v, T* out, float* lse,
                          const attention_detail::Params<float>& P, cudaStream_t stream) {
  using namespace attention_tc;
  auto run = [&](auto d) {
    constexpr int D = decltype(d)::value;
    constexpr auto kernel = attention_tc_forward_kernel<T, D>;
    allow_dynamic_shared<kernel>(shared_bytes<D>());
    const LaunchConfig cfg{dim3(unsigned((P.L + kRows - 1) / kRows), unsigned(P.BH)), dim3(kThreads),
                           shared_bytes<D>()};
    launch<kernel>(cfg, stream, q, k, v, out, lse, P);
  };
  if (P.E == 64) run(std::integral_constant<int, 64>{});
  else run(std::integral_constant<int, 128>{});
}

}  // namespace ember::kernels::cuda
