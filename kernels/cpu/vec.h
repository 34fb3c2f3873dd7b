// A float32 vector for the hand-vectorized CPU kernels, one type for both instruction
// sets: 16 lanes of AVX-512 or 8 of AVX2 (with FMA), chosen by the compiler's macros, so
// -march (EMBER_CPU_ARCH) decides which one a build has. Without either, EMBER_CPU_VEC is
// 0 and the kernels keep their plain loops (the scalar fallback).
//
// Only the operations the kernels use are here, each with the meaning of its AVX-512
// intrinsic, so a kernel written once over Vec gives the same bits on both widths:
// everything is a move, a compare or a select except add and max, which round the same.
// Partial vectors go through first(n) masks: masked loads read nothing past the n-th lane
// (and give zero there), masked stores write nothing past it. Rows of at least a vector
// avoid them altogether (chunk_start).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#define EMBER_CPU_VEC 1
#else
#define EMBER_CPU_VEC 0
#endif

namespace ember::kernels::cpu::simd {

#if defined(__AVX512F__)

inline constexpr int kLanes = 16;
struct Vec { __m512 v; };
struct IVec { __m512i v; };   // int32 lanes
struct Mask { __mmask16 m; };

inline Mask first(int64_t n) { return {static_cast<__mmask16>(n >= 16 ? 0xffff : n <= 0 ? 0 : (1u << n) - 1)}; }
inline Mask operator|(Mask a, Mask b) { return {static_cast<__mmask16>(a.m | b.m)}; }
inline Mask and_not(Mask a, Mask b) { return {static_cast<__mmask16>(a.m & ~b.m)}; }  // a and not b

inline Vec zero() { return {_mm512_setzero_ps()}; }
inline Vec set1(float x) { return {_mm512_set1_ps(x)}; }
inline Vec load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline Vec load(const float* p, Mask m) { return {_mm512_maskz_loadu_ps(m.m, p)}; }
inline void store(float* p, Vec a) { _mm512_storeu_ps(p, a.v); }
inline void store(float* p, Vec a, Mask m) { _mm512_mask_storeu_ps(p, m.m, a.v); }

inline Vec add(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
inline Vec max(Vec a, Vec b) { return {_mm512_max_ps(a.v, b.v)}; }  // b where either is NaN
inline Mask greater(Vec a, Vec b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ)}; }
inline Mask is_nan(Vec a) { return {_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q)}; }
inline Vec select(Mask m, Vec yes, Vec no) { return {_mm512_mask_mov_ps(no.v, m.m, yes.v)}; }

inline IVec iset1(int32_t x) { return {_mm512_set1_epi32(x)}; }
inline IVec select(Mask m, IVec yes, IVec no) { return {_mm512_mask_mov_epi32(no.v, m.m, yes.v)}; }
inline Mask equal(IVec a, IVec b) { return {_mm512_cmpeq_epi32_mask(a.v, b.v)}; }
// The first n bytes at p, widened to int32 lanes (zero past n); and back.
inline IVec load_u8(const uint8_t* p, int64_t n) { return {_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(first(n).m, p))}; }
inline void store_u8(uint8_t* p, IVec a, int64_t n) {
  if (n >= 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(a.v));
  else _mm_mask_storeu_epi8(p, first(n).m, _mm512_cvtepi32_epi8(a.v));
}

// Lanes 0, 2, 4, ... and 1, 3, 5, ... of the 2 * kLanes floats a:b.
inline Vec even(Vec a, Vec b) {
  const __m512i i = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  return {_mm512_permutex2var_ps(a.v, i, b.v)};
}
inline Vec odd(Vec a, Vec b) {
  const __m512i i = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return {_mm512_permutex2var_ps(a.v, i, b.v)};
}
// a0 b0 a1 b1 ... from the lower halves of a and b, and from the upper halves.
inline Vec interleave_lo(Vec a, Vec b) {
  const __m512i i = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  return {_mm512_permutex2var_ps(a.v, i, b.v)};
}
inline Vec interleave_hi(Vec a, Vec b) {
  const __m512i i = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  return {_mm512_permutex2var_ps(a.v, i, b.v)};
}

// Permute indices of transpose()'s rounds: round h (8, 4, 2, 1) takes row i's elements
// where (j & h) == 0 and row (i + h)'s shifted down where it is set (lo), and the rest (hi).
struct TransposeIndices {
  alignas(64) int32_t lo[4][16], hi[4][16];
  constexpr TransposeIndices() : lo{}, hi{} {
    for (int r = 0, h = 8; r < 4; ++r, h /= 2)
      for (int j = 0; j < 16; ++j) {
        lo[r][j] = (j & h) ? 16 + (j - h) : j;
        hi[r][j] = (j & h) ? 16 + j : j + h;
      }
  }
};
inline constexpr TransposeIndices kTransposeIndices{};

// r[j][i] = r[i][j] for the kLanes x kLanes block r: round h swaps the off-diagonal h x h
// blocks of every 2h x 2h block.
inline void transpose(Vec* r) {
  for (int round = 0, h = 8; round < 4; ++round, h /= 2) {
    const __m512i ilo = _mm512_load_si512(kTransposeIndices.lo[round]);
    const __m512i ihi = _mm512_load_si512(kTransposeIndices.hi[round]);
    for (int i = 0; i < 16; ++i)
      if (!(i & h)) {
        const __m512 a = r[i].v, b = r[i + h].v;
        r[i].v = _mm512_permutex2var_ps(a, ilo, b);
        r[i + h].v = _mm512_permutex2var_ps(a, ihi, b);
      }
  }
}

