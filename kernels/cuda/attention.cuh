// Fused attention, SIMT (no tensor cores): FlashAttention-2's tiled online softmax in
// float32 (float64 for float64 inputs; 16-bit inputs computed in float32), the same
// semantics as the CPU kernel (kernels/cpu/attention.cpp) and the same dropout mask, drawn
// from the Philox counters of each weight (kernels/common/attention_ops.h).
//
// Shapes: q [BH, L, E], k [BH, S, E], v [BH, S, Ev], out and dout [BH, L, Ev], lse and
// D [BH, L] (compute type), mask additive [BH, L, S] at strides (mb, ml, ms) or null.
// E, Ev <= kMaxHead; core checks that, and the contiguity.
//
// Forward (attention_forward_kernel): a block of kWarps warps takes kRows query rows of
// one bh, kRowsPerWarp per warp; key tiles of kTile = 32 keys go through shared memory,
// lane j scores key j, the warp reduces the max and the sum by shuffles, and each lane
// keeps the output columns lane, lane + 32, ... of its rows in registers. Causal key
// tiles past the block's last row are skipped.
//
// Backward: D = rowsum(dout * out) first (row_dot_kernel), then two kernels that need no
// atomics, so the gradients are the same bits on every run: attention_dkdv_kernel, one
// block per key tile, walks the query rows a warp each (kWarps rows a step), writes the
// rows' weights and score gradients to shared memory and adds them into the tile's dk
// and dv accumulators in shared memory in a fixed order; attention_dq_kernel, laid out
// as the forward, walks the key tiles for its rows' dq.
//
// Napkin math: per score the forward does E + Ev multiply-adds on shared-memory operands
// (one load each: SIMT reaches perhaps a quarter of the FP32 peak), the backward about
// 2.5 times that; the tensor-core kernels of issue 31 are the fast path on a GPU.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/common/attention_ops.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/types.cuh"

