// 16-bit floating types: BFloat16 (8-bit exponent) and Half (IEEE binary16).
// Storage only: arithmetic converts to float, computes, and rounds back (round to
// nearest even), which is also what the CUDA backend does for elementwise work.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/macros.h"

namespace ember {

namespace detail {
EMBER_HD inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
EMBER_HD inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  EMBER_HD BFloat16(float f) {  // NOLINT: implicit like a built-in float type
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN, keep the sign
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  EMBER_HD operator float() const { return detail::bits_float(uint32_t(bits) << 16); }
  static EMBER_HD BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  EMBER_HD Half(float f) {  // NOLINT
    uint32_t u = detail::float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {  // NaN
      bits = static_cast<uint16_t>(sign | 0x7e00u);
    } else if (a >= 0x47800000u) {  // >= 65536: infinity (65520..65536 overflow in rounding below)
      bits = static_cast<uint16_t>(sign | 0x7c00u);
    } else if (a < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal
      // Adding 0.5 lets the FPU do the round-to-nearest-even of the denormal shift.
      float r = detail::bits_float(a) + 0.5f;
      bits = static_cast<uint16_t>(sign | (detail::float_bits(r) - 0x3f000000u));
    } else {
      uint32_t mant_odd = (a >> 13) & 1u;
      a += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
      bits = static_cast<uint16_t>(sign | (a >> 13));
    }
  }
  EMBER_HD operator float() const {
    uint32_t sign = uint32_t(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu;
    uint32_t mant = bits & 0x3ffu;
    if (exp == 0x1f) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {  // zero or subnormal: mant * 2^-24
      float m = float(mant) * 5.9604644775390625e-8f;
      return sign ? -m : m;
    }
    return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  }
  static EMBER_HD Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

}  // namespace ember