#elif EMBER_CPU_VEC  // AVX2 + FMA

inline constexpr int kLanes = 8;
struct Vec { __m256 v; };
struct IVec { __m256i v; };
struct Mask { __m256 m; };  // all ones or all zeros per lane

inline Mask first(int64_t n) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int32_t k = static_cast<int32_t>(n < 0 ? 0 : n > 8 ? 8 : n);
  return {_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(k), lane))};
}
inline Mask operator|(Mask a, Mask b) { return {_mm256_or_ps(a.m, b.m)}; }
inline Mask and_not(Mask a, Mask b) { return {_mm256_andnot_ps(b.m, a.m)}; }

inline Vec zero() { return {_mm256_setzero_ps()}; }
inline Vec set1(float x) { return {_mm256_set1_ps(x)}; }
inline Vec load(const float* p) { return {_mm256_loadu_ps(p)}; }
inline Vec load(const float* p, Mask m) { return {_mm256_maskload_ps(p, _mm256_castps_si256(m.m))}; }
inline void store(float* p, Vec a) { _mm256_storeu_ps(p, a.v); }
inline void store(float* p, Vec a, Mask m) { _mm256_maskstore_ps(p, _mm256_castps_si256(m.m), a.v); }

inline Vec add(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
inline Vec max(Vec a, Vec b) { return {_mm256_max_ps(a.v, b.v)}; }  // b where either is NaN
inline Mask greater(Vec a, Vec b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)}; }
inline Mask is_nan(Vec a) { return {_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q)}; }
inline Vec select(Mask m, Vec yes, Vec no) { return {_mm256_blendv_ps(no.v, yes.v, m.m)}; }

inline IVec iset1(int32_t x) { return {_mm256_set1_epi32(x)}; }
inline IVec select(Mask m, IVec yes, IVec no) {
  return {_mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(no.v), _mm256_castsi256_ps(yes.v), m.m))};
}
inline Mask equal(IVec a, IVec b) { return {_mm256_castsi256_ps(_mm256_cmpeq_epi32(a.v, b.v))}; }
inline IVec load_u8(const uint8_t* p, int64_t n) {
  uint64_t bytes = 0;
  if (n >= 8) std::memcpy(&bytes, p, 8);
  else for (int64_t i = 0; i < n; ++i) bytes |= uint64_t(p[i]) << (8 * i);
  return {_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(bytes)))};
}
inline void store_u8(uint8_t* p, IVec a, int64_t n) {  // lanes hold 0..255
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(a.v), _mm256_extracti128_si256(a.v, 1));
  const uint64_t bytes = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_packus_epi16(w, w)));
  if (n >= 8) std::memcpy(p, &bytes, 8);
  else for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(bytes >> (8 * i));
}

// shuffle_ps works within 128-bit halves; permute4x64 puts the halves' pairs in order.
inline Vec even(Vec a, Vec b) {
  const __m256 s = _mm256_shuffle_ps(a.v, b.v, _MM_SHUFFLE(2, 0, 2, 0));  // a0 a2 b0 b2 | a4 a6 b4 b6
  return {_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)))};
}
inline Vec odd(Vec a, Vec b) {
  const __m256 s = _mm256_shuffle_ps(a.v, b.v, _MM_SHUFFLE(3, 1, 3, 1));
  return {_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(s), _MM_SHUFFLE(3, 1, 2, 0)))};
}
inline Vec interleave_lo(Vec a, Vec b) {
  const __m256 l = _mm256_unpacklo_ps(a.v, b.v), h = _mm256_unpackhi_ps(a.v, b.v);  // a0 b0 a1 b1 | a4 b4 a5 b5
  return {_mm256_permute2f128_ps(l, h, 0x20)};
}
inline Vec interleave_hi(Vec a, Vec b) {
  const __m256 l = _mm256_unpacklo_ps(a.v, b.v), h = _mm256_unpackhi_ps(a.v, b.v);
  return {_mm256_permute2f128_ps(l, h, 0x31)};
}

// r[j][i] = r[i][j] for the 8 x 8 block r: 2 x 2 and 4 x 4 blocks within the 128-bit
// halves by unpacks and shuffles, then the halves across rows i and i + 4.
inline void transpose(Vec* r) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i].v, r[i + 1].v);
    t[i + 1] = _mm256_unpackhi_ps(r[i].v, r[i + 1].v);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i].v = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4].v = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

#endif

#if EMBER_CPU_VEC
// The first n (<= kLanes) floats at p, zero past them; and the store of the first n.
// Whole vectors take the plain load and store: AMD's CPUs run AVX2's masked store
// (vmaskmovps) as microcode, many times slower than a plain one.
inline Vec load_n(const float* p, int64_t n) { return n >= kLanes ? load(p) : n > 0 ? load(p, first(n)) : zero(); }
inline void store_n(float* p, Vec a, int64_t n) {
  if (n >= kLanes) store(p, a);
  else if (n > 0) store(p, a, first(n));
}

// Where the chunk that covers element c of a row of n elements starts, when the row goes
// kLanes at a time: a row of at least kLanes takes its last chunk at n - kLanes,
// overlapping the one before it (which the caller recomputes to the same values), so
// that every chunk is whole; a shorter row has one partial chunk at 0.
inline int64_t chunk_start(int64_t c, int64_t n) { return n >= kLanes && c + kLanes > n ? n - kLanes : c; }
#endif

}  // namespace ember::kernels::cpu::simd
