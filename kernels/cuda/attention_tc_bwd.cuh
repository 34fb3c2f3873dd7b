// Fused attention backward on the tensor cores (sm_80 and newer), bf16 and f16, head dims
// 64 and 128: FlashAttention-2's backward in the two-kernel form of attention.cuh's SIMT
// backward (no atomics, so the same bits on every run), with its semantics: the forward's
// lse, D = rowsum(dout * out) (row_dot_kernel), the weights recomputed tile by tile and
// dropout's mask regenerated from the same Philox counters.
//
// Shapes as attention_tc.cuh's forward, plus dout [BH, L, D] (input), dq [BH, L, D],
// dk and dv [BH, S, D] (outputs), d [BH, L] (float, D of each row).
//
// - attention_tc_dkdv_kernel: a block of 4 warps per 64-key tile, 16 keys a warp; the query
//   tiles (Q, dout, lse, D: cp.async, two stages) go past. A warp computes S^T = K Q^T and
//   dP^T = V dout^T for its keys (keys are the m dim, so P^T and dS^T come out in the
//   accumulator layout that is the A fragment of the next products), then dV += (P Z)^T dout
//   and dK += dS^T Q, both B operands through ldmatrix.trans. Causal: query tiles before
//   the key tile are skipped.
// - attention_tc_dq_kernel: laid out as the forward (64 query rows a block, Q and dout
//   resident, K and V tiles through a two-stage cp.async pipeline): S = Q K^T, dP = dout V^T,
//   dS = P (dP Z - D), dQ += dS K (K through ldmatrix.trans).
// The weights P Z and dS are rounded to T for the products, as FlashAttention does.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_tc.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace ember::kernels::cuda {

namespace attention_tc {

template <int D>
constexpr size_t dkdv_shared_bytes() {  // K, V, two stages of Q and dout, two of lse and D
  return size_t(2 * kKeys + 4 * kRows) * D * 2 + 4 * kRows * sizeof(float);
}
template <int D>
constexpr size_t dq_shared_bytes() {  // Q, dout, two stages of K and V
  return size_t(2 * kRows + 4 * kKeys) * D * 2;
}

// acc (16 x 64, m16n8 tiles n = 0..7) += A (16 x D) B^T, A's 16 rows at row `a_row` of the
// tile at `a`, B's 64 rows (the n dim) at `b`: both [rows][D] tiles read by ldmatrix.
template <class T, int D>
__device__ __forceinline__ void mma_abt(float (&acc)[8][4], tc::SharedAddr a, int a_row, tc::SharedAddr b,
                                        int lane) {
  const int quad = lane / 8, qr = lane % 8;
  EMBER_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t fa[4];
    tc::ldmatrix<4, false>(fa, a + offset<D>(a_row + 8 * (quad % 2) + qr, 2 * kk + quad / 2));
    EMBER_UNROLL
    for (int nn = 0; nn < 4; ++nn) {
      uint32_t r[4];
      tc::ldmatrix<4, false>(r, b + offset<D>(16 * nn + 8 * (quad / 2) + qr, 2 * kk + quad % 2));
      const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      tc::mma_16816<T>(acc[2 * nn], fa, b0);
      tc::mma_16816<T>(acc[2 * nn + 1], fa, b1);
    }
  }
}

// acc (16 x D) += A (16 x 64, the fragments fa) B, B (64 x D) the tile at `b`, rows the k dim.
template <class T, int D>
__device__ __forceinline__ void mma_ab(float (&acc)[D / 8][4], const uint32_t (&fa)[4][4], tc::SharedAddr b,
                                       int lane) {
  const int quad = lane / 8, qr = lane % 8;
  EMBER_UNROLL
  for (int kk = 0; kk < 4; ++kk)
    EMBER_UNROLL
    for (int dn = 0; dn < D / 16; ++dn) {
      uint32_t r[4];
      tc::ldmatrix<4, true>(r, b + offset<D>(16 * kk + 8 * (quad % 2) + qr, 2 * dn + quad / 2));
      const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      tc::mma_16816<T>(acc[2 * dn], fa[kk], b0);
      tc::mma_16816<T>(acc[2 * dn + 1], fa[kk], b1);
    }
}

