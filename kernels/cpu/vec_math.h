// Arithmetic operators and exp / sigmoid / tanh on kernels/cpu/vec.h's float vector, so
// that the formulas of kernels/common/*.h, written over a value type V, run on vectors
// as they run on scalars (kernels/cpu/rnn.cpp's cells). Only with EMBER_CPU_VEC.
//
// exp is Cephes' expf (range reduction by ln 2 in two parts, a degree-5 polynomial, the
// exponent added as integer bits): within 2 ulp of std::exp on [-87.3, 88.3], clamped
// outside (so exp(-inf) is 1.2e-38, not 0, and sigmoid never divides by infinity). tanh
// is Cephes' tanhf: its odd polynomial below |x| = 0.625, 1 - 2 / (e^{2|x|} + 1) above,
// so small arguments keep their relative precision.
#pragma once

#include "kernels/cpu/vec.h"

#if EMBER_CPU_VEC
namespace ember::kernels::cpu::simd {

#if defined(__AVX512F__)
inline Vec operator+(Vec a, Vec b) { return {_mm512_add_ps(a.v, b.v)}; }
inline Vec operator-(Vec a, Vec b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline Vec operator*(Vec a, Vec b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline Vec operator/(Vec a, Vec b) { return {_mm512_div_ps(a.v, b.v)}; }
inline Vec fmadd(Vec a, Vec b, Vec c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline Vec min(Vec a, Vec b) { return {_mm512_min_ps(a.v, b.v)}; }
inline Vec abs(Vec a) { return {_mm512_abs_ps(a.v)}; }
// a's magnitude with s's sign bit: bitwise m ? a : s (ternary-logic table 0xca).
inline Vec copysign(Vec a, Vec s) {
  const __m512i m = _mm512_set1_epi32(0x7fffffff);
  return {_mm512_castsi512_ps(_mm512_ternarylogic_epi32(m, _mm512_castps_si512(a.v), _mm512_castps_si512(s.v), 0xca))};
}
inline Vec round(Vec a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
// 2^n for integral n in [-126, 127].
inline Vec pow2(Vec n) {
  const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n.v), _mm512_set1_epi32(127));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}
#else
inline Vec operator+(Vec a, Vec b) { return {_mm256_add_ps(a.v, b.v)}; }
inline Vec operator-(Vec a, Vec b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline Vec operator*(Vec a, Vec b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline Vec operator/(Vec a, Vec b) { return {_mm256_div_ps(a.v, b.v)}; }
inline Vec fmadd(Vec a, Vec b, Vec c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline Vec min(Vec a, Vec b) { return {_mm256_min_ps(a.v, b.v)}; }
inline Vec abs(Vec a) { return {_mm256_andnot_ps(_mm256_set1_ps(-0.0f), a.v)}; }
inline Vec copysign(Vec a, Vec s) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  return {_mm256_or_ps(_mm256_andnot_ps(sign, a.v), _mm256_and_ps(sign, s.v))};
}
inline Vec round(Vec a) { return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
inline Vec pow2(Vec n) {
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n.v), _mm256_set1_epi32(127));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(e, 23))};
}
#endif

inline Vec exp(Vec x) {
  x = max(min(x, set1(88.3762626647949f)), set1(-87.3365447505531f));
  const Vec n = round(x * set1(1.44269504088896341f));
  Vec r = fmadd(n, set1(-0.693359375f), x);
  r = fmadd(n, set1(2.12194440e-4f), r);
  Vec p = set1(1.9875691500e-4f);
  p = fmadd(p, r, set1(1.3981999507e-3f));
  p = fmadd(p, r, set1(8.3334519073e-3f));
  p = fmadd(p, r, set1(4.1665795894e-2f));
  p = fmadd(p, r, set1(1.6666665459e-1f));
  p = fmadd(p, r, set1(5.0000001201e-1f));
  p = fmadd(p, r * r, r + set1(1.0f));
  return p * pow2(n);
}

inline Vec sigmoid(Vec x) { return set1(1.0f) / (set1(1.0f) + exp(zero() - x)); }

inline Vec tanh(Vec x) {
  const Vec a = abs(x);
  const Vec big = set1(1.0f) - set1(2.0f) / (exp(a + a) + set1(1.0f));
  const Vec z = x * x;
  Vec p = set1(-5.70498872745e-3f);
  p = fmadd(p, z, set1(2.06390887954e-2f));
  p = fmadd(p, z, set1(-5.37397155531e-2f));
  p = fmadd(p, z, set1(1.33314422036e-1f));
  p = fmadd(p, z, set1(-3.33332819422e-1f));
  const Vec small = fmadd(p * z, x, x);
  return select(greater(a, set1(0.625f)), copysign(big, x), small);
}

// The Act of kernels/common/*.h for vectors.
struct VecAct {
  static Vec sigmoid(Vec x) { return simd::sigmoid(x); }
  static Vec tanh(Vec x) { return simd::tanh(x); }
};

}  // namespace ember::kernels::cpu::simd
#endif
