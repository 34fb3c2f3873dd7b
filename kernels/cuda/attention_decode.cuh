// Fused attention forward for a few query rows against a long key/value cache: split-KV
// ("FlashDecoding"). The forward kernel of attention.cuh gives each block 16 query rows of
// one bh and walks all S keys: at decode (L = 1) that is BH blocks each using one row in
// sixteen, a few blocks on a GPU of 132 SMs. Here the keys are split instead: each warp
// takes one chunk of keys for all of its bh's L <= kRows rows and writes a partial
// (row max m, sum l of exp(s - m), unnormalized output o) to a workspace; a second kernel
// merges the partials of each row: M = max_p m_p, l = sum_p l_p e^(m_p - M),
// out = sum_p o_p e^(m_p - M) / l, lse = M + log l. Same semantics, dropout draw and lse
// as attention.cuh's forward (its Params and score rules), so its backward applies as is.
//
// Shapes: q [BH, L, E], k [BH, S, E], v [BH, S, Ev], out [BH, L, Ev], lse [BH, L];
// workspace: ml [BH, parts, L, 2] (m, l) and o [BH, parts, L, Ev], compute type C.
//
// A warp walks its chunk by tiles of 32 keys with no shared memory: for each key the
// lanes read the key's row (coalesced; lane c holds q columns c, c + 32, ...), reduce the
// dot product by shuffles, and lane jj keeps key jj's score; then the online softmax of
// attention.cuh and P V with each lane owning output columns (v rows read coalesced).
// Napkin math (decode, bf16, D = 128, S = 4096): 2 S D * 2 bytes of K and V per bh read
// once, memory bound: at H200's ~4.8 TB/s, ~0.45 us per bh-head of 4096 keys when
// enough warps are in flight, which is what the split buys (kTargetWarps below).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.cuh"