// The score of query i and key j as the softmax took it, in log2 units, before the lse.
__device__ __forceinline__ float score2(const attention_detail::Params<float>& P, int64_t bh, int64_t i, int64_t j,
                                        float dot) {
  if (j >= P.S || (P.causal && j > i)) return -INFINITY;
  float x = dot * P.scale * kLog2e;
  if (P.mask != nullptr && i < P.L) x += P.mask[bh * P.mb + i * P.ml + j * P.ms] * kLog2e;
  return x;
}

__device__ __forceinline__ float lse2(float lse) { return lse == -INFINITY ? 0.0f : lse * kLog2e; }

// Rows [r0, r0 + n) of a [rows] float vector into shared memory by 4-byte cp.async, zero past `rows`.
__device__ __forceinline__ void load_floats(tc::SharedAddr dst, const float* src, int64_t r0, int64_t rows, int n,
                                            int tid) {
  if (tid < n) {
    const bool in = r0 + tid < rows;
    tc::cp_async<4>(dst + 4 * tid, in ? src + r0 + tid : src, in ? 4 : 0);
  }
}

// Stores a warp's 16 x D accumulators (rows row0 + g, row0 + g + 8) times mul to rows < rows.
template <class T, int D>
__device__ __forceinline__ void store_rows(T* dst, const float (&acc)[D / 8][4], int64_t row0, int64_t rows, float mul,
                                           int lane) {
  const int g = lane / 4, t = lane % 4;
  EMBER_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int64_t i = row0 + g + 8 * h;
    if (i >= rows) continue;
    EMBER_UNROLL
    for (int dn = 0; dn < D / 8; ++dn) {
      dst[i * D + 8 * dn + 2 * t] = round_to<T>(acc[dn][2 * h] * mul);
      dst[i * D + 8 * dn + 2 * t + 1] = round_to<T>(acc[dn][2 * h + 1] * mul);
    }
  }
}

}  // namespace attention_tc

