// Moving 16 channel planes (NCHW) to and from a channel-innermost block [row][col][16],
// the layout in which the Winograd transforms run 16 channels as one vector.
//
// With AVX-512 (float32), each 16 x 16 piece is moved with one masked load or store per
// row and an in-register transpose (four rounds of two-source permutes), instead of 256
// single-element moves; elsewhere plain loops do it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/common/unary_ops.h"
#include "kernels/cpu/loops.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ember::kernels::cpu {

inline constexpr int64_t kPackLanes = 16;

#if defined(__AVX512F__)
// Permute indices of transpose16's rounds: round h (8, 4, 2, 1) takes row i's elements
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

// r[j][i] = r[i][j]: round h swaps the off-diagonal h x h blocks of every 2h x 2h block.
inline void transpose16(__m512* r) {
  for (int round = 0, h = 8; round < 4; ++round, h /= 2) {
    const __m512i ilo = _mm512_load_si512(kTransposeIndices.lo[round]);
    const __m512i ihi = _mm512_load_si512(kTransposeIndices.hi[round]);
    for (int i = 0; i < 16; ++i)
      if (!(i & h)) {
        const __m512 a = r[i], b = r[i + h];
        r[i] = _mm512_permutex2var_ps(a, ilo, b);
        r[i + h] = _mm512_permutex2var_ps(a, ihi, b);
      }
  }
}
#endif

// out[((r + r0) * pcols + s + s0) * 16 + l] = src[l * plane + r * width + s] for the
// `lanes` planes (<= 16) and every r < rows, s < width, converted from the storage type T
// to the compute type C (float for the 16-bit floats). The block must hold the image
// (rows + r0 <= prows, width + s0 <= pcols); elements outside it are left as they are
// (callers zero the block once), lanes >= `lanes` are written zero.
template <class T, class C>
void pack_channels(const T* src, int64_t plane, int64_t lanes, int64_t rows, int64_t width, int64_t r0, int64_t s0,
                   int64_t pcols, C* out) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && std::is_same_v<C, float>) {
    __m512 v[16];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; c += 16) {
        const int64_t n = std::min<int64_t>(16, width - c);
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
        for (int64_t l = 0; l < 16; ++l)
          v[l] = l < lanes ? _mm512_maskz_loadu_ps(m, src + l * plane + r * width + c) : _mm512_setzero_ps();
        transpose16(v);
        T* dst = out + ((r + r0) * pcols + c + s0) * 16;
        for (int64_t j = 0; j < n; ++j) _mm512_storeu_ps(dst + j * 16, v[j]);
      }
    return;
  }
#endif
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t l = 0; l < 16; ++l) {
      const T* row = src + l * plane + r * width;
      C* dst = out + ((r + r0) * pcols + s0) * 16 + l;
      for (int64_t s = 0; s < width; ++s) dst[s * 16] = l < lanes ? cast<C>(row[s]) : C(0);
    }
}

// dst[l * plane + r * width + s] = in[(r * pcols + s) * 16 + l] + bias[l] (bias may be
// null), then max(0, .) when relu, rounded to the storage type T, for l < lanes, r < rows,
// s < width: the inverse of pack_channels. `in` must have 16 readable positions past
// each row's last (callers allocate a spare row).
template <class C, class T>
void unpack_channels(const C* in, int64_t pcols, int64_t lanes, int64_t rows, int64_t width, const T* bias, bool relu,
                     T* dst, int64_t plane) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && std::is_same_v<C, float>) {
    __m512 v[16];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < width; c += 16) {
        const int64_t n = std::min<int64_t>(16, width - c);
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
        const T* src = in + (r * pcols + c) * 16;
        for (int j = 0; j < 16; ++j) v[j] = _mm512_loadu_ps(src + j * 16);
        transpose16(v);
        for (int64_t l = 0; l < lanes; ++l) {
          __m512 o = bias ? _mm512_add_ps(v[l], _mm512_set1_ps(bias[l])) : v[l];
          if (relu) o = _mm512_max_ps(_mm512_setzero_ps(), o);  // ops::Relu: a NaN (second operand) passes
          _mm512_mask_storeu_ps(dst + l * plane + r * width + c, m, o);
        }
      }
    return;
  }
#endif
  for (int64_t l = 0; l < lanes; ++l) {
    const C b = bias ? cast<C>(bias[l]) : C(0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t s = 0; s < width; ++s) {
        const C v = in[(r * pcols + s) * 16 + l] + b;
        dst[l * plane + r * width + s] = cast<T>(relu ? ops::Relu{}(v) : v);
      }
  }
}

}  // namespace ember::kernels::cpu