namespace ember::kernels::cuda {

namespace attention_detail {

inline constexpr int kTile = 32;  // keys per tile: one per lane
inline constexpr int kWarps = 4;
inline constexpr int kRowsPerWarp = 4;
inline constexpr int kRows = kWarps * kRowsPerWarp;  // query rows per block
inline constexpr int kMaxHead = 256;
inline constexpr int kCols = kMaxHead / 32;  // output columns per lane

template <class C>
struct Params {
  int64_t BH, L, S, E, Ev;
  const C* mask;
  int64_t mb, ml, ms;
  C scale;
  bool causal;
  C p;           // dropout probability, 0: none
  C keep_scale;  // 1 / (1 - p)
  uint64_t seed, offset;
};

template <class C>
__device__ __forceinline__ C exp_c(C x) {
  using std::exp;
  return exp(x);
}

template <class C>
__device__ __forceinline__ C warp_max(C v) {
  for (int m = 16; m > 0; m /= 2) {
    const C o = __shfl_xor_sync(0xffffffffu, v, m);
    v = o > v ? o : v;
  }
  return v;
}

template <class C>
__device__ __forceinline__ C warp_sum(C v) {
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// The score of query row i with key j as the softmax takes it: plus the mask, -inf past
// S, past the causal diagonal, or masked. qs: the row times scale; kt: the key, row j of
// the tile (leading dim ldk).
template <class C>
__device__ __forceinline__ C score(const Params<C>& P, int64_t bh, int64_t i, int64_t j, const C* qs, const C* kt) {
  if (j >= P.S || (P.causal && j > i)) return C(-INFINITY);
  C s = 0;
  for (int64_t e = 0; e < P.E; ++e) s += qs[e] * kt[e];
  if (P.mask != nullptr) s += P.mask[bh * P.mb + i * P.ml + j * P.ms];
  return s;
}

// Dropout's factor for weight (bh, i, j): 1 / (1 - p) kept, 0 dropped, 1 without dropout.
template <class C>
__device__ __forceinline__ C dropout_factor(const Params<C>& P, int64_t bh, int64_t i, int64_t j) {
  if (P.p <= C(0)) return C(1);
  const uint64_t idx = (uint64_t(bh) * uint64_t(P.L) + uint64_t(i)) * uint64_t(P.S) + uint64_t(j);
  return ops::AttentionDropout<C>::keep(P.seed, P.offset, idx, P.p) ? P.keep_scale : C(0);
}

// Rows [row0, row0 + n) of src [., cols] into shared dst [n, ldd] as C times mul (zero
// for rows past `rows`), by all threads of the block.
template <class T, class C>
__device__ __forceinline__ void load_tile(const T* src, int64_t row0, int64_t rows, int64_t cols, int n, C mul, C* dst,
                                          int64_t ldd) {
  const int threads = blockDim.x;
  for (int64_t x = threadIdx.x; x < int64_t(n) * cols; x += threads) {
    const int64_t r = x / cols, c = x % cols;
    dst[r * ldd + c] = row0 + r < rows ? widen(src[(row0 + r) * cols + c]) * mul : C(0);
  }
}

template <class C>
size_t forward_shared_elems(int64_t E, int64_t Ev) {
  return size_t(kRows * E + kTile * (E + 1) + kTile * Ev);
}

}  // namespace attention_detail

template <class T, class C>
__global__ void __launch_bounds__(attention_detail::kWarps * 32)
    attention_forward_kernel(const T* q, const T* k, const T* v, T* out, C* lse, attention_detail::Params<C> P) {
  using namespace attention_detail;
  EMBER_DYNAMIC_SHARED(C, smem);
  const int64_t E = P.E, Ev = P.Ev, bh = blockIdx.y, i0 = int64_t(blockIdx.x) * kRows;
  C *qs = smem, *kt = qs + kRows * E, *vt = kt + kTile * (E + 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_tile(q + bh * P.L * E, i0, P.L, E, kRows, P.scale, qs, E);
  C m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][kCols];
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = C(-INFINITY);
    l[r] = 0;
    for (int c = 0; c < kCols; ++c) o[r][c] = 0;
  }
  const int64_t last = i0 + kRows < P.L ? i0 + kRows : P.L;
  const int64_t end = P.causal ? (last < P.S ? last : P.S) : P.S;
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile(k + bh * P.S * E, j0, P.S, E, kTile, C(1), kt, E + 1);
    load_tile(v + bh * P.S * Ev, j0, P.S, Ev, kTile, C(1), vt, Ev);
    __syncthreads();
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = warp * kRowsPerWarp + r, i = i0 + row;
      if (i >= P.L) break;
      const int64_t j = j0 + lane;
      const C s = score(P, bh, i, j, qs + row * E, kt + lane * (E + 1));
      const C mx = warp_max(s > m[r] ? s : m[r]);
      const C shift = mx == C(-INFINITY) ? C(0) : mx;  // exp(-inf - 0) = 0 where -inf - -inf is NaN
      const C pj = exp_c(s - shift), alpha = exp_c(m[r] - shift);
      l[r] = l[r] * alpha + warp_sum(pj);
      m[r] = mx;
      const C pd = j < P.S ? pj * dropout_factor(P, bh, i, j) : C(0);
      for (int c = 0; c < kCols; ++c) o[r][c] *= alpha;
      for (int jj = 0; jj < kTile; ++jj) {
        const C w = __shfl_sync(0xffffffffu, pd, jj);
        for (int c = 0; c < kCols; ++c)
          if (lane + 32 * c < Ev) o[r][c] += w * vt[jj * Ev + lane + 32 * c];
      }
    }
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = i0 + warp * kRowsPerWarp + r;
    if (i >= P.L) break;
    const C inv = l[r] > C(0) ? C(1) / l[r] : C(0);  // a fully masked row: out 0, lse -inf
    for (int c = 0; c < kCols; ++c)
      if (lane + 32 * c < Ev) out[(bh * P.L + i) * Ev + lane + 32 * c] = round_to<T>(o[r][c] * inv);
    if (lane == 0) {
      using std::log;
      lse[bh * P.L + i] = l[r] > C(0) ? m[r] + log(l[r]) : C(-INFINITY);
    }
  }
}

// d[r] = sum_c dout[r, c] out[r, c], a warp per row.
template <class T, class C>
__global__ void __launch_bounds__(attention_detail::kWarps * 32)
    row_dot_kernel(const T* dout, const T* out, C* d, int64_t rows, int64_t cols) {
  const int64_t r = int64_t(blockIdx.x) * attention_detail::kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  C acc = 0;
  for (int64_t c = threadIdx.x % 32; c < cols; c += 32) acc += widen(dout[r * cols + c]) * widen(out[r * cols + c]);
  acc = attention_detail::warp_sum(acc);
  if (threadIdx.x % 32 == 0) d[r] = acc;
}