template <class T, int D>
__global__ void __launch_bounds__(attention_tc::kThreads)
    attention_tc_dkdv_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse, const float* dsum,
                             T* dk, T* dv, attention_detail::Params<float> P) {
  using namespace attention_tc;
  constexpr int kTile = kRows * D * 2;  // bytes of one [64][D] tile
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const tc::SharedAddr sk = tc::shared_address(smem), sv = sk + kTile, stages = sv + kTile;
  auto sq = [&](int s) { return stages + s * 2 * kTile; };
  auto sdo = [&](int s) { return stages + s * 2 * kTile + kTile; };
  auto srow = [&](int s) { return stages + 4 * kTile + s * 2 * kRows * 4; };  // lse then D, kRows floats each
  const float* rows_of = reinterpret_cast<const float*>(smem + 4 * kTile + 2 * kTile);
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, j0 = int64_t(blockIdx.x) * kKeys;
  const int64_t first = P.causal ? j0 / kRows : 0, tiles = (P.L + kRows - 1) / kRows;

  auto load_queries = [&](int64_t qt) {
    const int s = int(qt % 2);
    load_rows<D>(sq(s), q + bh * P.L * D, qt * kRows, P.L, kRows, tid);
    load_rows<D>(sdo(s), dout + bh * P.L * D, qt * kRows, P.L, kRows, tid);
    load_floats(srow(s), lse + bh * P.L, qt * kRows, P.L, kRows, tid);
    load_floats(srow(s) + kRows * 4, dsum + bh * P.L, qt * kRows, P.L, kRows, tid);
  };
  load_rows<D>(sk, k + bh * P.S * D, j0, P.S, kKeys, tid);
  load_rows<D>(sv, v + bh * P.S * D, j0, P.S, kKeys, tid);
  if (first < tiles) load_queries(first);
  tc::cp_async_commit();

  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};
  for (int64_t qt = first; qt < tiles; ++qt) {
    if (qt + 1 < tiles) load_queries(qt + 1);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();
    __syncthreads();
    const int s = int(qt % 2);
    const float* row_lse = rows_of + s * 2 * kRows;
    const float* row_d = row_lse + kRows;
    float st[8][4] = {}, dpt[8][4] = {};  // S^T and dP^T: keys warp*16 + g (+8), queries 8n + 2t (+1)
    mma_abt<T, D>(st, sk, warp * 16, sq(s), lane);
    mma_abt<T, D>(dpt, sv, warp * 16, sdo(s), lane);
    uint32_t fp[4][4], fds[4][4];
    EMBER_UNROLL
    for (int n = 0; n < 8; ++n)
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        float pz[2], ds[2];
        EMBER_UNROLL
        for (int c = 0; c < 2; ++c) {
          const int col = 8 * n + 2 * t + c;
          const int64_t i = qt * kRows + col, j = j0 + warp * 16 + g + 8 * h;
          const float p = exp2f(attention_tc::score2(P, bh, i, j, st[n][2 * h + c]) - lse2(row_lse[col]));
          const float z = attention_detail::dropout_factor(P, bh, i, j);
          pz[c] = p * z;
          ds[c] = p * (dpt[n][2 * h + c] * z - row_d[col]);
        }
        fp[n / 2][(n % 2) * 2 + h] = tc::pack2<T>(pz[0], pz[1]);
        fds[n / 2][(n % 2) * 2 + h] = tc::pack2<T>(ds[0], ds[1]);
      }
    mma_ab<T, D>(dv_acc, fp, sdo(s), lane);
    mma_ab<T, D>(dk_acc, fds, sq(s), lane);
    __syncthreads();  // this stage is refilled by the next iteration's copies
  }
  tc::cp_async_wait<0>();
  store_rows<T, D>(dk + bh * P.S * D, dk_acc, j0 + warp * 16, P.S, P.scale, lane);
  store_rows<T, D>(dv + bh * P.S * D, dv_acc, j0 + warp * 16, P.S, 1.0f, lane);
}