namespace ember::kernels::cuda {

namespace attention_decode {

inline constexpr int kRows = 4;  // query rows the kernel takes (per-lane registers kRows x kCols)
inline constexpr int kWarps = 4;
inline constexpr int kTile = 32;
// Chosen on its own (ops_attention.cu) for L <= kRows and S >= kMinKeys: below that the
// forward kernel's one pass over a few key tiles is as short as the extra merge launch.
inline constexpr int64_t kMinKeys = 128;
inline constexpr int64_t kMinKeysPerWarp = 64;  // no warp gets less than two tiles
inline constexpr int64_t kTargetWarps = 4096;   // ~30 per SM on 132 SMs: enough loads in flight

// Partials (warps) per bh: enough warps over the whole grid, each with a chunk of at least
// kMinKeysPerWarp keys, a multiple of kWarps.
inline int64_t parts_for(int64_t BH, int64_t S) {
  int64_t parts = (kTargetWarps + BH - 1) / BH;
  const int64_t by_keys = (S + kMinKeysPerWarp - 1) / kMinKeysPerWarp;
  parts = parts < by_keys ? parts : by_keys;
  parts = parts < 1 ? 1 : parts;
  return (parts + kWarps - 1) / kWarps * kWarps;
}

// Keys per partial: a multiple of kTile covering S with `parts` chunks.
inline int64_t chunk_for(int64_t S, int64_t parts) {
  const int64_t per = (S + parts - 1) / parts;
  return (per + kTile - 1) / kTile * kTile;
}

}  // namespace attention_decode

template <class T, class C>
__global__ void __launch_bounds__(attention_decode::kWarps * 32)
    attention_decode_partial_kernel(const T* q, const T* k, const T* v, C* ml, C* part_o, int64_t parts,
                                    int64_t chunk, attention_detail::Params<C> P) {
  using namespace attention_detail;
  constexpr int R = attention_decode::kRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t E = P.E, Ev = P.Ev, L = P.L, bh = blockIdx.y;
  const int64_t part = int64_t(blockIdx.x) * attention_decode::kWarps + warp;
  const int64_t c0 = part * chunk, c1 = c0 + chunk < P.S ? c0 + chunk : P.S;
  C qr[R][kCols], m[R], l[R], o[R][kCols];
  for (int r = 0; r < R; ++r) {
    m[r] = C(-INFINITY);
    l[r] = 0;
    for (int c = 0; c < kCols; ++c) {
      const int64_t col = lane + 32 * c;
      qr[r][c] = r < L && col < E ? widen(q[(bh * L + r) * E + col]) * P.scale : C(0);
      o[r][c] = 0;
    }
  }
  // Causal keys past the last row take no part.
  const int64_t end = P.causal && L < c1 ? (L > c0 ? L : c0) : c1;
  for (int64_t j0 = c0; j0 < end; j0 += kTile) {
    C s[R];
    for (int r = 0; r < R; ++r) s[r] = C(-INFINITY);
    for (int jj = 0; jj < kTile && j0 + jj < end; ++jj) {  // warp-uniform bound
      const int64_t j = j0 + jj;
      C kr[kCols];
      for (int c = 0; c < kCols; ++c) kr[c] = lane + 32 * c < E ? widen(k[(bh * P.S + j) * E + lane + 32 * c]) : C(0);
      for (int r = 0; r < R && r < L; ++r) {
        C dot = 0;
        for (int c = 0; c < kCols; ++c) dot += qr[r][c] * kr[c];
        dot = warp_sum(dot);
        if (lane == jj && !(P.causal && j > r)) s[r] = P.mask ? dot + P.mask[bh * P.mb + r * P.ml + j * P.ms] : dot;
      }
    }
    const int64_t j = j0 + lane;
    C pd[R] = {};
    for (int r = 0; r < R && r < L; ++r) {
      const C mx = warp_max(s[r] > m[r] ? s[r] : m[r]);
      const C shift = mx == C(-INFINITY) ? C(0) : mx;  // exp(-inf - 0) = 0 where -inf - -inf is NaN
      const C pj = exp_c(s[r] - shift), alpha = exp_c(m[r] - shift);
      l[r] = l[r] * alpha + warp_sum(pj);
      m[r] = mx;
      pd[r] = j < end ? pj * dropout_factor(P, bh, r, j) : C(0);
      for (int c = 0; c < kCols; ++c) o[r][c] *= alpha;
    }
    for (int jj = 0; jj < kTile && j0 + jj < end; ++jj) {
      C vr[kCols];
      for (int c = 0; c < kCols; ++c)
        vr[c] = lane + 32 * c < Ev ? widen(v[(bh * P.S + j0 + jj) * Ev + lane + 32 * c]) : C(0);
      for (int r = 0; r < R && r < L; ++r) {
        const C w = __shfl_sync(0xffffffffu, pd[r], jj);
        for (int c = 0; c < kCols; ++c) o[r][c] += w * vr[c];
      }
    }
  }
  for (int r = 0; r < R && r < L; ++r) {
    const int64_t at = (bh * parts + part) * L + r;
    if (lane == 0) {
      ml[2 * at] = m[r];
      ml[2 * at + 1] = l[r];
    }
    for (int c = 0; c < kCols; ++c)
      if (lane + 32 * c < Ev) part_o[at * Ev + lane + 32 * c] = o[r][c];
  }
}

// One warp per (bh, row): the partials merged in a fixed order (the same bits every run).
template <class T, class C>
__global__ void __launch_bounds__(attention_decode::kWarps * 32)
    attention_decode_merge_kernel(const C* ml, const C* part_o, T* out, C* lse, int64_t parts,
                                  attention_detail::Params<C> P) {
  using attention_detail::exp_c;
  const int64_t row = int64_t(blockIdx.x) * attention_decode::kWarps + threadIdx.x / 32;  // bh * L + i
  if (row >= P.BH * P.L) return;
  const int lane = threadIdx.x % 32;
  const int64_t bh = row / P.L, i = row % P.L, Ev = P.Ev;
  auto at = [&](int64_t p) { return (bh * parts + p) * P.L + i; };
  C M = C(-INFINITY);
  for (int64_t p = 0; p < parts; ++p) M = ml[2 * at(p)] > M ? ml[2 * at(p)] : M;
  const C shift = M == C(-INFINITY) ? C(0) : M;
  C total = 0;
  for (int64_t p = 0; p < parts; ++p) total += ml[2 * at(p) + 1] * exp_c(ml[2 * at(p)] - shift);
  const C inv = total > C(0) ? C(1) / total : C(0);  // a fully masked row: out 0, lse -inf
  for (int64_t col = lane; col < Ev; col += 32) {
    C acc = 0;
    for (int64_t p = 0; p < parts; ++p) acc += part_o[at(p) * Ev + col] * exp_c(ml[2 * at(p)] - shift);
    out[row * Ev + col] = round_to<T>(acc * inv);
  }
  if (lane == 0) {
    using std::log;
    lse[row] = total > C(0) ? M + log(total) : C(-INFINITY);
  }
}

// The launcher; L <= kRows. ml [BH, parts, L, 2] and part_o [BH, parts, L, Ev]: workspaces
// with parts = parts_for(BH, S).
template <class T, class C>
void attention_decode_forward(const T* q, const T* k, const T* v, T* out, C* lse, C* ml, C* part_o,
                              const attention_detail::Params<C>& P, cudaStream_t stream) {
  using namespace attention_decode;
  const int64_t parts = parts_for(P.BH, P.S), chunk = chunk_for(P.S, parts);
  const LaunchConfig partial{dim3(unsigned(parts / kWarps), unsigned(P.BH)), dim3(kWarps * 32), 0};
  launch<attention_decode_partial_kernel<T, C>>(partial, stream, q, k, v, ml, part_o, parts, chunk, P);
  const LaunchConfig merge{dim3(unsigned((P.BH * P.L + kWarps - 1) / kWarps)), dim3(kWarps * 32), 0};
  launch<attention_decode_merge_kernel<T, C>>(merge, stream, static_cast<const C*>(ml),
                                              static_cast<const C*>(part_o), out, lse, parts, P);
}

}  // namespace ember::kernels::cuda