namespace attention_detail {

// Weight and score gradient of row i (lse, D given) and key j: P after dropout into pd,
// dS = P (dP z - D) returned; dp = dout_i . v_j.
template <class C>
__device__ __forceinline__ C score_grad(const Params<C>& P, int64_t bh, int64_t i, int64_t j, C s, C dp, C lse_i,
                                        C d_i, C& pd) {
  const C prob = exp_c(s - (lse_i == C(-INFINITY) ? C(0) : lse_i));  // 0 for a fully masked row
  const C z = j < P.S ? dropout_factor(P, bh, i, j) : C(0);
  pd = prob * z;
  return prob * (dp * z - d_i);
}

template <class C>
size_t dkdv_shared_elems(int64_t E, int64_t Ev) {
  return size_t(kTile * (E + 1) + kTile * (Ev + 1) + kTile * E + kTile * Ev + kWarps * (E + Ev) + 2 * kWarps * kTile);
}

}  // namespace attention_detail

template <class T, class C>
__global__ void __launch_bounds__(attention_detail::kWarps * 32)
    attention_dkdv_kernel(const T* q, const T* k, const T* v, const T* dout, const C* lse, const C* dsum, T* dk, T* dv,
                          attention_detail::Params<C> P) {
  using namespace attention_detail;
  EMBER_DYNAMIC_SHARED(C, smem);
  const int64_t E = P.E, Ev = P.Ev, bh = blockIdx.y, j0 = int64_t(blockIdx.x) * kTile;
  C *kt = smem, *vt = kt + kTile * (E + 1), *dkacc = vt + kTile * (Ev + 1), *dvacc = dkacc + kTile * E;
  C *qs = dvacc + kTile * Ev, *go = qs + kWarps * E, *pds = go + kWarps * Ev, *dss = pds + kWarps * kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_tile(k + bh * P.S * E, j0, P.S, E, kTile, C(1), kt, E + 1);
  load_tile(v + bh * P.S * Ev, j0, P.S, Ev, kTile, C(1), vt, Ev + 1);
  for (int64_t x = threadIdx.x; x < kTile * (E + Ev); x += blockDim.x) dkacc[x] = 0;  // dkacc, dvacc adjoin
  const int64_t j = j0 + lane;
  for (int64_t ib = P.causal ? j0 : 0; ib < P.L; ib += kWarps) {
    __syncthreads();  // the previous step's rows are no longer read
    load_tile(q + bh * P.L * E, ib, P.L, E, kWarps, P.scale, qs, E);
    load_tile(dout + bh * P.L * Ev, ib, P.L, Ev, kWarps, C(1), go, Ev);
    __syncthreads();
    const int64_t i = ib + warp;
    C pd = 0, ds = 0;
    if (i < P.L) {
      const C s = score(P, bh, i, j, qs + warp * E, kt + lane * (E + 1));
      C dp = 0;
      for (int64_t c = 0; c < Ev; ++c) dp += go[warp * Ev + c] * vt[lane * (Ev + 1) + c];
      ds = score_grad(P, bh, i, j, s, dp, lse[bh * P.L + i], dsum[bh * P.L + i], pd);
    }
    pds[warp * kTile + lane] = pd;
    dss[warp * kTile + lane] = ds;
    __syncthreads();
    // dv[j] += sum_w pd[w, j] dout[w]; dk[j] += sum_w ds[w, j] q[w] scale (qs holds q scale).
    for (int64_t x = threadIdx.x; x < kTile * Ev; x += blockDim.x) {
      const int64_t jj = x / Ev, c = x % Ev;
      C acc = dvacc[x];
      for (int w = 0; w < kWarps; ++w) acc += pds[w * kTile + jj] * go[w * Ev + c];
      dvacc[x] = acc;
    }
    for (int64_t x = threadIdx.x; x < kTile * E; x += blockDim.x) {
      const int64_t jj = x / E, c = x % E;
      C acc = dkacc[x];
      for (int w = 0; w < kWarps; ++w) acc += dss[w * kTile + jj] * qs[w * E + c];
      dkacc[x] = acc;
    }
  }
  __syncthreads();
  for (int64_t x = threadIdx.x; x < kTile * E; x += blockDim.x)
    if (j0 + x / E < P.S) dk[(bh * P.S + j0) * E + x] = round_to<T>(dkacc[x]);
  for (int64_t x = threadIdx.x; x < kTile * Ev; x += blockDim.x)
    if (j0 + x / Ev < P.S) dv[(bh * P.S + j0) * Ev + x] = round_to<T>(dvacc[x]);
}