template <class T, int D>
__global__ void __launch_bounds__(attention_tc::kThreads)
    attention_tc_dq_kernel(const T* q, const T* k, const T* v, const T* dout, const float* lse, const float* dsum,
                           T* dq, attention_detail::Params<float> P) {
  using namespace attention_tc;
  constexpr int kTile = kRows * D * 2;
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const tc::SharedAddr sq = tc::shared_address(smem), sdo = sq + kTile, stages = sdo + kTile;
  auto sk = [&](int s) { return stages + s * 2 * kTile; };
  auto sv = [&](int s) { return stages + s * 2 * kTile + kTile; };
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, i0 = int64_t(blockIdx.x) * kRows, row0 = i0 + warp * 16 + g;
  const int64_t last = i0 + kRows < P.L ? i0 + kRows : P.L;
  const int64_t end = P.causal ? (last < P.S ? last : P.S) : P.S;
  const int tiles = int((end + kKeys - 1) / kKeys);
  float l2[2], dr[2];
  EMBER_UNROLL
  for (int h = 0; h < 2; ++h) {
    const bool in = row0 + 8 * h < P.L;
    l2[h] = in ? lse2(lse[bh * P.L + row0 + 8 * h]) : 0.0f;
    dr[h] = in ? dsum[bh * P.L + row0 + 8 * h] : 0.0f;
  }

  auto load_kv = [&](int tile) {
    load_rows<D>(sk(tile % 2), k + bh * P.S * D, int64_t(tile) * kKeys, P.S, kKeys, tid);
    load_rows<D>(sv(tile % 2), v + bh * P.S * D, int64_t(tile) * kKeys, P.S, kKeys, tid);
  };
  load_rows<D>(sq, q + bh * P.L * D, i0, P.L, kRows, tid);
  load_rows<D>(sdo, dout + bh * P.L * D, i0, P.L, kRows, tid);
  if (tiles > 0) load_kv(0);
  tc::cp_async_commit();

  float dq_acc[D / 8][4] = {};
  for (int tile = 0; tile < tiles; ++tile) {
    if (tile + 1 < tiles) load_kv(tile + 1);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();
    __syncthreads();
    const int s = tile % 2;
    float sc[8][4] = {}, dp[8][4] = {};  // rows warp*16 + g (+8), keys 8n + 2t (+1)
    mma_abt<T, D>(sc, sq, warp * 16, sk(s), lane);
    mma_abt<T, D>(dp, sdo, warp * 16, sv(s), lane);
    uint32_t fds[4][4];
    EMBER_UNROLL
    for (int n = 0; n < 8; ++n)
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        float ds[2];
        EMBER_UNROLL
        for (int c = 0; c < 2; ++c) {
          const int64_t i = row0 + 8 * h, j = int64_t(tile) * kKeys + 8 * n + 2 * t + c;
          const float p = exp2f(attention_tc::score2(P, bh, i, j, sc[n][2 * h + c]) - l2[h]);
          ds[c] = p * (dp[n][2 * h + c] * attention_detail::dropout_factor(P, bh, i, j) - dr[h]);
        }
        fds[n / 2][(n % 2) * 2 + h] = tc::pack2<T>(ds[0], ds[1]);
      }
    mma_ab<T, D>(dq_acc, fds, sk(s), lane);
    __syncthreads();
  }
  tc::cp_async_wait<0>();
  store_rows<T, D>(dq + bh * P.L * D, dq_acc, i0 + warp * 16, P.L, P.scale, lane);
}

// dq, dk, dv on the tensor cores (attention_tc_supported says when). d: the D workspace
// [BH, L] of float.
template <class T>
void attention_tc_backward(const T* q, const T* k, const T* v, const T* out, const T* dout, const float* lse, float* d,
                           T* dq, T* dk, T* dv, const attention_detail::Params<float>& P, cudaStream_t stream) {
  using namespace attention_tc;
  const int rows_per_block = attention_detail::kWarps;
  const LaunchConfig rows{dim3(unsigned((P.BH * P.L + rows_per_block - 1) / rows_per_block)),
                          dim3(attention_detail::kWarps * 32), 0};
  launch<row_dot_kernel<T, float>>(rows, stream, dout, out, d, P.BH * P.L, P.Ev);
  auto run = [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    constexpr auto dkdv = attention_tc_dkdv_kernel<T, D>;
    constexpr auto dqk = attention_tc_dq_kernel<T, D>;
    allow_dynamic_shared<dkdv>(dkdv_shared_bytes<D>());
    allow_dynamic_shared<dqk>(dq_shared_bytes<D>());
    const LaunchConfig kv{dim3(unsigned((P.S + kKeys - 1) / kKeys), unsigned(P.BH)), dim3(kThreads),
                          dkdv_shared_bytes<D>()};
    launch<dkdv>(kv, stream, q, k, v, dout, lse, static_cast<const float*>(d), dk, dv, P);
    const LaunchConfig qc{dim3(unsigned((P.L + kRows - 1) / kRows), unsigned(P.BH)), dim3(kThreads),
                          dq_shared_bytes<D>()};
    launch<dqk>(qc, stream, q, k, v, dout, lse, static_cast<const float*>(d), dq, P);
  };
  if (P.E == 64) run(std::integral_constant<int, 64>{});
  else run(std::integral_constant<int, 128>{});
}

}  // namespace ember::kernels::cuda