template <class T, class C>
__global__ void __launch_bounds__(attention_detail::kWarps * 32)
    attention_dq_kernel(const T* q, const T* k, const T* v, const T* dout, const C* lse, const C* dsum, T* dq,
                        attention_detail::Params<C> P) {
  using namespace attention_detail;
  EMBER_DYNAMIC_SHARED(C, smem);
  const int64_t E = P.E, Ev = P.Ev, bh = blockIdx.y, i0 = int64_t(blockIdx.x) * kRows;
  C *qs = smem, *go = qs + kRows * E, *kt = go + kRows * Ev, *vt = kt + kTile * (E + 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  load_tile(q + bh * P.L * E, i0, P.L, E, kRows, P.scale, qs, E);
  load_tile(dout + bh * P.L * Ev, i0, P.L, Ev, kRows, C(1), go, Ev);
  C acc[kRowsPerWarp][kCols];
  for (auto& row : acc)
    for (C& x : row) x = 0;
  const int64_t last = i0 + kRows < P.L ? i0 + kRows : P.L;
  const int64_t end = P.causal ? (last < P.S ? last : P.S) : P.S;
  for (int64_t j0 = 0; j0 < end; j0 += kTile) {
    __syncthreads();
    load_tile(k + bh * P.S * E, j0, P.S, E, kTile, C(1), kt, E + 1);
    load_tile(v + bh * P.S * Ev, j0, P.S, Ev, kTile, C(1), vt, Ev + 1);
    __syncthreads();
    const int64_t j = j0 + lane;
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int64_t row = warp * kRowsPerWarp + r, i = i0 + row;
      if (i >= P.L) break;
      const C s = score(P, bh, i, j, qs + row * E, kt + lane * (E + 1));
      C dp = 0;
      for (int64_t c = 0; c < Ev; ++c) dp += go[row * Ev + c] * vt[lane * (Ev + 1) + c];
      C pd;
      const C ds = score_grad(P, bh, i, j, s, dp, lse[bh * P.L + i], dsum[bh * P.L + i], pd);
      for (int jj = 0; jj < kTile; ++jj) {
        const C w = __shfl_sync(0xffffffffu, ds, jj);
        for (int c = 0; c < kCols; ++c)
          if (lane + 32 * c < E) acc[r][c] += w * kt[jj * (E + 1) + lane + 32 * c];
      }
    }
  }
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int64_t i = i0 + warp * kRowsPerWarp + r;
    if (i >= P.L) break;
    for (int c = 0; c < kCols; ++c)
      if (lane + 32 * c < E) dq[(bh * P.L + i) * E + lane + 32 * c] = round_to<T>(acc[r][c] * P.scale);
  }
}

// The launchers. d: the backward's D workspace [BH, L] of C.
template <class T, class C>
void attention_forward(const T* q, const T* k, const T* v, T* out, C* lse, const attention_detail::Params<C>& P,
                       cudaStream_t stream) {
  using namespace attention_detail;
  const size_t bytes = forward_shared_elems<C>(P.E, P.Ev) * sizeof(C);
  allow_dynamic_shared<attention_forward_kernel<T, C>>(bytes);
  const LaunchConfig cfg{dim3(unsigned((P.L + kRows - 1) / kRows), unsigned(P.BH)), dim3(kWarps * 32), bytes};
  launch<attention_forward_kernel<T, C>>(cfg, stream, q, k, v, out, lse, P);
}

template <class T, class C>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const T* dout, const C* lse, C* d, T* dq,
                        T* dk, T* dv, const attention_detail::Params<C>& P, cudaStream_t stream) {
  using namespace attention_detail;
  const LaunchConfig rows{dim3(unsigned((P.BH * P.L + kWarps - 1) / kWarps)), dim3(kWarps * 32), 0};
  launch<row_dot_kernel<T, C>>(rows, stream, dout, out, d, P.BH * P.L, P.Ev);
  const size_t kv_bytes = dkdv_shared_elems<C>(P.E, P.Ev) * sizeof(C);
  allow_dynamic_shared<attention_dkdv_kernel<T, C>>(kv_bytes);
  const LaunchConfig kv{dim3(unsigned((P.S + kTile - 1) / kTile), unsigned(P.BH)), dim3(kWarps * 32), kv_bytes};
  launch<attention_dkdv_kernel<T, C>>(kv, stream, q, k, v, dout, lse, static_cast<const C*>(d), dk, dv, P);
  const size_t q_bytes = size_t(kRows * (P.E + P.Ev) + kTile * (P.E + 1) + kTile * (P.Ev + 1)) * sizeof(C);
  allow_dynamic_shared<attention_dq_kernel<T, C>>(q_bytes);
  const LaunchConfig qc{dim3(unsigned((P.L + kRows - 1) / kRows), unsigned(P.BH)), dim3(kWarps * 32), q_bytes};
  launch<attention_dq_kernel<T, C>>(qc, stream, q, k, v, dout, lse, static_cast<const C*>(d), dq, P);
}

}  // namespace ember::kernels::cuda
